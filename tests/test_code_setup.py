"""The Python set-up read statically: requirements with markers for the target interpreter, extras,
dependency groups, tox deps, pytest's collection settings, the interpreter choice and the install steps
(tests/adversarial/test_generated_files.py: the files the install generates; test_code_setup_docker.py:
all of it in Docker)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from envgen.errors import InputError
from envgen.families.code.python import (
    Python,
    describe_version,
    marker_environment,
    matches_python_files,
    pytest_settings,
    read_metadata,
    resolve_requirements,
)
from envgen.sandbox.images import SUITES

PY = Python()


class View:
    """RepoView's interface over a dict of files (and a real clone for ``git describe`` when given)."""

    def __init__(self, files: dict[str, str], repo: Path = Path("/nonexistent"), commit: str = "f" * 40):
        self._files, self.repo, self.commit = files, repo, commit

    @property
    def files(self):
        return list(self._files)

    def exists(self, path):
        return path in self._files

    def read(self, path):
        return self._files.get(path)


def _suite_of(version: str) -> str:
    return next(s for s, v in SUITES.items() if v.python == version)


def _reqs(files: dict[str, str], python: str = "3.11"):
    meta = read_metadata(View(files))
    reqs, cons, notes = resolve_requirements(meta, marker_environment(_suite_of(python)))
    return meta, reqs, cons, notes


PYPROJECT = '''\
[build-system]
requires = ["setuptools>=64", "setuptools_scm>=8"]
build-backend = "setuptools.build_meta"

[project]
name = "Demo_Pkg"
dynamic = ["version"]
requires-python = ">=3.9"
dependencies = [
  'exceptiongroup>=1.0.0rc8; python_version<"3.11"',
  'tomli>=1.1; python_version < "3.11"',
  "iniconfig>=1",
  "packaging @ https://example.invalid/packaging-24.0.tar.gz",
  "broken >= = 1",
]

[project.optional-dependencies]
test = ["attrs", 'colorama; sys_platform == "win32"', "Demo-Pkg[extra2]", 'typing-extensions; extra == "test"']
extra2 = ["six"]
docs = ["sphinx"]

[dependency-groups]
base = ["pluggy>=1"]
test = ["hypothesis", {include-group = "base"}]
dev = ["ruff"]
'''


def test_markers_are_evaluated_for_the_target_interpreter_not_torn_off():
    meta, reqs, _, notes = _reqs({"pyproject.toml": PYPROJECT})
    assert "exceptiongroup>=1.0.0rc8" not in reqs and 'python_version<"3.11"' not in " ".join(reqs)
    assert not any(r.startswith(("exceptiongroup", "tomli", "colorama")) for r in reqs)
    assert any("exceptiongroup>=1.0.0rc8; python_version" in n and "does not apply to Python 3.11" in n for n in notes)
    assert "iniconfig>=1" in reqs and "attrs" in reqs and "six" in reqs  # Demo-Pkg[extra2]: the own extra
    assert "typing-extensions" in reqs  # extra == "test" holds while reading the test extra
    assert "packaging" in reqs and any("installed from the registry by name" in n for n in notes)
    assert any("cannot read 'broken >= = 1'" in n for n in notes)
    assert "hypothesis" in reqs and "pluggy>=1" in reqs and "ruff" not in reqs  # the test group, included group
    assert "sphinx" not in reqs and meta.install_extras == ["test", "extra2"]
    _, old, _, _ = _reqs({"pyproject.toml": PYPROJECT}, python="3.9")
    assert "exceptiongroup>=1.0.0rc8" in old and "tomli>=1.1" in old  # 3.9: the same markers apply


def test_requirements_files_follow_includes_constraints_and_own_extras():
    files = {
        "setup.cfg": "[metadata]\nname = demo\n[options.extras_require]\ntesting =\n    pytest-timeout\n"
                     "    exceptiongroup; python_version < '3.11'\n",
        "requirements.txt": "-r requirements/base.txt\n-c constraints.txt\n--index-url https://mirror.invalid/simple\n"
                            "iniconfig==2.0.0 \\\n    --hash=sha256:abc\n-e .[testing]\n"
                            "git+https://example.invalid/x.git#egg=x\n-e ../sibling\n",
        "requirements/base.txt": "# base\ntomli; python_version >= '3.11'  # comment\n",
        "constraints.txt": "tomli<3\nunused==1; os_name == 'nt'\n",
    }
    meta, reqs, cons, notes = _reqs(files)
    assert reqs == ["tomli", "iniconfig==2.0.0", "pytest-timeout"]
    assert cons == ["tomli<3"] and "testing" in meta.install_extras
    assert any("--index-url ignored" in n for n in notes if isinstance(n, str)) or \
        any("--index-url ignored" in n for n in meta.notes)
    assert any("cannot read 'git+https" in n for n in notes)
    assert any("editable requirement '-e ../sibling' dropped" in n for n in meta.notes)


def test_tox_testenv_deps_and_extras_are_test_dependencies():
    tox = ("[base]\ndeps =\n    attrs\n    six\n[testenv]\ndeps =\n    {[base]deps}\n    -r{toxinidir}/req-test.txt\n"
           "    py38: mock\n    coverage: pytest-cov\n    pkg @ https://example.invalid/p.whl\nextras = testing\n"
           "commands = pytest {posargs}\n")
    meta, reqs, _, _ = _reqs({"tox.ini": tox, "req-test.txt": "iniconfig\n", "setup.py": "setup(name='t')\n"})
    assert reqs == ["attrs", "six", "iniconfig", "pkg"]
    assert "testing" in meta.install_extras
    assert any("factor-conditional dep 'py38: mock' dropped" in n for n in meta.notes)
    legacy = '[tool.tox]\nlegacy_tox_ini = """\n[testenv]\ndeps = packaging\n"""\n'
    assert _reqs({"pyproject.toml": legacy})[1] == ["packaging"]


def test_pytest_collection_settings_follow_pytests_precedence():
    cfg = "[tool:pytest]\npython_files = check_*.py\ntestpaths = testing\n"
    tox = "[pytest]\npython_files = tox_*.py\n"
    toml = '[tool.pytest.ini_options]\npython_files = ["test_*.py", "testing/python/*.py"]\ntestpaths = ["testing"]\n'
    assert pytest_settings(View({"setup.cfg": cfg}))["python_files"] == ["check_*.py"]
    assert pytest_settings(View({"setup.cfg": cfg, "tox.ini": tox}))["source"] == "tox.ini"
    assert pytest_settings(View({"setup.cfg": cfg, "tox.ini": tox, "pyproject.toml": toml}))["source"] == \
        "pyproject.toml"
    empty_ini = pytest_settings(View({"pytest.ini": "", "pyproject.toml": toml}))
    assert empty_ini == {"python_files": [], "testpaths": [], "source": "pytest.ini"}  # pytest.ini wins even empty
    # a pyproject without ini_options is not pytest's configuration: setup.cfg's is
    assert pytest_settings(View({"pyproject.toml": "[project]\nname='x'\n", "setup.cfg": cfg}))["source"] == "setup.cfg"

    after = {"testing/python/collect.py", "testing/test_main.py", "testing/check_x.py", "other/test_y.py",
             "testing/conftest.py", "testing/helpers.py"}
    paths = sorted(after)
    assert PY.runnable_tests(paths, after, View({"pyproject.toml": toml})) == \
        ["testing/python/collect.py", "testing/test_main.py"]  # testpaths keeps other/ out
    assert PY.runnable_tests(paths, after, View({"setup.cfg": cfg})) == ["testing/check_x.py"]
    assert PY.runnable_tests(paths, after) == ["other/test_y.py", "testing/test_main.py"]  # pytest's defaults
    assert matches_python_files("a/b/testing/python/x.py", ["testing/python/*.py"])
    assert not matches_python_files("a/python/x.py", ["testing/python/*.py"])


def test_interpreter_table_comes_from_the_base_suites_and_python_overrides():
    toml = '[project]\nname = "p"\nrequires-python = ">=3.10"\n'
    view = View({"pyproject.toml": toml})
    assert PY.recipe(view).suite == "bookworm"
    newest = max(SUITES.values(), key=lambda s: tuple(map(int, s.python.split("."))))
    r = PY.recipe(view, python=newest.python)
    assert r.suite == newest.name and r.notes[0].startswith(f"Python {newest.python}: asked for")
    forced = PY.recipe(view, python="3.9")
    assert forced.suite == "bullseye" and "outside the project's requires-python" in forced.notes[0]
    with pytest.raises(InputError, match=r"--python 3\.8: no base image has Python 3\.8; available: .*3\.11 \(bookwo"):
        PY.recipe(view, python="3.8")
    with pytest.raises(InputError, match="pass --python X.Y"):
        PY.recipe(View({"pyproject.toml": '[project]\nname = "p"\nrequires-python = ">=4"\n'}))


def test_the_project_is_installed_by_its_backend_in_the_task_layer(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True, env={"PATH": os.environ["PATH"], "GIT_AUTHOR_NAME": "a",
                                                    "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
                                                    "GIT_COMMITTER_EMAIL": "a@b", "HOME": str(tmp_path)}).stdout
    (repo / "pyproject.toml").write_text(PYPROJECT)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "one")
    git("tag", "v1.4.0")
    (repo / "x.py").write_text("")
    git("add", "-A")
    git("commit", "-qm", "two")
    head = git("rev-parse", "HEAD").strip()
    assert describe_version(repo, head) == "1.4.1.dev1" and describe_version(repo, "HEAD~1") == "1.4.0"
    r = PY.recipe(View({"pyproject.toml": PYPROJECT, "src/demo_pkg/__init__.py": ""}, repo, head))
    install, generated, check = (s.run for s in r.task_steps)
    assert "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_DEMO_PKG=1.4.1.dev1" in install
    assert "-e '/work/repo[test,extra2]'" in install and "|| {" in install  # regular install as the fallback
    assert "envgen_verifiers.install capture /work/repo" in generated
    assert "check /work/repo --python /opt/envgen/venv/bin/python --framework pytest --pythonpath src" in check
    assert not any("pth" in s.run or "dist-info" in s.run for s in r.steps + r.task_steps)  # no hand-made install
    no_tags = PY.recipe(View({"setup.py": "setup(name='x', version='2.0')\n"}))
    assert "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_X=2.0" in no_tags.task_steps[0].run


def test_build_code_refuses_a_python_no_base_image_has(tmp_path):
    from envgen.families.code import build_code

    with pytest.raises(InputError, match=r"--python 2\.7: no base image has Python 2\.7; available: .*3\.9 \(bullseye\)"):
        build_code("git:/nonexistent", tmp_path / "out", backend="local", python="2.7", store=tmp_path / "s.sqlite")
