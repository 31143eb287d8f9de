"""C++ end to end in Docker: ``strutil`` (CMake + GoogleTest from Debian, tests/cxx_repo.py) built with the
docker backend on the ``gcc`` toolchain layer, validated in its task image, then rolled out through
``gymnasium.make``: the oracle scores 1, the null policy 0, and the agent builds and runs the tests in its own
working tree (/work allows executing what is built there); the red-team gate's forgery payload
(envs/code/forgeries/ctest.txt: at exit, every failure taken out of GoogleTest's XML) buys the task only on a
copy of the pack without its twin checks. One build for the module."""

from __future__ import annotations

import gzip

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.episodes.actions import render_action
from envgen.families.code import build_code
from envgen.pack import load
from envgen.paths import bundled
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout
from envgen.sandbox.images import stderr_log
from twinless import without_twins as _without_twins

try:
    from .cxx_repo import make_strutil_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from cxx_repo import make_strutil_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """strutil with its dependency shapes (cxxopts'): ICU behind an option that defaults to OFF, and libzstd
    REQUIRED by its pkg-config name, which Debian's Contents index (a one-line index here) maps to libzstd-dev,
    installed from the real mirror."""
    root = tmp_path_factory.mktemp("cxx-docker")
    shas = make_strutil_repo(root / "strutil", deps=True)
    index = root / "Contents-amd64.gz"
    index.write_bytes(gzip.compress(b"usr/lib/x86_64-linux-gnu/pkgconfig/libzstd.pc  libdevel/libzstd-dev\n"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ENVGEN_DEBIAN_CONTENTS", str(index))
        mp.setenv("ENVGEN_CACHE", str(root / "cache"))
        report = build_code(f"git:{root / 'strutil'}", root / "out", backend="docker", store=root / "state.sqlite",
                            gate=False, log=stderr_log)
    return root, shas, report


def test_the_gtest_fix_is_validated_in_docker_with_per_test_ids(built):
    root, shas, report = built
    assert report.packs == [f"strutil-{shas['fix'][:12]}"], report.rejections
    pack = load(root / "out" / report.packs[0])
    assert pack.manifest.image.base == "debian:bookworm+gcc" and pack.manifest.image.tag
    args = pack.tasks[0].verifier.args
    assert args["framework"] == "ctest" and args["files"] == ["tests/test_split.cpp"]
    assert args["FAIL_TO_PASS"] == ["Split.KeepsTrailingEmptyField"]
    assert args["PASS_TO_PASS"] == ["Split.Basic", "Split.EmptyMiddle", "Trim.AllSpaces", "Trim.RemovesSpaces",
                                    "Words/Upper.Converts/0", "Words/Upper.Converts/1", "Words/Upper.Converts/2"]
    runs = pack.tasks[0].meta["validation"]["runs"]
    assert {(r["source"], r["canary"]) for r in runs} == {("gtest+ctest-junit", "failed")}
    assert args["twins"]["files"] == "twins.json" and pack.tasks[0].meta["validation"]["twin_checks"] == 2
    notes = "\n".join(pack.tasks[0].meta["environment"]["notes"])
    assert "Debian packages: libzstd-dev" in notes and "icu-uc not needed" in notes


def test_oracle_scores_one_and_null_zero_through_gymnasium(built):
    root, shas, report = built
    env = gymnasium.make("envgen/Pack-v0", pack=str(root / "out" / report.packs[0]), sandbox="docker")
    try:
        oracle = rollout(env, OraclePolicy())
        null = rollout(env, NullPolicy())
    finally:
        env.close()
    assert oracle.reward == 1.0, oracle.reward_details
    assert oracle.reward_details["FAIL_TO_PASS"] == "1/1" and oracle.reward_details["PASS_TO_PASS"] == "7/7"
    assert oracle.reward_details["twins"] == "2/2 failed as they must"
    assert null.reward == 0.0


def test_the_agent_builds_and_runs_the_tests_in_its_working_tree(built):
    root, shas, report = built
    env = gymnasium.make("envgen/Pack-v0", pack=str(root / "out" / report.packs[0]), sandbox="docker")
    try:
        env.reset()
        cmd = ("cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug >/dev/null && cmake --build build -j2 >/dev/null && "
               "./build/tests/strutil_tests --gtest_brief=1 | tail -1")
        obs, _, terminated, truncated, _ = env.step(render_action("", [("bash", {"command": cmd})]))
    finally:
        env.close()
    assert not (terminated or truncated)
    assert "[  PASSED  ] 7 tests." in obs and "[exit code 0]" in obs, obs


def test_the_gates_forgery_payload_buys_the_task_only_without_the_twins(built, tmp_path):
    root, shas, report = built
    pack = load(root / "out" / report.packs[0])
    payload = (bundled("envs") / "code" / "forgeries" / "ctest.txt").read_text().split("\n", 1)[1]
    plant = f"cat >> src/strutil.cpp <<'ENVGEN_PAYLOAD'\n\n{payload.replace('{tok}', '5eed')}ENVGEN_PAYLOAD\n"
    scores = {}
    for name, p in (("bare", _without_twins(pack, tmp_path / "bare")), ("twins", pack)):
        env = gymnasium.make("envgen/Pack-v0", pack=str(p.root), sandbox="docker")
        try:
            env.reset()
            for call in (("bash", {"command": plant}), ("submit", {})):
                obs, _, terminated, truncated, _ = env.step(render_action("", [call]))
                assert not (terminated or truncated), obs
            _, reward, terminated, _, info = env.step("I fixed the issue.")
            assert terminated
            scores[name] = (reward, info["reward_details"])
        finally:
            env.close()
    reward, details = scores["bare"]
    assert reward == 1.0 and details["FAIL_TO_PASS"] == "1/1" and details["canary"] == "failed", details
    reward, details = scores["twins"]
    assert reward == 0.0 and details["twins"] == "0/2 failed as they must", details
