"""envgen serve for real: a server subprocess, OpenEnv's own EnvClient over WebSocket, the token, the session cap,
the idle reaper, bad requests, and the remote sandbox backend under gymnasium, the pass check and TRL."""

from __future__ import annotations

import json
import time

import gymnasium
import httpx
import pytest

from serve_util import need_openenv  # noqa: E402

need_openenv()

import envgen  # noqa: F401  (registers envgen/Pack-v0)
from envgen.errors import InputError, SandboxError
from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout
from openenv.core.generic_client import GenericEnvClient

from conftest import make_tiny_pack
from serve_util import Server

CAP, IDLE = 3, 2.0


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory) -> str:
    return str(make_tiny_pack(tmp_path_factory.mktemp("serve") / "tiny", limits={"step_timeout_s": 2}).root)


@pytest.fixture(scope="module")
def server(pack_dir):
    s = Server([pack_dir], "--max-sessions", str(CAP), "--idle-timeout", str(IDLE))
    yield s
    s.stop()


def idle(server: Server) -> dict:
    """The metrics once every session of earlier tests is gone (the server closes them asynchronously)."""
    m = server.wait_metrics(lambda m: m["sessions"]["active"] == 0 and m["sandboxes"]["open"] == 0)
    assert m["sessions"]["active"] == 0 and m["sandboxes"]["open"] == 0, m
    return m


def tool_call(name: str, **args) -> dict:
    return {"content": "", "tool_calls": [{"id": f"c_{name}", "type": "function",
                                           "function": {"name": name, "arguments": args}}]}


def oracle_messages(pack_dir: str, task_id: str) -> list:
    """The task's reference as assistant messages (one call per turn, then the answer), read from the pack."""
    from envgen.pack.resolve import open_pack

    ref = open_pack(pack_dir).task(task_id).reference
    return [tool_call(c.tool, **c.args) for c in ref.calls] + [ref.answer]


def test_a_stock_openenv_client_drives_an_episode_to_1_and_a_null_one_to_0(server, pack_dir):
    idle(server)
    with GenericEnvClient(base_url=server.auth_url).sync() as env:  # the token rides in the URL's password
        r = env.reset(task_id="tiny-0")
        assert "Store value-0 under k0" in r.observation["text"] and not r.done
        assert r.observation["info"]["task_id"] == "tiny-0"
        assert {t["function"]["name"] for t in r.observation["info"]["tools"]} >= {"put", "submit"}
        for msg in oracle_messages(pack_dir, "tiny-0"):
            r = env.step({"message": msg})
        assert r.done and r.reward == 1.0
        assert r.observation["info"]["terminated"] is True

        r = env.reset(task_id="tiny-1")  # same session, next episode: the sandbox is reset, not reopened
        r = env.step({"message": ""})
        assert r.done and r.reward == 0.0
    m = idle(server)
    assert m["calls"]["session_reset"] >= 2 and m["calls"]["message"] >= 4
    assert {"p50_ms", "p99_ms", "n"} <= set(m["latency"]["message"])


def test_without_or_with_a_wrong_token_every_door_is_shut(server):
    for url in (server.url, server.auth_url.replace(server.token, "wrong-token")):
        with pytest.raises(ConnectionError, match="401"):
            GenericEnvClient(base_url=url).sync().connect()
    assert httpx.get(server.url + "/metrics").status_code == 401
    assert httpx.get(server.url + "/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(server.url + "/schema").status_code == 401
    assert httpx.get(server.url + "/health").json()["status"] == "healthy"  # health stays open for probes
    ok = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {server.token}"})
    assert ok.status_code == 200 and ok.json()["sessions"]["max"] == CAP


def test_past_the_cap_a_new_session_is_told_the_server_is_busy(server, pack_dir):
    from envgen.pack.resolve import open_pack
    from envgen.sandbox import open_sandbox
    from websockets.sync.client import connect

    idle(server)
    clients = [GenericEnvClient(base_url=server.auth_url).sync() for _ in range(CAP)]
    try:
        for c in clients:
            c.connect()
            c.reset(task_id="tiny-0")
        # OpenEnv's own answer, read off the socket: the server says so right after the handshake, then closes
        with connect(f"ws://127.0.0.1:{server.port}/ws", open_timeout=5,
                     additional_headers={"Authorization": f"Bearer {server.token}"}) as ws:
            answer = json.loads(ws.recv(timeout=5))
        assert answer["type"] == "error" and answer["data"]["code"] == "CAPACITY_REACHED"
        assert "at capacity: 3/3" in answer["data"]["message"]
        # the remote backend waits for a slot up to busy_wait_s, then says why it gave up
        t0 = time.monotonic()
        with pytest.raises(SandboxError, match="busy"):
            open_sandbox(open_pack(pack_dir), f"remote:{server.url}?token={server.token}", busy_wait_s=1.0)
        assert time.monotonic() - t0 < 5
    finally:
        for c in clients:
            c.close()
    idle(server)  # the slots come back once the sessions close
    with GenericEnvClient(base_url=server.auth_url).sync() as c:
        assert not c.reset(task_id="tiny-0").done


def test_an_idle_session_is_reaped_and_its_sandbox_closed(server, pack_dir):
    from envgen.pack.resolve import open_pack
    from envgen.sandbox import open_sandbox

    before = idle(server)["sessions"]["reaped"]
    c = GenericEnvClient(base_url=server.auth_url).sync()
    c.connect()
    c.reset(task_id="tiny-0")
    sbx = open_sandbox(open_pack(pack_dir), f"remote:{server.url}?token={server.token}")
    sbx.reset()
    assert server.metrics()["sandboxes"]["open"] == 2
    m = server.wait_metrics(lambda m: m["sandboxes"]["open"] == 0, timeout=IDLE + 10)  # reaper ticks every 5 s
    assert m["sandboxes"]["open"] == 0 and m["sessions"]["reaped"] == before + 2
    with pytest.raises(RuntimeError, match="session is closed"):
        c.step({"message": ""})
    c.close()
    try:  # the remote backend's next episode gets a new session
        sbx.reset()
        assert sbx.call("add", {"a": 1, "b": 2}).content == "3" and sbx.reconnects == 1
    finally:
        sbx.close()


def test_bad_requests_get_clear_errors_and_the_session_goes_on(server, pack_dir):
    from envgen.serve.client import EnvgenClient

    idle(server)
    with EnvgenClient(server.url, token=server.token).sync() as env:  # the token as a Bearer header
        with pytest.raises(RuntimeError, match="reset the session before stepping"):
            env.step("hi")
        with pytest.raises(RuntimeError, match="no task 'nope'|nope"):
            env.reset(task_id="nope")
        with pytest.raises(RuntimeError, match="unknown reset option"):
            env.reset(colour="blue")
        with pytest.raises(RuntimeError, match="no pack named 'other'"):
            env.reset(pack="other")
        env.reset(task_id="tiny-0")
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"op": "message", "mesage": "typo"})  # a raw action (it has an op) goes as it is
        with pytest.raises(RuntimeError, match="episode session takes"):
            env.step({"op": "call", "tool": "put", "args": {}})
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"op": "message", "message": 42})  # the server's schema check answers; nothing is lost
        r = env.step('<tool_call>{"name": "put", "arguments": {broken</tool_call>')
        assert not r.done and r.observation["info"]["invalid_actions"] == 1  # PackEnv's error observation
        for msg in oracle_messages(pack_dir, "tiny-0"):
            r = env.step(msg)
        assert r.done and r.reward == 1.0  # the episode survived every bad request above
        with pytest.raises(RuntimeError, match="call reset"):
            env.step("one more")  # past the end: gymnasium's ResetNeeded, in words


def test_gymnasium_remote_gives_the_same_rewards_as_local(server, pack_dir, monkeypatch):
    monkeypatch.setenv("ENVGEN_SERVE_TOKEN", server.token)
    rewards = {}
    for backend in ("local", "remote:" + server.url):
        env = gymnasium.make("envgen/Pack-v0", pack=pack_dir, sandbox=backend)
        try:
            rewards[backend] = [rollout(env, pol, task_id=f"tiny-{i}").reward
                                for i in range(3) for pol in (OraclePolicy(), NullPolicy())]
        finally:
            env.close()
    assert rewards["local"] == rewards["remote:" + server.url] == [1.0, 0.0] * 3


def test_remote_tool_failures_have_the_local_semantics(server, pack_dir):
    from envgen.pack.resolve import open_pack
    from envgen.sandbox import open_sandbox

    pack = open_pack(pack_dir)
    script = [("add", {"a": 2, "b": 3}), ("boom", {}), ("spin", {"seconds": 30}), ("die", {}),
              ("add", {"a": 1, "b": 1}), ("nope", {})]
    seen = {}
    for backend in ("local", f"remote:http://envgen:{server.token}@127.0.0.1:{server.port}"):
        with open_sandbox(pack, backend) as sbx:
            sbx.reset()
            t0 = time.monotonic()
            results = [sbx.call(tool, args) for tool, args in script]
            assert time.monotonic() - t0 < 15  # the spin is cut at the pack's 2 s step timeout
            seen[backend.split(":")[0]] = [(r.ok, r.content if r.ok else r.error["type"]) for r in results]
            assert sbx.restarts >= 1  # the runtime died and was restarted, on either side
    assert seen["remote"] == seen["local"]
    assert seen["local"][0] == (True, "5") and seen["local"][4] == (True, "2")  # it works on after the crash
    assert [ok for ok, _ in seen["local"]] == [True, False, False, False, True, False]


def test_a_wrong_token_or_no_server_is_a_sandbox_error_not_a_hang(server, pack_dir, tmp_path):
    from envgen.pack.resolve import open_pack
    from envgen.sandbox import open_sandbox

    pack = open_pack(pack_dir)
    with pytest.raises(SandboxError, match="token is missing or wrong"):
        open_sandbox(pack, f"remote:{server.url}?token=wrong")
    t0 = time.monotonic()
    with pytest.raises(SandboxError, match="no session"):
        open_sandbox(pack, "remote:http://127.0.0.1:9", connect_timeout=1.0)
    assert time.monotonic() - t0 < 10
    with pytest.raises(InputError, match="remote:http://HOST:PORT"):
        gymnasium.make("envgen/Pack-v0", pack=pack_dir, sandbox="remote:ftp://x")
    other = make_tiny_pack(tmp_path / "tiny", tasks=2)  # same name, other content: another version
    with pytest.raises(SandboxError, match="this server has version sha256:.*, the client sha256:"):
        open_sandbox(other, f"remote:{server.url}?token={server.token}")


def test_killing_the_server_mid_episode_is_an_error_observation_not_a_hang(pack_dir, monkeypatch):
    import re

    s = Server([pack_dir], "--json", token="")  # no token given: the server makes one and prints it
    s.token = re.search(r'"token": "([^"]+)"', s.output()).group(1)
    assert len(s.token) >= 24 and httpx.get(s.url + "/metrics").status_code == 401
    monkeypatch.setenv("ENVGEN_SERVE_TOKEN", s.token)
    env = gymnasium.make("envgen/Pack-v0", pack=pack_dir, sandbox="remote:" + s.url,
                         sandbox_options={"connect_timeout": 2.0})
    try:
        env.reset(options={"task_id": "tiny-0"})
        obs, *_ = env.step(tool_call("put", key="k0", value="value-0"))
        assert "stored" in obs
        import psutil

        sandbox = psutil.Process(s.pid).children(recursive=True)
        assert sandbox  # the session's sandbox: its supervisor and runtime
        s.kill()
        t0 = time.monotonic()
        obs, reward, terminated, truncated, info = env.step(tool_call("submit", answer="value-0"))
        assert "connection_lost" in obs and info["tool_errors"] == 1 and not terminated
        obs, reward, terminated, truncated, info = env.step("Done.")
        assert terminated and reward == 0.0 and "connection_lost" in info["reward_details"]["error"]
        assert time.monotonic() - t0 < 15
        with pytest.raises(SandboxError, match="no session"):  # the retried session finds no server
            env.reset(options={"task_id": "tiny-0"})
        assert time.monotonic() - t0 < 30
        assert not [p.pid for p in sandbox if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]  # none orphaned
    finally:
        env.close()
        s.stop()


def test_the_pass_check_and_trl_run_on_a_remote_sandbox(server, pack_dir, tmp_path, monkeypatch):
    from envgen.passcheck.check import check
    from envgen.rl.env import environment_class

    monkeypatch.setenv("ENVGEN_SERVE_TOKEN", server.token)
    report = check(pack_dir, "oracle", k=1, workers=2, sandbox="remote:" + server.url,
                   store_url=str(tmp_path / "state.sqlite"))
    assert all(st["passes"] == 1 for st in report.stats.values()) and len(report.stats) == 3
    assert {st["sandbox"] for st in report.stats.values()} == {"remote"}
    assert all(server.token not in str(st) for st in report.stats.values())

    env = environment_class(pack_dir, sandbox="remote:" + server.url)()
    try:
        env.reset(task_id="tiny-2")
        assert env.put(key="k2", value="value-2") == "stored"
        env.submit(answer="value-2")
        assert env._finish("Stored value-2.") == 1.0
    finally:
        env._close()


def test_no_token_is_refused_off_loopback():
    from envgen.serve import resolve_token

    assert resolve_token(None, True, "127.0.0.1") is None
    assert len(resolve_token(None, False, "0.0.0.0")) >= 24  # generated
    with pytest.raises(InputError, match="only allowed on a loopback"):
        resolve_token(None, True, "0.0.0.0")
    with pytest.raises(InputError, match="choose one"):
        resolve_token("t", True, "127.0.0.1")


def test_the_command_refuses_no_token_off_loopback_in_one_line(pack_dir):
    import subprocess
    import sys

    from serve_util import ROOT

    r = subprocess.run([sys.executable, "-m", "envgen", "serve", pack_dir, "--no-token", "--host", "0.0.0.0"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --no-token is only allowed on a loopback address (127.0.0.1, ::1), not '0.0.0.0'"]


def test_normal_closes_and_a_step_past_the_end_log_one_info_line_and_a_stock_client_reads_busy(pack_dir, caplog):
    """The server in this process (uvicorn with the test's logging): sessions that end normally (a stock client's,
    a remote sandbox's), a step after the episode's end and a session refused at the cap log no ERROR and no
    traceback; the refused stock client reads why."""
    import logging
    import threading

    import uvicorn

    from envgen.pack.resolve import open_pack
    from envgen.sandbox import open_sandbox
    from envgen.serve.server import build_app
    from serve_util import free_port

    caplog.set_level(logging.INFO)
    pack, port = open_pack(pack_dir), free_port()
    srv = uvicorn.Server(uvicorn.Config(build_app([pack], token="tok-1", max_sessions=1), host="127.0.0.1",
                                        port=port, log_config=None, log_level="info"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not srv.started and time.monotonic() < deadline:
            time.sleep(0.05)
        url = f"http://envgen:tok-1@127.0.0.1:{port}"
        with GenericEnvClient(base_url=url).sync() as env:
            env.reset(task_id="tiny-0")
            assert env.step({"message": "Done."}).done
            with pytest.raises(RuntimeError, match="call reset"):
                env.step({"message": "one more"})
            from websockets.exceptions import ConnectionClosed

            with pytest.raises((RuntimeError, ConnectionClosed), match="session cap|CAPACITY_REACHED"):
                with GenericEnvClient(base_url=url).sync() as other:
                    other.reset(task_id="tiny-0")
        sbx = open_sandbox(pack, f"remote:http://127.0.0.1:{port}?token=tok-1")
        sbx.reset()
        sbx.close()
        time.sleep(0.5)  # the server's side of the last close
    finally:
        srv.should_exit = True
        thread.join(30)
    bad = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not bad, [f"{r.name}: {r.getMessage()}" for r in bad]
    assert any("refused: call reset()" in r.getMessage() for r in caplog.records if r.name == "envgen.serve")


def test_more_pass_check_workers_than_sessions_keep_every_oracle_task(server, pack_dir, tmp_path, monkeypatch):
    """Workers past the server's --max-sessions wait their turn (each rollout gives its session back): no
    rollout errs, every task the oracle solves is kept, and no session is left open."""
    from envgen.passcheck.check import check

    errors = idle(server)["errors"]
    monkeypatch.setenv("ENVGEN_SERVE_TOKEN", server.token)
    report = check(pack_dir, "oracle", k=2, workers=CAP + 2, sandbox="remote:" + server.url,
                   store_url=str(tmp_path / "state.sqlite"))
    assert {t: (st["kept"], st["errors"]) for t, st in report.stats.items()} == {
        f"tiny-{i}": (True, 0) for i in range(3)}
    assert idle(server)["errors"] == errors  # no session refused or failed on the server either
