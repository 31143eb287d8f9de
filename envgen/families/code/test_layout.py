"""Where a project's own settings put its tests, read from the repository at one commit.

Splitting a commit into gold and test patch by naming conventions alone (``tests/``, ``test_*.py``,
``*.spec.js``, ``src/test/java``) misses projects that configure their own places: pytest's
``python_files``/``testpaths``, jest's ``testMatch``/``testRegex``/``roots``, vitest's ``include``,
mocha's ``spec``, Maven's ``testSourceDirectory``, Gradle's ``sourceSets.test``, PHPUnit's
``<testsuite><directory suffix=...>``. Each reader here returns a ``TestLayout`` (or None when the project
configures nothing beyond the conventions); a language's ``configured_tests`` widens its
``is_test_path`` with it (``Language.test_matcher``).

Configuration written as code (``jest.config.js``, ``vitest.config.ts``, ``.mocharc.js``,
``build.gradle``) is read statically: the string literals of the keys above, nothing evaluated. No
library evaluates these safely without running the project's code (they may import anything), so the
extraction is hand-written and deliberately narrow: a value built at run time is not seen, and the
conventions still apply to it.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import pathspec
import yaml

from .lang import RepoView


@dataclass(frozen=True)
class TestLayout:
    """Test files a project's settings name: glob patterns (gitignore-style, relative to the repository
    root), directories with file-name suffixes (empty: any file), regular expressions over ``/PATH``, and
    ``roots`` that the globs and expressions are limited to (jest's ``roots``)."""

    __test__ = False  # not a pytest test class, whatever its name says

    source: str
    """The file(s) the settings were read from."""
    globs: tuple[str, ...] = ()
    dirs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    regexes: tuple[str, ...] = ()
    roots: tuple[str, ...] = ()
    _spec: pathspec.PathSpec | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        pats = [p for g in self.globs for p in expand_glob(g)]
        if pats:
            object.__setattr__(self, "_spec", pathspec.PathSpec.from_lines("gitignore", pats))

    def matches(self, path: str) -> bool:
        for d, suffixes in self.dirs:
            if (d in ("", ".") or path.startswith(d + "/")) and (not suffixes or path.endswith(suffixes)):
                return True
        if self.roots and not any(path.startswith(r + "/") for r in self.roots):
            return False
        if self._spec is not None and self._spec.match_file(path):
            return True
        for rx in self.regexes:
            try:
                if re.search(rx, "/" + path):
                    return True
            except re.error:
                continue  # a JS-only construct Python's re does not read: the conventions still apply
        return False


def _norm(path: str) -> str:
    p = re.sub(r"^(?:<rootDir>|\$\{?(?:project\.)?basedir\}?|\$\{projectDir\}|\$projectDir)/?", "", path.strip())
    p = os.path.normpath(p).replace(os.sep, "/") if p else ""
    return "" if p == "." else p.removeprefix("./")


def expand_glob(glob: str) -> list[str]:
    """A micromatch-style glob as gitignore patterns: braces (``{a,b}``) and extglobs (``?(x)``, ``@(a|b)``,
    ``+(a|b)``, ``*(a|b)``: their alternatives, one repetition) expanded, ``<rootDir>/``/``./`` dropped. Written
    by hand because pathspec (gitignore semantics) has no braces or extglobs."""
    glob = _norm(glob) if not glob.strip().startswith("**") else glob.strip()
    if not glob or glob.startswith("!"):
        return []
    m = re.search(r"([?@+*!])\(([^()]*)\)", glob)
    if m:
        alts = m.group(2).split("|")
        if m.group(1) in "?*":
            alts.append("")
        if m.group(1) == "!":
            alts = ["*"]
        return [x for a in alts for x in expand_glob(glob[:m.start()] + a + glob[m.end():])]
    m = re.search(r"\{([^{}]*,[^{}]*)\}", glob)
    if m:
        return [x for a in m.group(1).split(",") for x in expand_glob(glob[:m.start()] + a + glob[m.end():])]
    # a pattern jest matches against the absolute path may match anywhere below the root
    return [glob if glob.startswith(("**/", "/")) or "/" in glob.rstrip("/") else "**/" + glob]


# ---------------------------------------------------------------- JavaScript / TypeScript


def _js_strings(text: str) -> list[str]:
    return [a or b or c for a, b, c in re.findall(r'"((?:[^"\\\n]|\\.)*)"|\'((?:[^\'\\\n]|\\.)*)\'|`([^`$\n]*)`', text)]


def _js_value(text: str, key: str) -> list[str] | None:
    """The string literals of ``key: 'x'`` or ``key: ['x', 'y']`` in JS/TS source (None: the key is absent)."""
    m = re.search(rf"""(?:^|[\s,{{])["']?{key}["']?\s*:\s*(\[[^\]]*\]|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|/(?:[^/\\\n]|\\.)+/)""",
                  text)
    if not m:
        return None
    value = m.group(1)
    if value.startswith("/"):  # a regex literal
        return [value[1:-1]]
    return [s.encode().decode("unicode_escape") if "\\" in s else s for s in _js_strings(value)]


def _as_list(v) -> list[str]:
    if isinstance(v, str):
        return [v]
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def node_tests(view: RepoView) -> TestLayout | None:
    """Jest's ``testMatch``/``testRegex``/``roots`` (package.json ``jest``, jest.config.*), vitest's
    ``include`` (vitest.config.*, vite.config.*) and mocha's ``spec`` (package.json ``mocha``, .mocharc.*)."""
    globs: list[str] = []
    regexes: list[str] = []
    roots: list[str] = []
    sources: list[str] = []
    try:
        pkg = json.loads(view.read("package.json") or "{}")
    except json.JSONDecodeError:
        pkg = {}
    pkg = pkg if isinstance(pkg, dict) else {}
    jest = pkg.get("jest") if isinstance(pkg.get("jest"), dict) else None
    for name in sorted(f for f in view.files if "/" not in f):
        if re.fullmatch(r"jest\.config\.json", name):
            try:
                doc = json.loads(view.read(name) or "{}")
            except json.JSONDecodeError:
                continue
            jest = doc if isinstance(doc, dict) else jest
            sources.append(name)
        elif re.fullmatch(r"jest\.config\.[cm]?[jt]s", name):
            text = view.read(name) or ""
            jest = {k: v for k in ("testMatch", "testRegex", "roots") if (v := _js_value(text, k)) is not None}
            sources.append(name)
        elif re.fullmatch(r"(?:vitest|vite)\.config\.[cm]?[jt]s", name):
            inc = _js_value(view.read(name) or "", "include")
            if inc:
                globs += inc
                sources.append(name)
        elif re.fullmatch(r"\.mocharc(?:\.(?:json|jsonc|ya?ml|[cm]?js))?", name):
            text = view.read(name) or ""
            if name.endswith((".yml", ".yaml")) or name == ".mocharc":
                try:
                    doc = yaml.safe_load(text)
                except yaml.YAMLError:
                    doc = None
                spec = _as_list(doc.get("spec")) if isinstance(doc, dict) else []
            elif name.endswith((".json", ".jsonc")):
                try:
                    doc = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE))
                except json.JSONDecodeError:
                    doc = None
                spec = _as_list(doc.get("spec")) if isinstance(doc, dict) else []
            else:
                spec = _js_value(text, "spec") or []
            if spec:
                globs += [_mocha_spec(s) for s in spec]
                sources.append(name)
    if jest is None and isinstance(pkg.get("jest"), dict):
        jest = pkg["jest"]
    if jest:
        if "package.json" not in sources and jest is pkg.get("jest"):
            sources.append("package.json")
        globs += _as_list(jest.get("testMatch"))
        regexes += _as_list(jest.get("testRegex"))
        roots += [_norm(r) for r in _as_list(jest.get("roots")) if _norm(r)]
    mocha = pkg.get("mocha")
    if isinstance(mocha, dict) and mocha.get("spec"):
        globs += [_mocha_spec(s) for s in _as_list(mocha["spec"])]
        sources.append("package.json")
    if not (globs or regexes):
        return None
    return TestLayout(", ".join(dict.fromkeys(sources)), globs=tuple(globs), regexes=tuple(regexes),
                      roots=tuple(roots))


def _mocha_spec(spec: str) -> str:
    """Mocha's ``spec`` entry as a glob: a directory means the files in it."""
    s = _norm(spec)
    return s + "/**" if s and not re.search(r"[*?{\[]|\.[cm]?[jt]sx?$", s) else s


# ---------------------------------------------------------------- Java


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def maven_tests(view: RepoView) -> TestLayout | None:
    """``<build><testSourceDirectory>`` and build-helper's ``add-test-source`` directories of every
    pom.xml (a module's are relative to its folder)."""
    dirs: list[str] = []
    sources: list[str] = []
    for pom in (f for f in view.files if f == "pom.xml" or f.endswith("/pom.xml")):
        try:
            root = ET.fromstring(view.read(pom) or "")
        except ET.ParseError:
            continue
        base = pom.rsplit("/", 1)[0] if "/" in pom else ""
        found = []
        for el in root.iter():
            tag = _local(el.tag) if isinstance(el.tag, str) else ""
            if tag == "testSourceDirectory" and (el.text or "").strip():
                found.append(el.text)
            elif tag == "execution" and any(_local(g.tag) == "goal" and (g.text or "").strip() == "add-test-source"
                                            for g in el.iter() if isinstance(g.tag, str)):
                found += [s.text for s in el.iter() if isinstance(s.tag, str) and _local(s.tag) == "source"
                          and (s.text or "").strip()]
        for d in found:
            p = _norm(f"{base}/{_norm(d)}" if base else d)
            if p and not p.startswith(".."):
                dirs.append(p)
        if found:
            sources.append(pom)
    return TestLayout(", ".join(sources), dirs=tuple((d, ()) for d in dirs)) if dirs else None


def _block(text: str, opener: str) -> list[str]:
    """The bodies of every ``NAME {...}`` block whose opening matches ``opener`` (braces balanced)."""
    out = []
    for m in re.finditer(opener + r"\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        out.append(text[m.end():i - 1])
    return out


_SRC_DIRS = re.compile(r"\b(?:srcDirs?|setSrcDirs)\b\s*(?:=|\+=)?\s*\(?\s*(\[[^\]]*\]|(?:listOf|files)\([^)]*\)|"
                       r"\"[^\"\n]*\"|'[^'\n]*')")


def gradle_tests(view: RepoView) -> TestLayout | None:
    """The test source set's directories of build.gradle(.kts): ``sourceSets { test { java { srcDirs =
    ['x'] } } }``, ``srcDir 'x'``, ``sourceSets.test.java.srcDirs = [...]`` (string literals only)."""
    dirs: list[str] = []
    sources: list[str] = []
    for name in (f for f in view.files if f.rsplit("/", 1)[-1] in ("build.gradle", "build.gradle.kts")):
        text = view.read(name) or ""
        base = name.rsplit("/", 1)[0] if "/" in name else ""
        chunks = [t for ss in _block(text, r"\bsourceSets") for t in _block(ss, r"(?<![\w.])(?:test|getByName\(\"test\"\))")]
        chunks += re.findall(r"sourceSets\.(?:test|getByName\(\"test\"\))\.\w+\.(srcDirs?\b[^\n]*)", text)
        found = [s for chunk in chunks for m in _SRC_DIRS.finditer(chunk) for s in _js_strings(m.group(1))]
        for d in dict.fromkeys(found):
            p = _norm(f"{base}/{d}" if base else d)
            if p and not p.startswith(".."):
                dirs.append(p)
        if found:
            sources.append(name)
    return TestLayout(", ".join(sources), dirs=tuple((d, ()) for d in dict.fromkeys(dirs))) if dirs else None


def java_tests(view: RepoView) -> TestLayout | None:
    layouts = [x for x in (maven_tests(view), gradle_tests(view)) if x is not None]
    if not layouts:
        return None
    return TestLayout(", ".join(x.source for x in layouts), dirs=tuple(d for x in layouts for d in x.dirs))
