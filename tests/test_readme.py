"""What the README and the docs pages promise holds: every path they name is in a clone, every `envgen.x.y`
Python name they give resolves, every command line they show exists with its options, every page README
links to exists and every docs page is linked from README."""

from __future__ import annotations

import glob
import importlib
import importlib.util
import itertools
import os
import posixpath
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest
import typer.main

from envgen.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
PAGES = ["README.md", *DOCS]
"""README.md and every docs page: each is held to the same promises."""

KNOWN = {
    "README.md": {"bench/RESULTS.md", "scripts/test.sh", ".ci/run", "docs/architecture.md", "envgen.rl.build_trainer",
                  "envgen build general --category travel-planning --out packs/travel"},
    "docs/architecture.md": {"envgen/errors.py", "tests/test_architecture.py", "envs/runtime/", "verifiers/",
                             "envgen.build.family.Family", "envgen.build.offline", "envgen families"},
    "docs/packs.md": {"verifiers/envgen_verifiers/state.py", "envgen.pack.load", "envgen.build.gate",
                      "envgen validate PACK"},
    "docs/sandboxes.md": {"envs/runtime/supervisor.py", "bench/RESULTS.md", "envgen.sandbox.Sandbox",
                          "envgen sandbox gc"},
    "docs/rl.md": {"rl/configs/deepseek_v32.yaml", "rl/train.py", "envgen.rl.environment_class"},
    "docs/families.md": {"envs/search/env/tools.py", "envs/code/env/tools.py", "envgen.build.sdk.Generated"},
}
"""Things each page must be found to name (a path, a Python name or a command line): a parse that finds
nothing would otherwise pass every check below vacuously."""
MIN_DOCS = 8


def _text(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


def _tracked() -> list[str]:
    """The files a clone has: those git tracks."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: cannot tell what a clone holds")
    return subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()


def _expand(path: str) -> list[str]:
    """`rl/templates/{a,b}.jinja` -> both names; `envs/<family>/x.py` -> the glob `envs/*/x.py`."""
    path = re.sub(r"<[^>]+>", "*", path)
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return list(itertools.chain.from_iterable(_expand(path[:m.start()] + alt + path[m.end():])
                                              for alt in m.group(1).split(",")))


def _without_code(text: str) -> str:
    return re.sub(r"```.*?```", "", text, flags=re.S)


def page_links(text: str, base: str = "") -> list[tuple[str, str]]:
    """(target path resolved against the page's folder `base`, anchor) for every relative Markdown link of a
    page; ("", anchor) for a link to a section of the page itself. URLs are left out."""
    out = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(text)):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        if path:
            path = posixpath.normpath(posixpath.join(base, path)) + ("/" if path.endswith("/") else "")
        out.append((path, anchor))
    return out


def page_paths(text: str, top: set[str], base: str = "") -> set[str]:
    """The repository paths a page names: words of its code spans and code blocks whose first component is a
    top-level entry of the repository, or that climb out of it (`../`), and its link targets (resolved
    against the page's folder `base`)."""
    spans = re.findall(r"```.*?```|`[^`]+`", text, flags=re.S)
    found = set()
    for word in itertools.chain.from_iterable(s.strip("`").split() for s in spans):
        word = word.rstrip(".,;:)")
        if "://" in word or "/" not in word or re.fullmatch(r"\w+/[\w-]+-v\d+", word):
            continue  # a URL, a bare name, or a Gymnasium id (envgen/Pack-v0)
        if word.startswith("../") or word.split("/", 1)[0] in top:
            found.add(word)
    found |= {path for path, _ in page_links(text, base) if path}
    return found


def python_names(text: str) -> set[str]:
    """`envgen.pack.load`, `envgen.sandbox.Sandbox`, ...: the dotted envgen names a page gives."""
    return set(re.findall(r"\benvgen(?:\.[A-Za-z_]\w*)+", text))


@pytest.mark.parametrize("page", PAGES)
def test_every_path_a_page_names_is_in_a_clone(page):
    tracked = _tracked()
    top = {p.split("/", 1)[0] for p in tracked}
    names = set(tracked) | {str(Path(p).parent) + "/" for p in tracked} | {
        "/".join(p.split("/")[:i]) + "/" for p in tracked for i in range(1, p.count("/") + 1)}
    paths = page_paths(_text(page), top, posixpath.dirname(page))
    assert paths, f"{page} names no repository path: the parse found nothing"
    missing = []
    for p in sorted(paths):
        if p.startswith("../"):
            missing.append(p)  # outside the repository: no clone has it
            continue
        pats = [q.rstrip("/") for q in _expand(p)]
        if not all(any(glob.fnmatch.fnmatch(n.rstrip("/"), q) for n in names) for q in pats):
            missing.append(p)
    assert missing == [], f"{page} names paths a clone lacks: {missing}"


def test_the_path_check_catches_a_missing_file_and_an_outside_one():
    top = {"bench", "envgen", "docs"}
    assert page_paths("see `bench/NOPE.md`, [map](../shared/DESIGN.md), `hf://org/x`, `a/b`, `envgen/Pack-v0`",
                      top) == {"bench/NOPE.md", "../shared/DESIGN.md"}
    # from a docs page, links resolve against docs/ while code spans name paths from the repository root
    assert page_paths("[a](sandboxes.md#verification), [b](../bench/RESULTS.md), [c](../../x.md), `envgen/cli.py`",
                      top, "docs") == {"docs/sandboxes.md", "bench/RESULTS.md", "../x.md", "envgen/cli.py"}


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_name_what_they_are_known_to_name(page):
    text = _text(page)
    found = (page_paths(text, {p.split("/", 1)[0] for p in _tracked()}, posixpath.dirname(page))
             | python_names(text) | set(_spans_with_commands(text)))
    assert sorted(KNOWN.get(page, set()) - found) == [], f"{page}: not found, so a check here would be vacuous"


# ---------------------------------------------------------------------------------------------- docs pages


def test_readme_links_every_docs_page_and_only_pages_that_exist():
    assert len(DOCS) >= MIN_DOCS, f"expected at least {MIN_DOCS} docs pages, found {DOCS}"
    assert set(KNOWN) <= set(PAGES), f"KNOWN names pages that are gone: {sorted(set(KNOWN) - set(PAGES))}"
    linked = {path for path, _ in page_links(README) if path.startswith("docs/") and path.endswith(".md")}
    assert sorted(linked - set(DOCS)) == [], "README links to docs pages that do not exist"
    assert sorted(set(DOCS) - linked) == [], "docs pages README does not link to"


def slug(heading: str) -> str:
    """A heading's anchor as GitHub renders it: lower case, punctuation dropped, spaces -> hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", _without_code(text), flags=re.M)}


@pytest.mark.parametrize("page", PAGES)
def test_every_section_a_page_links_to_exists(page):
    bad = []
    for path, anchor in page_links(_text(page), posixpath.dirname(page)):
        target = path or page
        if anchor and target.endswith(".md") and (ROOT / target).is_file() and anchor not in anchors(_text(target)):
            bad.append(f"{target}#{anchor}")
    assert bad == [], f"{page} links to sections that do not exist: {bad}"


def test_slugs_are_githubs():
    assert slug("The `Family` interface") == "the-family-interface"
    assert slug("Packs, verifiers and the red-team gate") == "packs-verifiers-and-the-red-team-gate"
    assert anchors("# A\n```\n# not a heading\n```\n## envgen check\n") == {"a", "envgen-check"}


# ---------------------------------------------------------------------------------------------- package trees


def tree_entries(text: str, root: str = "envgen/") -> list[str]:
    """The paths of the code-block tree that starts with the line `root`, in order: `├── pack/` then
    `│   ├── format.py` give `envgen/pack/` and `envgen/pack/format.py`."""
    blocks = [b for b in re.findall(r"```\w*\n(.*?)```", text, flags=re.S) if b.startswith(root + "\n")]
    assert blocks, f"no tree starting with {root!r}"
    stack, out = [root.rstrip("/")], []
    for line in blocks[0].splitlines()[1:]:
        m = re.match(r"((?:│   |    )*)[├└]── (\S+)", line)
        assert m, f"not a tree line: {line!r}"
        depth, name = len(m.group(1)) // 4, m.group(2)
        stack = stack[:depth + 1]
        out.append("/".join(stack + [name]))
        if name.endswith("/"):
            stack.append(name.rstrip("/"))
    return out


def test_the_tree_parser_follows_depth():
    text = "```\nenvgen/\n├── a.py    x\n├── pack/\n│   ├── f.py\n│   └── sub/\n│       └── g.py\n└── cli.py\n```"
    assert tree_entries(text) == ["envgen/a.py", "envgen/pack/", "envgen/pack/f.py", "envgen/pack/sub/",
                                  "envgen/pack/sub/g.py", "envgen/cli.py"]


def _layer_of():
    spec = importlib.util.spec_from_file_location("_envgen_layers", ROOT / "tests" / "test_architecture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.layer_of


def _layer_order(entries: list[str]) -> list[tuple[int, str]]:
    """(layer, entry) for the package's top-level entries (the package's own __init__ is layer -1)."""
    layer_of = _layer_of()
    out = []
    for e in entries:
        if e.count("/") - e.endswith("/") != 1:
            continue
        name = e.split("/")[1].removesuffix(".py")
        out.append((layer_of("envgen" if name == "__init__" else f"envgen.{name}"), e))
    return out


def test_the_architecture_page_lists_every_module_in_layer_order():
    entries = tree_entries(_text("docs/architecture.md"))
    modules = {p for p in _tracked() if p.startswith("envgen/") and p.endswith(".py")}
    listed = {e for e in entries if e.endswith(".py")}
    assert len(modules) > 60
    assert sorted(modules - listed) == [], "docs/architecture.md: modules missing from the package tree"
    assert sorted(listed - modules) == [], "docs/architecture.md: the package tree lists modules that do not exist"
    order = _layer_order(entries)
    assert order == sorted(order, key=lambda t: t[0]), "docs/architecture.md: the tree is not in layer order"


def test_the_readme_lists_the_repository_and_every_package_in_layer_order():
    tracked = _tracked()
    entries = tree_entries(README)
    tops = {p.split("/")[1] + ("/" if p.count("/") > 1 else "") for p in tracked if p.startswith("envgen/")}
    tops -= {"__init__.py", "__main__.py"}
    assert sorted(tops - {e.removeprefix("envgen/") for e in entries}) == [], "README: packages missing from the tree"
    order = _layer_order(entries)
    assert len(order) == len(entries) and order == sorted(order, key=lambda t: t[0]), "README: not in layer order"
    layout = README.split("## Layout", 1)[1]
    listed = set(re.findall(r"^([\w.-]+/) ", layout.split("```", 2)[1], flags=re.M))
    folders = {p.split("/", 1)[0] + "/" for p in tracked if "/" in p and not p.startswith(".")}
    assert sorted(folders - listed) == [], "README: top-level folders missing from the Layout tree"


# ---------------------------------------------------------------------------------------------- command lines


def _command_lines() -> list[str]:
    """The command lines of the README's "Command line" table ("`envgen a` / `--more`" continues the line before)."""
    section = README.split("## Command line", 1)[1].split("\n## ", 1)[0]
    lines = []
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        for span in re.findall(r"`([^`]+)`", row.split(" | ")[0]):
            span = span.replace("\\|", "|")
            if span.startswith("envgen "):
                lines.append(span)
            elif lines:
                lines[-1] += " " + span
    return lines


def _spans_with_commands(text: str) -> list[str]:
    """The envgen command lines a page shows: inline code spans that start with `envgen`, and the commands of
    its shell code blocks (split at `&&`; `.venv/bin/envgen ...` counts)."""
    lines = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        if lang in ("bash", "sh", "console"):
            for part in re.split(r"&&|\n", body):
                part = re.sub(r"^(?:\$\s+)?(?:\S*/)?envgen(?=\s|$)", "envgen", part.strip())
                if part == "envgen" or part.startswith("envgen "):
                    lines.append(part)
    for span in re.findall(r"`([^`]+)`", _without_code(text)):
        span = " ".join(span.replace("\\|", "|").split())
        if span == "envgen" or span.startswith("envgen "):
            lines.append(span)
    return lines


def _options(words: list[str]) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", " ".join(words)))


def _resolve(line: str) -> list[tuple[tuple[str, ...], set[str]]]:
    """`envgen image base [--suite S]` -> [(("image", "base"), {"--suite"})], resolving subcommands on the real
    CLI. An upper-case word where a subcommand goes stands for each of them (`envgen build FAMILY --help`: every
    family); a group with only options after it (`envgen --version`, `envgen build --help`) is a command line too."""
    words = line.split()[1:]
    group, path = typer.main.get_command(app), []
    while hasattr(group, "list_commands") and words and not words[0].startswith(("-", "[")):
        if hasattr(group, "route"):  # a group with a default command: `envgen eval PACK` is `envgen eval pass-at-k PACK`
            words = group.route(words)
        names = group.list_commands(None)
        if words[0] in names:
            group = group.get_command(None, words[0])
            path.append(words.pop(0))
        elif re.fullmatch(r"[A-Z][A-Z_]*", words[0]):
            assert names, f"{line!r}: {words[0]} stands for a subcommand of an empty group"
            return [r for name in names for r in _resolve(" ".join(["envgen", *path, name, *words[1:]]))]
        else:
            break
    if hasattr(group, "list_commands"):
        assert all(w.lstrip("[").startswith("-") for w in words), f"command {line!r}: no such envgen command"
    return [(tuple(path), _options(words))]


@cache
def help_options(path: tuple[str, ...]) -> frozenset[str]:
    """The options `envgen PATH --help` lists."""
    p = subprocess.run([sys.executable, "-m", "envgen", *path, "--help"], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "200"}, timeout=120)
    assert p.returncode == 0, p.stderr
    return frozenset(_options([p.stdout]))


def _check_commands(where: str, lines: list[str]) -> None:
    wanted = [(line, path, options) for line in lines for path, options in _resolve(line)]
    paths = sorted({path for _, path, _ in wanted})
    with ThreadPoolExecutor(8) as pool:
        seen = dict(zip(paths, pool.map(help_options, paths)))
    for line, path, options in wanted:
        assert options <= seen[path], f"{where}: {line!r} names {sorted(options - seen[path])}, not in --help"


def test_the_command_resolver_expands_placeholders_and_refuses_unknown_commands():
    assert _resolve("envgen image base [--suite bookworm]") == [(("image", "base"), {"--suite"})]
    assert _resolve("envgen --version") == [((), {"--version"})]
    families = _resolve("envgen build FAMILY --help")
    assert ("build", "general") in [p for p, _ in families] and all(o == {"--help"} for _, o in families)
    with pytest.raises(AssertionError, match="no such envgen command"):
        _resolve("envgen build nosuchfamily --out x")
    assert _spans_with_commands("`envgen ls DIR`, `pip x`\n```bash\nx && .venv/bin/envgen run P --task T\n```") == [
        "envgen run P --task T", "envgen ls DIR"]


def test_every_readme_command_exists_with_its_options():
    lines = _command_lines()
    assert len(lines) >= 18 and any(" image base " in f" {c} " for c in lines)
    assert "envgen build FAMILY --help" in lines and any(c.startswith("envgen families") for c in lines)
    _check_commands("README.md", lines)


@pytest.mark.parametrize("page", PAGES)
def test_every_command_a_page_shows_exists_with_its_options(page):
    _check_commands(page, _spans_with_commands(_text(page)))


# ---------------------------------------------------------------------------------------------- Python names

EXTRAS = {"torch", "trl", "transformers", "accelerate", "ray", "ddgs"}
"""Optional dependencies: a module that needs one exists even where the extra is not installed."""


def resolves(name: str) -> bool:
    """Whether a dotted envgen name is a module or an attribute of one."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as e:
            if e.name in EXTRAS:
                return True  # an extra's module (envgen.rl.trainer) that exists but needs the extra
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_the_name_check_catches_a_missing_name():
    assert resolves("envgen.pack.load") and resolves("envgen.episodes.gym.PackEnv")
    assert not resolves("envgen.gym.PackEnv") and not resolves("envgen.pack.nope")


@pytest.mark.parametrize("page", PAGES)
def test_every_python_name_a_page_gives_exists(page):
    """`envgen.pack.load`, `envgen.sandbox.Sandbox`, ...: each resolves to a module or one of its attributes."""
    missing = [name for name in sorted(python_names(_text(page))) if not resolves(name)]
    assert missing == [], f"{page} names Python objects that do not exist: {missing}"


def test_the_docs_give_python_names():
    names = set().union(*(python_names(_text(p)) for p in DOCS))
    assert len(names) >= 40, f"the docs pages give only {len(names)} envgen names: is the parse broken?"
