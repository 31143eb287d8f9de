"""The code family on the other base images' interpreters: ``--python 3.9`` (bullseye) and ``3.13`` (trixie).

Each suite's venv starts with its own pip (bullseye's predates PEP 660 editable installs), Debian's pytest
and its own stdlib; the task must set up, validate and run its tests on that interpreter, not on bookworm's.
"""

from __future__ import annotations

import pytest

from envgen.errors import InputError
from envgen.families.code import build_code
from envgen.pack import load

try:
    from .code_repo import make_calc_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import make_calc_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]


@pytest.mark.parametrize("python, suite", [("3.9", "bullseye"), ("3.13", "trixie")])
def test_a_task_sets_up_and_validates_on_the_interpreter_asked_for(tmp_path, python, suite):
    import docker

    shas = make_calc_repo(tmp_path / "calc")
    report = build_code(f"git:{tmp_path / 'calc'}", tmp_path / "out", backend="docker", python=python, runs=2,
                        gate=False, store=tmp_path / "state.sqlite", log=lambda m: None)
    name = f"calc-{shas['fix'][:12]}"
    assert name in report.packs, report.rejections
    pack = load(tmp_path / "out" / name)
    assert pack.manifest.image.base == f"debian:{suite}+python"
    args = pack.tasks[0].verifier.args
    assert args["FAIL_TO_PASS"] == ["tests/test_core.py::test_subtract"]
    assert {"tests/test_core.py::test_add", "tests/test_core.py::test_divide"} <= set(args["PASS_TO_PASS"])
    out = docker.from_env().containers.run(pack.manifest.image.tag, [args["python"], "-c",
                                           "import sys; print('%d.%d' % sys.version_info[:2])"],
                                           remove=True, network_mode="none")
    assert out.decode().strip() == python


def test_an_interpreter_no_base_image_has_is_one_clear_error(tmp_path):
    make_calc_repo(tmp_path / "calc")
    with pytest.raises(InputError, match=r"--python 2\.7: no base image has Python 2\.7; available: 3\.7 \(buster\)"):
        build_code(f"git:{tmp_path / 'calc'}", tmp_path / "out", backend="docker", python="2.7",
                   store=tmp_path / "state.sqlite")
