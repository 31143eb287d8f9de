"""The Python recipe on the failure shapes of real SWE-bench records (issue 28, classes 1-4): dependencies as
of the commit's date, test requirement sources tried as alternatives with unused tools dropped, the install
check importing what the tests import, ``setup(**opts)`` and the nearest interpreter this machine can build.

Unit tests read the recipe's plan and run the kit's installer against a local fake index (an HTTP server
serving PEP 691/700 JSON) and a recording pip; one Docker build (tests/py_real_repo.py) shows all of it
end to end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envgen.families.code.python import Python, dependency_plan, marker_environment, read_metadata
from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import install  # noqa: E402

try:
    from .py_real_repo import DATE, make_shapes_repo
    from .test_code_setup import View
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from py_real_repo import DATE, make_shapes_repo  # noqa: E402
    from test_code_setup import View  # noqa: E402

PY = Python()

OPTS_SETUP = '''\
from setuptools import setup, find_packages
with open("README.md") as f:
    LONG = f.read()
CLASSIFIERS = ["Programming Language :: Python :: 3.6", "Programming Language :: Python :: 3.7"]
REQUIRES = ["numpy"] + ["six"]
opts = dict(name="demo", python_requires=">=3.6.1", classifiers=CLASSIFIERS, long_description=LONG,
            packages=find_packages(), install_requires=REQUIRES)
metadata = {**opts, "tests_require": ["pytest-mock"]}
setup(**metadata)
'''


def test_setup_opts_splat_and_earlier_assignments_are_read():
    meta = read_metadata(View({"setup.py": OPTS_SETUP}))
    assert meta.name == "demo" and meta.requires_python == ">=3.6.1"
    assert meta.classifier_versions == {(3, 6), (3, 7)}
    assert [d.text for d in meta.deps] == ["numpy", "six"]
    assert [d.text for d in meta.test_deps] == ["pytest-mock"]


def test_an_unbuildable_interpreter_gives_the_nearest_buildable_one(monkeypatch):
    monkeypatch.delenv("ENVGEN_DEBIAN_ARCHIVE_MIRROR", raising=False)
    meta = read_metadata(View({"setup.py": OPTS_SETUP}))
    suite, why = PY.choose_suite(meta)
    assert suite == "bullseye", why  # 3.7 (buster) is archived: 3.9 is the nearest this machine builds
    assert why.startswith("Python 3.9: the nearest this machine can build to Python 3.7") and \
        "ENVGEN_DEBIAN_ARCHIVE_MIRROR" in why, why
    monkeypatch.setenv("ENVGEN_DEBIAN_ARCHIVE_MIRROR", "http://archive.invalid/debian")
    assert PY.choose_suite(meta)[0] == "buster"


TOX = "[testenv]\ndeps =\n    coverage<5\n    mypy\n    pytest\n"
REQS_TEST = "coverage~=5.5\ntypes-pkg_resources\nblack==21.7b0\nflake8\n"


def test_test_sources_are_alternatives_and_unused_tools_are_dropped():
    files = {"setup.cfg": "[metadata]\nname = demo\n[options]\ninstall_requires =\n    wrapt<1.14\n",
             "requirements_test.txt": REQS_TEST, "tox.ini": TOX,
             "tests/test_x.py": "import demo\nimport subprocess\n\ndef test_types():\n"
                                "    subprocess.run(['mypy', 'demo'])\n"}
    meta = read_metadata(View(files))
    plan, notes = dependency_plan(meta, marker_environment("bookworm"), {"demo", "subprocess", "mypy"},
                                  "2021-11-22T00:00:00Z")
    alts = [(a["label"], a["requirements"]) for a in plan["alternatives"]]
    assert alts == [
        ("requirements_test.txt + tox.ini [testenv]", ["coverage<5", "coverage~=5.5", "mypy", "wrapt<1.14"]),
        ("requirements_test.txt", ["coverage~=5.5", "wrapt<1.14"]),
        ("tox.ini [testenv]", ["coverage<5", "mypy", "wrapt<1.14"]),
        ("runtime requirements only", ["wrapt<1.14"]),
    ]
    assert plan["before"] == "2021-11-22T00:00:00Z"
    dropped = next(n for n in notes if n.startswith("dropped"))
    assert "types-pkg_resources" in dropped and "black==21.7b0" in dropped and "flake8" in dropped
    assert "mypy" not in dropped  # a test runs it


# ---------------------------------------------------------------- the kit's installer


class _Index(BaseHTTPRequestHandler):
    """A simple index (PEP 691 JSON) serving upload times (PEP 700), except for ``untimed``."""

    FILES = {
        "tomli": [("tomli-1.2.2-py3-none-any.whl", "2021-10-26T10:00:00Z", False),
                  ("tomli-2.0.0-py3-none-any.whl", "2021-12-13T10:00:00Z", False),
                  ("tomli-2.0.0rc1-py3-none-any.whl", "2021-11-01T10:00:00Z", False)],
        "types-pkg-resources": [("types_pkg_resources-0.1.3-py2.py3-none-any.whl", "2021-06-17T10:00:00Z", True)],
        "untimed": [("untimed-1.0.tar.gz", None, False)],
    }

    def do_GET(self):  # noqa: N802 - http.server's name
        name = self.path.strip("/").split("/")[-1]
        if name not in self.FILES:
            self.send_error(404)
            return
        files = [{"filename": f, "url": f, "hashes": {}, "yanked": "gone" if y else False,
                  **({"upload-time": t} if t else {})} for f, t, y in self.FILES[name]]
        body = json.dumps({"meta": {"api-version": "1.1"}, "name": name, "files": files}).encode()
        self.send_response(200)
        self.send_header("Content-Type", install.JSON_ACCEPT)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def index():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


def test_newest_release_before_the_cut_off_from_the_index_json(index):
    assert install.newest_before("tomli", "2021-11-21T00:00:00Z", [index])[0] == "1.2.2"  # not 2.0.0rc1
    assert install.newest_before("tomli", "2022-01-01T00:00:00Z", [index])[0] == "2.0.0"
    best, why = install.newest_before("types-pkg_resources", "2022-01-01T00:00:00Z", [index])
    assert best is None and "no release" in why  # every release yanked
    best, why = install.newest_before("untimed", "2022-01-01T00:00:00Z", [index])
    assert best is None and "no index serves upload times" in why
    assert install.newest_before("missing", "2022-01-01T00:00:00Z", [index])[0] is None


class _Pip:
    """pip as the installer calls it: records each install, fails the ones ``fail`` says."""

    def __init__(self, dates: bool, fail, index: str = ""):
        self.dates, self.fail, self.calls, self.index = dates, fail, [], index

    def __call__(self, cmd, **kw):
        args = cmd[3:]
        out, rc = b"", 0
        if cmd[1] == "-c":  # pip's default index, asked of pip
            out = self.index.encode()
        elif args[:2] == ["install", "--help"]:
            out = b"--uploaded-prior-to <datetime>" if self.dates else b"--pre"
        elif args[:2] == ["config", "list"]:
            out = b""
        elif args[0] == "install":
            cons = args[args.index("-c") + 1] if "-c" in args else None
            self.calls.append((args, Path(cons).read_text() if cons else ""))
            out, rc = self.fail(args)
        return subprocess.CompletedProcess(cmd, rc, out, b"")


def test_alternatives_are_tried_in_order_with_pip_dating(index):
    pip = _Pip(True, lambda a: (b"ResolutionImpossible", 1) if "coverage<5" in a else (b"ok", 0))
    plan = {"before": "2021-11-22T00:00:00Z", "alternatives": [
        {"label": "all", "requirements": ["coverage<5", "coverage~=5.5"]},
        {"label": "requirements_test.txt", "requirements": ["coverage~=5.5"]}]}
    res = install.install_deps(plan, "/venv/bin/python", run=pip, log=lambda s: None)
    assert res["used"] == "requirements_test.txt" and res["dating"] == "pip --uploaded-prior-to"
    assert [t["rc"] for t in res["tried"]] == [1, 0]
    assert all(c[0][:2] == ["install", "--uploaded-prior-to"] and c[0][2] == plan["before"] for c in pip.calls)


def test_without_pip_dating_or_index_times_each_requirement_is_capped(index, monkeypatch):
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    old_pip = _Pip(False, lambda a: (b"ok", 0), index)
    plan = {"before": "2021-11-21T00:00:00Z", "alternatives": [{"label": "all", "requirements": ["tomli", "untimed"]}]}
    res = install.install_deps(plan, "/venv/bin/python", run=old_pip, log=lambda s: None)
    assert res["used"] == "all" and res["dating"] == "index JSON caps"
    (args, cons), = old_pip.calls
    assert "--uploaded-prior-to" not in args and cons.split() == ["tomli<=1.2.2"]
    # pip has the option but the index serves no upload times: the same caps
    untimed = _Pip(True, lambda a: ((b"Index x " + install.NO_UPLOAD_TIMES.encode(), 1) if "--uploaded-prior-to" in a
                                    else (b"ok", 0)), index)
    res = install.install_deps(plan, "/venv/bin/python", run=untimed, log=lambda s: None)
    assert res["used"] == "all" and res["dating"] == "index JSON caps" and len(untimed.calls) == 2
    assert untimed.calls[1][1].split() == ["tomli<=1.2.2"]


# ---------------------------------------------------------------- the install check


def _tree(tmp_path: Path, test_imports: str) -> Path:
    tree = tmp_path / "repo"
    (tree / "shapes").mkdir(parents=True)
    (tree / "shapes" / "__init__.py").write_text("")
    (tree / "oldshapes.py").write_text("raise ImportError('use shapes')\n")
    (tree / "tests").mkdir()
    (tree / "tests" / "test_core.py").write_text(test_imports + "\n\ndef test_x():\n    pass\n")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    return tree


def test_the_install_check_imports_what_the_tests_import(tmp_path):
    tree = _tree(tmp_path, "import shapes\nimport os")
    res = install.check(str(tree), sys.executable, framework="unittest")
    assert [n for n, _ in res["imported"]] == ["shapes"] and res["skipped"] == ["oldshapes"]
    assert res["basis"] == "the tests import"


def test_the_install_check_fails_when_a_test_imports_a_broken_module(tmp_path):
    tree = _tree(tmp_path, "import shapes\nimport oldshapes")
    with pytest.raises(RuntimeError, match="use shapes"):
        install.check(str(tree), sys.executable, framework="unittest")


# ---------------------------------------------------------------- end to end


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_real_shapes_validate_in_docker(tmp_path, monkeypatch):
    from envgen.families.code import build_code
    from envgen.pack import load
    from envgen.sandbox.images import stderr_log

    monkeypatch.delenv("ENVGEN_DEBIAN_ARCHIVE_MIRROR", raising=False)
    shas = make_shapes_repo(tmp_path / "shapes")
    report = build_code(f"git:{tmp_path / 'shapes'}", tmp_path / "out", backend="docker",
                        store=tmp_path / "state.sqlite", runs=1, gate=False, log=stderr_log)
    assert report.packs == [f"shapes-{shas['fix'][:12]}"], report.rejections
    task = load(tmp_path / "out" / report.packs[0]).tasks[0]
    args = task.verifier.args
    assert args["FAIL_TO_PASS"] == ["tests/test_core.py::test_rectangle"]
    assert args["PASS_TO_PASS"] == ["tests/test_core.py::test_coverage_from_requirements_test_txt",
                                    "tests/test_core.py::test_dependencies_as_of_the_commit_date",
                                    "tests/test_core.py::test_square"]
    notes = task.meta["environment"]["notes"]
    assert notes[0].startswith("Python 3.9: the nearest this machine can build to Python 3.7"), notes
    assert any(n.startswith("dropped 1 ") and "types-pkg_resources" in n for n in notes), notes
    assert any(n.startswith("requirement sets, tried in order") and "1. requirements_test.txt + tox.ini" in n
               for n in notes), notes
    assert any(n.startswith(f"dependencies as of {DATE[:8]}21T00:00:00Z") for n in notes), notes
