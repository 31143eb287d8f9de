"""Files the project's install generated in the tree (setuptools_scm's version file, in-place builds) are
infrastructure: kept in the image, laid over the tree at every reset, and restored exactly before a
submission is graded, whatever the submission did to them (the kit's ``install`` and ``stage``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import install as kit_install  # noqa: E402
from envgen_verifiers.tests import reset_repo, stage  # noqa: E402


def _git(tree, *a):
    return subprocess.run(["git", "-C", str(tree), *a], check=True, capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b",
                               "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b", "HOME": "/nonexistent"}).stdout


@pytest.fixture
def generated_tree(tmp_path, monkeypatch):
    """A checkout whose install generated ``pkg/_version.py`` (git-ignored) and build byproducts."""
    tree = tmp_path / "repo"
    (tree / "pkg").mkdir(parents=True)
    (tree / ".gitignore").write_text("pkg/_version.py\nbuild/\n*.egg-info/\n")
    (tree / "pkg" / "__init__.py").write_text("from ._version import version\n")
    (tree / "tests").mkdir()
    (tree / "tests" / "test_v.py").write_text("from pkg import version\n\ndef test_v():\n    assert version == '1.0'\n")
    _git(tree, "init", "-q")
    _git(tree, "add", "-A")
    _git(tree, "commit", "-qm", "base")
    (tree / "pkg" / "_version.py").write_text("version = '1.0'\n")
    (tree / "build" / "lib").mkdir(parents=True)
    (tree / "build" / "lib" / "x.py").write_text("")
    (tree / "demo.egg-info").mkdir()
    (tree / "demo.egg-info" / "PKG-INFO").write_text("")
    (tree / "pkg" / "__pycache__").mkdir()
    (tree / "pkg" / "__pycache__" / "a.pyc").write_text("")
    dest = tmp_path / "generated"
    monkeypatch.setattr(kit_install, "GENERATED_DIR", str(dest))
    assert kit_install.capture(str(tree), str(dest)) == ["pkg/_version.py"]
    return tree, _git(tree, "rev-parse", "HEAD").strip()


def test_generated_files_survive_every_reset(generated_tree):
    tree, base = generated_tree
    assert (tree / "pkg" / "_version.py").read_text() == "version = '1.0'\n"
    assert not (tree / "build").exists() and not (tree / "demo.egg-info").exists()  # byproducts are not kept
    (tree / "pkg" / "_version.py").write_text("version = 'hacked'\n")
    reset_repo(str(tree), base)
    assert (tree / "pkg" / "_version.py").read_text() == "version = '1.0'\n"


def test_a_submission_cannot_tamper_with_generated_files(generated_tree):
    """Infrastructure: a patch that rewrites the generated module, or shadows it with a package, is
    graded with the install's file in place."""
    tree, base = generated_tree
    test_patch = ("diff --git a/tests/test_w.py b/tests/test_w.py\nnew file mode 100644\n--- /dev/null\n"
                  "+++ b/tests/test_w.py\n@@ -0,0 +1 @@\n+x = 1\n")
    rewrite = ("diff --git a/pkg/_version.py b/pkg/_version.py\nnew file mode 100644\n--- /dev/null\n"
               "+++ b/pkg/_version.py\n@@ -0,0 +1 @@\n+version = '2.0'\n")
    restored = stage(str(tree), base, test_patch, rewrite)
    assert restored == ["pkg/_version.py"] and (tree / "pkg" / "_version.py").read_text() == "version = '1.0'\n"
    shadow = ("diff --git a/pkg/_version/__init__.py b/pkg/_version/__init__.py\nnew file mode 100644\n"
              "--- /dev/null\n+++ b/pkg/_version/__init__.py\n@@ -0,0 +1 @@\n+version = '2.0'\n")
    restored = stage(str(tree), base, test_patch, shadow)
    assert restored == ["pkg/_version"] and not (tree / "pkg" / "_version").exists()
    assert (tree / "pkg" / "_version.py").read_text() == "version = '1.0'\n"
    assert stage(str(tree), base, test_patch, None) == [] and (tree / "pkg" / "_version.py").is_file()
