"""The languages the code family supports, by name, and detection of a repository's language.

Kept apart from ``lang`` (the ``Language`` interface) so each language module imports the interface and this
registry imports the languages: no cycle.
"""

from __future__ import annotations

from ...errors import InputError
from .cxx import C, Cpp
from .golang import Go
from .lang import Language, RepoView
from .java import Java
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


def detect_language(view: RepoView) -> Language:
    """The language whose project the repository is: of those whose ``detect`` says yes, the one with the
    most code files (a Go module with a Python helper script is Go; a Python package with a
    ``package.json`` for its docs is Python); ties go to the first in ``languages``."""
    found = [lang for lang in languages().values() if lang.detect(view)]
    if found:
        return max(found, key=lambda lang: sum(1 for f in view.files if lang.is_code_path(f)))
    raise InputError(f"{view.repo}@{view.commit[:12]}: no supported language detected "
                      f"(supported: {', '.join(languages())})")
