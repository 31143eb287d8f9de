"""``sensors``: a repository and SWE-bench file reproducing what real SWE-bench records did to whole-file
builds and to their validation (issue 28, classes 5, 6 and 8).

- pydicom-1194's shape: ``tests/test_text.py`` reads a data file at import (``SAMPLE = fetch(...)``); the
  project's ``fetch`` downloads it, swallows the download error with a warning and returns None, so
  ``test_sample_words`` fails on a missing path whose failure text says nothing of a network; beside it,
  ``test_download_direct`` fails with the download error itself. Both fail on both sides for want of a
  network and must be reported as such, not as tests that fail for what the code does;
- pytest-11143's shape: the FAIL_TO_PASS and PASS_TO_PASS tests are parametrized by strings with spaces
  (``test_words[assert  statement not on own line-6]``), which SWE-bench's log parser keys by their first word;
- the file (``write_swebench``) repeats the instance (astroid-1268 is in its sample twice) and holds an
  instance of a repository no ``--repo-path`` is given for.
"""

from __future__ import annotations

import json
from pathlib import Path

try:
    from .code_repo import PYPROJECT, _commit, _git, _write, diff
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import PYPROJECT, _commit, _git, _write, diff

REPO = "envgen-fixtures/sensors"
MISSING_REPO = "envgen-fixtures/absent"
INSTANCE = "envgen-fixtures__sensors-2"
MISSING_INSTANCE = "envgen-fixtures__absent-1"

DATA = '''\
"""Data files the tests read, downloaded on first use (as pydicom's data manager does)."""

import os
import tempfile
import urllib.request
import warnings

URL = "http://data.sensors-fixture.invalid/{}"


def download(name):
    path = os.path.join(tempfile.gettempdir(), name)
    with urllib.request.urlopen(URL.format(name), timeout=10) as response, open(path, "wb") as f:
        f.write(response.read())
    return path


def fetch(name):
    """The path of a data file, or None (with a warning) when it cannot be downloaded."""
    try:
        return download(name)
    except Exception:
        warnings.warn(f"A download failure occurred while attempting to retrieve {name}")
        return None
'''

TEXT = '''\
"""Text helpers for sensor labels."""


def words(text):
    return text.split(" ")
'''

TESTS = '''\
from sensors.data import download, fetch
from sensors.text import words

SAMPLE = fetch("labels.txt")


def test_words_of_one():
    assert words("probe") == ["probe"]


def test_sample_words():
    with open(SAMPLE, encoding="utf-8") as f:
        assert words(f.read())


def test_download_direct():
    assert download("calibration.csv")
'''

NEW_TESTS = '''

import pytest


@pytest.mark.parametrize("label, count", [("assert  statement not on own line", 6), ("plain label here", 3)])
def test_words(label, count):
    assert len(words(label)) == count
'''


def make_sensors_repo(root: Path) -> dict[str, str]:
    """The repository at ``root``; {"initial", "fix": sha}. ``fix`` makes ``words`` split on any run of
    whitespace and adds ``test_words`` (one case FAIL_TO_PASS, one PASS_TO_PASS, both ids with spaces)."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    _write(root, {"pyproject.toml": PYPROJECT.replace('name = "calc"', 'name = "sensors"')
                  .replace("A tiny calculator", "Sensor labels"), "README.md": "# sensors\n",
                  "src/sensors/__init__.py": '"""sensors."""\n', "src/sensors/data.py": DATA,
                  "src/sensors/text.py": TEXT, "tests/test_text.py": TESTS})
    shas = {"initial": _commit(root, "sensors: label words and the data files the tests download", 1)}
    _write(root, {"src/sensors/text.py": TEXT.replace('text.split(" ")', "text.split()"),
                  "tests/test_text.py": TESTS + NEW_TESTS})
    shas["fix"] = _commit(root, "Split labels on any run of whitespace, not on single spaces", 2)
    return shas


F2P = ["tests/test_text.py::test_words[assert  statement not on own line-6]"]
P2P = ["tests/test_text.py::test_words[plain label here-3]", "tests/test_text.py::test_words_of_one"]
NETWORK = ["tests/test_text.py::test_download_direct", "tests/test_text.py::test_sample_words"]


def write_swebench(path: Path, repo: Path, shas: dict[str, str]) -> list[dict]:
    """A SWE-bench file: the sensors instance twice (identical rows) and one instance of a repository with
    no clone given. Returns the rows."""
    from envgen.families.code.candidates import split_patch
    from envgen.families.code.python import Python

    gold, test, _, _ = split_patch(diff(repo, shas["initial"], shas["fix"]), Python())
    row = {"instance_id": INSTANCE, "repo": REPO, "base_commit": shas["initial"], "patch": gold,
           "test_patch": test, "problem_statement": "words() splits 'a  b' into ['a', '', 'b']: labels with "
           "double spaces get empty words.", "hints_text": "", "created_at": "2024-01-02T12:00:00Z",
           "version": "0.1", "environment_setup_commit": shas["initial"],
           "FAIL_TO_PASS": json.dumps(F2P), "PASS_TO_PASS": json.dumps(P2P)}
    absent = {**row, "instance_id": MISSING_INSTANCE, "repo": MISSING_REPO}
    rows = [row, absent, dict(row)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows
