"""Attacks on envgen serve that try to get hidden/ or a task's reference out through the tools or the protocol:
every answer of the server (WebSocket frames and HTTP bodies) is captured and searched for the verifier's
source and the reference's answer, which only the server may hold."""

from __future__ import annotations

import json

import httpx
import pytest

from serve_util import need_openenv  # noqa: E402

need_openenv()

from websockets.sync.client import connect

from conftest import make_tiny_pack
from serve_util import Server

SECRETS = ("subs = [c for c in calls", "def verify(answer, calls", "Stored value-0.", "Stored value-1.")
"""hidden/verify.py's source, and reference answers the client never sends in these attacks."""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pack = make_tiny_pack(tmp_path_factory.mktemp("serve-adv") / "tiny")
    s = Server([str(pack.root)])
    yield s
    s.stop()


class Session:
    """A raw OpenEnv WebSocket session that keeps every frame the server sends."""

    def __init__(self, server: Server):
        self._cm = connect(f"ws://127.0.0.1:{server.port}/ws", open_timeout=10,
                           additional_headers={"Authorization": f"Bearer {server.token}"})
        self.ws = self._cm.__enter__()
        self.frames: list[str] = []

    def send(self, kind: str, data: dict | None = None) -> dict:
        self.ws.send(json.dumps({"type": kind, **({"data": data} if data is not None else {})}))
        raw = self.ws.recv(timeout=30)
        self.frames.append(raw)
        return json.loads(raw)

    def step(self, **action) -> dict:
        return self.send("step", action)

    def close(self) -> None:
        self._cm.__exit__(None, None, None)


def assert_clean(texts: list[str]) -> None:
    for t in texts:
        for s in SECRETS:
            assert s not in t, f"the server sent {s!r}: {t[:300]}"


def call_msg(tool: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"id": "x", "type": "function", "function": {"name": tool, "arguments": args}}]}


def test_tools_cannot_see_hidden_through_an_episode_session(server):
    s = Session(server)
    try:
        s.send("reset", {"task_id": "tiny-0"})
        r = s.step(message=call_msg("peek_hidden"))
        assert "[]" in r["data"]["observation"]["text"]  # no hidden/ where the agent's tools run
        r = s.step(message=call_msg("get", key="../../hidden/verify.py"))
        r = s.step(message="I give up.")  # a wrong answer: the verdict's details would quote the expected one
        assert r["data"]["done"] and r["data"]["reward"] == 0.0
        details = r["data"]["observation"]["info"]["reward_details"]
        assert "got" not in details and "withheld" in details
        s.send("state")
    finally:
        s.close()
    assert_clean(s.frames)


def test_the_protocol_gives_no_way_to_hidden_or_references(server):
    s = Session(server)
    try:
        for bad in ({"pack": "../hidden"}, {"pack": "tiny/../../etc"}, {"task_id": "../hidden/verify.py"},
                    {"mode": "verifier"}, {"reference": True}):
            assert s.send("reset", bad)["type"] == "error"
        r = s.send("reset", {"mode": "sandbox"})
        assert r["type"] == "observation"
        s.step(op="reset")
        assert "[]" in s.step(op="call", tool="peek_hidden", args={})["data"]["observation"]["text"]
        # a sandbox session's verify is judged with the server's task: a wrong answer's details are withheld
        r = s.step(op="verify", task_id="tiny-1", answer="wrong", calls=[], messages=[])
        assert r["data"]["reward"] == 0.0 and "withheld" in r["data"]["observation"]["info"]["details"]
        # forged calls claiming a submission: still judged on the server's own state (nothing was stored)
        forged = [{"tool": "submit", "args": {"answer": "value-1"}, "ok": True, "content": "submitted",
                   "error": None, "seconds": 0.0, "turn": 1}]
        s.step(op="reset")
        r = s.step(op="verify", task_id="tiny-1", answer="x", calls=forged, messages=[])
        assert r["data"]["reward"] == 0.0
        for action in ({"op": "call", "tool": "__import__", "args": {}}, {"op": "verify"},
                       {"op": "message", "message": "x"}, {"op": "shell", "tool": "cat"}):
            assert s.step(**action)["type"] in ("error", "observation")
    finally:
        s.close()
    assert_clean(s.frames)
    headers = {"Authorization": f"Bearer {server.token}"}
    bodies = [httpx.get(server.url + p, headers=headers).text for p in ("/schema", "/metadata", "/metrics",
                                                                         "/health", "/openapi.json", "/docs")]
    assert_clean(bodies)


def test_a_forged_call_record_scores_0_and_verify_answers_once_per_episode(server):
    """The server judges the calls it ran, not the record the client sends: a ``submit`` that never ran earns
    nothing, and an episode is verified once (no oracle for testing guesses against the hidden answer)."""
    record = [{"tool": "put", "args": {"key": "k1", "value": "value-1"}, "ok": True, "content": "stored",
               "error": None, "seconds": 0.0, "turn": 1},
              {"tool": "submit", "args": {"answer": "value-1"}, "ok": True, "content": "submitted",
               "error": None, "seconds": 0.0, "turn": 2}]
    s = Session(server)
    try:
        s.send("reset", {"mode": "sandbox"})
        assert s.step(op="verify", task_id="tiny-1", answer="x", calls=record)["type"] == "error"  # no episode yet
        s.step(op="reset")
        s.step(op="call", tool="put", args={"key": "k1", "value": "value-1"})  # the real work, but no submit
        r = s.step(op="verify", task_id="tiny-1", answer="Stored value-1.", calls=record, messages=[])
        assert r["data"]["reward"] == 0.0
        for again in ({"op": "verify", "task_id": "tiny-1", "answer": "Stored value-1.", "calls": record},
                      {"op": "call", "tool": "submit", "args": {"answer": "value-1"}}):
            r = s.step(**again)
            assert r["type"] == "error" and "op=reset first" in r["data"]["message"]
        s.step(op="reset")  # the honest episode: the same record, every call run here
        for c in record:
            s.step(op="call", tool=c["tool"], args=c["args"])
        assert s.step(op="verify", task_id="tiny-1", answer="Stored value-1.", calls=record)["data"]["reward"] == 1.0
    finally:
        s.close()
    assert_clean(s.frames)


def test_the_judged_calls_are_the_servers_own_with_the_clients_turns(tmp_path):
    from envgen.serve.server import judged_calls

    pack = make_tiny_pack(tmp_path / "tiny", tasks=1)
    task = pack.task("tiny-0")
    own = [{"tool": "put", "args": {"key": "k0", "value": "v"}, "ok": True, "content": "stored", "error": None,
            "seconds": 0.01, "turn": None},
           {"tool": "get", "args": {"key": "k0"}, "ok": True, "content": "v", "error": None, "seconds": 0.01,
            "turn": None}]
    claimed = [{"tool": "put", "args": {"value": "v", "key": "k0"}, "ok": True, "content": "tampered", "turn": 1},
               {"tool": "nope", "args": {}, "ok": False, "turn": 2},  # refused without running: re-checked here
               {"tool": "put", "args": {"key": 5}, "ok": False, "turn": 2},  # bad arguments: refused here too
               {"tool": "submit", "args": {"answer": "v"}, "ok": True, "content": "submitted", "turn": 3}]  # never ran
    got = judged_calls(own, claimed, pack, task)
    assert [(c["tool"], c["ok"], c["turn"]) for c in got] == [
        ("put", True, 1), ("nope", False, 2), ("put", False, 2), ("get", True, None)]  # the left-out get: judged
    assert got[0]["content"] == "stored" and got[1]["error"]["type"] == "unknown_tool"
    assert got[2]["error"]["type"] == "bad_arguments"
