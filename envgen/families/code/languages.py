"""The languages the code family supports, by name, and detection of a repository's language.

Kept apart from ``lang`` (the ``Language`` interface) so each language module imports the interface and this
registry imports the languages: no cycle.
"""

from __future__ import annotations

from ...errors import InputError
from .cxx import C, Cpp
from .golang import Go
from .java import Java
from .lang import Language, RepoView
from .node import JavaScript, TypeScript
from .php import PHP
from .python import Python


def languages() -> dict[str, Language]:
    return {lang.name: lang for lang in (Python(), Go(), JavaScript(), TypeScript(), C(), Cpp(), PHP(), Java())}


def get_language(name: str) -> Language:
    langs = languages()
    if name not in langs:
        raise InputError(f"unknown language {name!r}; the code family supports {', '.join(langs)}")
    return langs[name]


OWN_SUFFIXES = {
    "python": (".py", ".pyx", ".pxd", ".pyi"), "go": (".go",), "javascript": (".js", ".jsx", ".mjs", ".cjs"),
    "typescript": (".ts", ".tsx", ".mts", ".cts"), "c": (".c", ".h"),
    "cpp": (".cpp", ".cc", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".ipp", ".tpp", ".h"),
    "php": (".php",), "java": (".java", ".kt", ".groovy", ".scala")}
"""Each language's own source suffixes for detection: the files only that language builds (a Python
package's C extension sources, or Go's assembly, are not what makes it Python or Go)."""
ROOT_FILES = {
    "python": ("pyproject.toml", "setup.py", "setup.cfg"), "go": ("go.mod",),
    "javascript": ("package.json",), "typescript": ("package.json", "tsconfig.json"),
    "c": ("CMakeLists.txt", "meson.build", "configure.ac", "Makefile"),
    "cpp": ("CMakeLists.txt", "meson.build", "configure.ac", "Makefile"),
    "php": ("composer.json",), "java": ("pom.xml", "build.gradle", "build.gradle.kts")}
"""Build and test files at the repository root that make it a project of the language."""
SIDE_DIRS = frozenset({"doc", "docs", "example", "examples", "samples", "tools", "tool", "scripts", "script",
                       "contrib", "bench", "benchmark", "benchmarks", "build", "vendor", "third_party", "thirdparty",
                       "external", "extern", "deps", "node_modules", "fuzzing", "fuzz", ".github", "ci", "misc"})
"""Folders of helper code that does not say what the project is (build scripts, docs, examples, vendored code)."""


def language_weights(view: RepoView) -> dict[str, int]:
    """Bytes of each language's own source files outside helper folders (``SIDE_DIRS``)."""
    sizes = view.sizes
    out = dict.fromkeys(OWN_SUFFIXES, 0)
    for path in view.files:
        parts = path.split("/")
        if any(p.lower() in SIDE_DIRS for p in parts[:-1]) or path.endswith(".d.ts"):
            continue
        for name, suffixes in OWN_SUFFIXES.items():
            if path.endswith(suffixes):
                out[name] += sizes.get(path, 0)
    return out


def language_choice(view: RepoView) -> tuple[Language, str]:
    """(the language whose project the repository is, why). Of the languages whose ``detect`` says yes,
    those with their build/test files at the root (``ROOT_FILES``) first, then the most bytes of their own
    source files outside helper folders (a C library with a few Python helper scripts is C; a Python
    package with a ``package.json`` for its docs is Python); a tie goes to the first in ``languages`` and
    the reason says so."""
    found = [lang for lang in languages().values() if lang.detect(view)]
    if not found:
        raise InputError(f"{view.repo}@{view.commit[:12]}: no supported language detected "
                          f"(supported: {', '.join(languages())})")
    weights = language_weights(view)

    def score(lang: Language) -> tuple[bool, int]:
        return any(view.exists(f) for f in ROOT_FILES.get(lang.name, ())), weights.get(lang.name, 0)

    ranked = sorted(found, key=score, reverse=True)  # stable: equal scores keep the order of ``languages``
    best = ranked[0]
    rooted, size = score(best)
    why = f"{best.name}: {size} bytes of its own sources" + (" and its build files at the root" if rooted else "")
    others = [f"{lang.name} {score(lang)[1]} bytes{' (root build files)' if score(lang)[0] else ''}"
              for lang in ranked[1:]]
    if others:
        why += f" (also detected: {', '.join(others)})"
    if len(ranked) > 1 and score(ranked[1]) == score(best):
        why += f"; a tie with {ranked[1].name}, broken by the fixed order of the supported languages"
    return best, why


def detect_language(view: RepoView) -> Language:
    """The language whose project the repository is (``language_choice``)."""
    return language_choice(view)[0]
