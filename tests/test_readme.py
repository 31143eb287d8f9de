"""What the README promises holds: every path it names is in a clone, every command line it lists exists."""

from __future__ import annotations

import glob
import itertools
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import typer.main

from envgen.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


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


def readme_paths(text: str, top: set[str]) -> set[str]:
    """Words of the README's code spans, code blocks and link targets that name a path in the repository: those
    whose first component is a top-level entry of the repository, or that climb out of it (`../`)."""
    spans = re.findall(r"```.*?```|`[^`]+`", text, flags=re.S) + re.findall(r"\]\(([^)\s]+)\)", text)
    found = set()
    for word in itertools.chain.from_iterable(s.strip("`").split() for s in spans):
        word = word.rstrip(".,;:)")
        if "://" in word or "/" not in word or re.fullmatch(r"\w+/[\w-]+-v\d+", word):
            continue  # a URL, a bare name, or a Gymnasium id (envgen/Pack-v0)
        if word.startswith("../") or word.split("/", 1)[0] in top:
            found.add(word)
    return found


def test_every_path_the_readme_names_is_in_a_clone():
    tracked = _tracked()
    top = {p.split("/", 1)[0] for p in tracked}
    names = set(tracked) | {str(Path(p).parent) + "/" for p in tracked} | {
        "/".join(p.split("/")[:i]) + "/" for p in tracked for i in range(1, p.count("/") + 1)}
    paths = readme_paths(README, top)
    assert {"bench/RESULTS.md", "scripts/test.sh", ".ci/run", "rl/configs/deepseek_v32.yaml"} <= paths  # not vacuous
    missing = []
    for p in sorted(paths):
        if p.startswith("../"):
            missing.append(p)  # outside the repository: no clone has it
            continue
        pats = [q.rstrip("/") for q in _expand(p)]
        if not all(any(glob.fnmatch.fnmatch(n.rstrip("/"), q) for n in names) for q in pats):
            missing.append(p)
    assert missing == [], f"README.md names paths a clone lacks: {missing}"


def test_the_path_check_catches_a_missing_file_and_an_outside_one():
    top = {"bench", "envgen"}
    assert readme_paths("see `bench/NOPE.md`, [map](../shared/DESIGN.md), `hf://org/x`, `a/b`, `envgen/Pack-v0`",
                        top) == {
        "bench/NOPE.md", "../shared/DESIGN.md"}


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


def _split(line: str) -> tuple[tuple[str, ...], set[str]]:
    """`envgen image base [--suite S]` -> (("image", "base"), {"--suite"}), resolving subcommands on the real CLI."""
    words = line.split()[1:]
    group, path = typer.main.get_command(app), []
    while hasattr(group, "list_commands") and words and words[0] in group.list_commands(None):
        group = group.get_command(None, words[0])
        path.append(words.pop(0))
    assert path and not hasattr(group, "list_commands"), f"README command {line!r}: no such envgen command"
    return tuple(path), set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", " ".join(words)))


def test_every_readme_command_exists_with_its_options():
    lines = _command_lines()
    assert len(lines) >= 17 and any(" image base " in f" {c} " for c in lines)
    env = {**os.environ, "COLUMNS": "200"}
    wanted = [(line, *_split(line)) for line in lines]

    def help_options(path: tuple[str, ...]) -> set[str]:
        p = subprocess.run([sys.executable, "-m", "envgen", *path, "--help"], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", p.stdout))

    paths = sorted({path for _, path, _ in wanted})
    with ThreadPoolExecutor(8) as pool:
        seen = dict(zip(paths, pool.map(help_options, paths)))
    for line, path, options in wanted:
        assert options <= seen[path], f"README: {line!r} names {sorted(options - seen[path])}, not in --help"


def test_every_python_name_the_readme_gives_exists():
    """`envgen.pack.load`, `envgen.sandbox.Sandbox`, ...: each resolves to a module or one of its attributes."""
    import importlib

    names = sorted(set(re.findall(r"\benvgen(?:\.[A-Za-z_]\w*)+", README)))
    assert "envgen.pack.load" in names
    missing = []
    for name in names:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ModuleNotFoundError as e:
                if e.name == "torch" or e.name == "trl":
                    obj = None  # an extra's module (envgen.rl) that exists but needs the extra
                    break
                continue
            try:
                for attr in parts[i:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert missing == [], f"README.md names Python objects that do not exist: {missing}"
