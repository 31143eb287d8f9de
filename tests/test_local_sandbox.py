"""Runtime server + local sandbox: the protocol, tool failures of every kind, and recovery."""

from __future__ import annotations

import json
import os
import time

import pytest

from envgen.episodes.episode import replay
from envgen.sandbox import open_sandbox
from envgen.sandbox.local import describe_tools


@pytest.fixture
def sbx(tiny_pack):
    with open_sandbox(tiny_pack, "local") as s:
        s.reset()
        yield s


def test_schemas_from_signatures_and_docstrings(tiny_pack):
    tools = {t["function"]["name"]: t["function"] for t in describe_tools(tiny_pack.env_dir)}
    assert tools["add"]["description"] == "Add two integers."
    assert tools["add"]["parameters"] == {
        "type": "object", "required": ["a", "b"],
        "properties": {"a": {"type": "integer", "description": "first addend"},
                       "b": {"type": "integer", "description": "second addend"}}}
    assert tools["spin"]["parameters"]["properties"]["seconds"] == {"type": "number", "description": "how long",
                                                                    "default": 1000.0}
    assert "required" not in tools["noop"]["parameters"]


def test_calls_and_structured_errors(sbx):
    assert sbx.call("add", {"a": 2, "b": 40}).content == "42"
    r = sbx.call("boom", {})
    assert not r.ok and r.error == {"type": "ValueError", "message": "boom happened"}
    r = sbx.call("add", {"a": 1})
    assert r.error["type"] == "bad_arguments" and "'b'" in r.error["message"]
    r = sbx.call("warp", {})
    assert r.error["type"] == "unknown_tool" and "add" in r.error["message"]
    assert sbx.call("get", {"key": "nope"}).error["type"] == "KeyError"


def test_huge_output_is_truncated_with_marker(sbx, tiny_pack):
    r = sbx.call("shout", {"n": 5_000_000})
    limit = tiny_pack.manifest.limits.output_limit
    assert r.ok and len(r.content) < limit + 100
    assert r.content.endswith(f"...[truncated {5_000_001 - limit} characters]")


def test_python_runaway_is_stopped_by_the_runtime(sbx):
    t0 = time.monotonic()
    r = sbx.call("spin", {}, timeout=0.5)
    assert r.error["type"] == "timeout" and time.monotonic() - t0 < 2
    assert sbx.restarts == 0 and sbx.call("add", {"a": 1, "b": 1}).content == "2"


def test_blocked_tool_is_killed_by_the_host_and_sandbox_recovers(sbx):
    sbx.call("put", {"key": "kept", "value": "yes"})
    r = sbx.call("block", {}, timeout=0.5)
    assert r.error["type"] == "killed" and "restarted" in r.error["message"]
    assert sbx.restarts == 1
    assert sbx.call("get", {"key": "kept"}).content == "yes", "the episode's state survives the restart"


def test_memory_hog_fails_inside_the_limit(sbx):
    r = sbx.call("hog", {"mb": 4096})
    assert r.error["type"] == "MemoryError"
    assert sbx.call("add", {"a": 1, "b": 2}).content == "3"


def test_runtime_death_restarts(sbx):
    r = sbx.call("die", {})
    assert r.error["type"] == "crashed"
    assert sbx.call("add", {"a": 1, "b": 2}).content == "3"


def test_reset_restores_pristine_state(sbx):
    sbx.call("put", {"key": "a", "value": "1"})
    assert sbx.call("get", {"key": "a"}).ok
    sbx.reset()
    assert sbx.call("get", {"key": "a"}).error["type"] == "KeyError"


def test_hidden_only_during_verify(tiny_pack, sbx):
    assert json.loads(sbx.call("peek_hidden", {}).content) == []
    task = tiny_pack.tasks[0]
    ep = replay(sbx, task, task.reference.calls, task.reference.answer)
    assert ep.verdict.reward == 1.0
    sbx.box.settle()  # the verify's clean-up (unstage, then the next runtime) runs after the verdict returns
    assert not (sbx.box.iodir / "hidden").exists()
    assert sbx.box.fresh and sbx.box.chan is not None  # the next episode's runtime started after hidden/ went


def test_close_kills_process_group_and_removes_files(tiny_pack):
    s = open_sandbox(tiny_pack, "local")
    pid, root = s.box.proc.pid, s.root
    s.close()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    assert not os.path.exists(root)


def test_verifier_error_is_a_zero_with_reason(tiny_pack, sbx):
    from envgen.pack import Verifier

    task = tiny_pack.tasks[0].model_copy(update={"verifier": Verifier(kind="program", args={"file": "../../etc/passwd"})})
    v = sbx.verify(task, "", [])
    assert v.reward == 0.0 and "leaves hidden/" in v.details["error"]


def test_an_interpreter_whose_venv_lives_under_tmp_stays_usable(tmp_path):
    """As root the sandbox gets a private /tmp; a venv under the host's /tmp (a CI clone, a pytest tmp dir)
    must stay visible to the tools, or nothing that the venv provides can be imported."""
    import subprocess
    import sys

    from conftest import make_tiny_pack

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    (site / "envgen_marker_mod.py").write_text("VALUE = 'from the venv'\n")
    pack = make_tiny_pack(tmp_path / "tiny", extra_tools='''

def marker() -> str:
    """Import a module only the sandbox's venv has."""
    import envgen_marker_mod
    return envgen_marker_mod.VALUE
''')
    with open_sandbox(pack, "local", python=str(venv / "bin" / "python")) as s:
        s.reset()
        assert s.call("marker", {}).content == "from the venv"
        if os.geteuid() == 0:
            assert s.box.isolation == "namespaces"
            assert json.loads(s.call("peek_hidden", {}).content) == []


def test_a_pack_running_the_agents_code_without_namespaces_is_said_once(tmp_path, capfd, monkeypatch):
    """Without root the local sandbox cannot hide the host's files: a pack whose tools run the agent's own code
    (the interpreter and code families) says so once, naming the fix."""
    from conftest import make_tiny_pack

    import envgen.pack as packmod
    import envgen.sandbox.local as local

    monkeypatch.setattr(local, "_said", set())  # what earlier tests of this process said

    tiny = make_tiny_pack(tmp_path / "tiny")
    pack = packmod.save(packmod.Pack(tiny.manifest.model_copy(update={"family": "interpreter"}), tiny.tasks),
                        tmp_path / "interp", env_from=tiny.env_dir, hidden_from=tiny.hidden_dir)
    for _ in range(2):
        with open_sandbox(pack, "local", isolation="subreaper") as s:
            s.reset()
    err = capfd.readouterr().err
    assert err.count("runs the agent's own code") == 1 and "--sandbox docker" in err
