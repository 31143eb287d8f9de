"""Docker sandbox, for real: the protocol, verification with hidden/, and containment of hostile tools.

Every containment test ends the same way: the sandbox answers the next call, and a fresh episode
(the task's reference replayed) still scores 1, so the host and the next episode are unaffected.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from envgen.pack import format as packmod
from envgen.episodes.episode import Episode, replay
from envgen.errors import SandboxError
from envgen.sandbox import open_sandbox
from envgen.sandbox.docker import LABEL, PIDS_LIMIT, DockerSandbox, engine, gc, io_root
from envgen.sandbox.pool import WarmPool

pytestmark = pytest.mark.docker


def _ours(client) -> list:
    return client.containers.list(all=True, filters={"label": [LABEL, f"envgen.owner_pid={os.getpid()}"]})


@pytest.fixture(scope="module")
def shared(docker_tiny_pack):
    """One container for the module (a container start is ~0.6 s); each test starts a fresh episode in it."""
    sbx = DockerSandbox(docker_tiny_pack)
    with sbx:
        yield sbx


@pytest.fixture
def sbx(shared):
    shared.reset()
    yield shared
    shared.reset()
    assert _scores(shared), "the next episode must be unaffected"


def _scores(sbx) -> bool:
    task = sbx.pack.tasks[0]
    return replay(sbx, task, task.reference.calls, task.reference.answer).verdict.reward == 1.0


def _live(sbx) -> list[dict]:
    return [p for p in sbx.processes() if p["state"] not in ("Z", "X")]


# ---------------------------------------------------------------- protocol and verification


def test_calls_and_structured_errors(sbx):
    assert sbx.call("add", {"a": 2, "b": 40}).content == "42"
    r = sbx.call("boom", {})
    assert not r.ok and r.error == {"type": "ValueError", "message": "boom happened"}
    assert sbx.call("add", {"a": 1}).error["type"] == "bad_arguments"
    assert sbx.call("warp", {}).error["type"] == "unknown_tool"
    assert sbx.call("put", {"key": "a", "value": "ü中"}).ok and sbx.call("get", {"key": "a"}).content == "ü中"


def test_reference_scores_one_and_hidden_is_never_visible_to_the_agent(sbx, docker_tiny_pack):
    for task in docker_tiny_pack.tasks:
        ep = Episode(sbx, task)
        assert json.loads(ep.call("peek_hidden", {}).content) == []
        assert json.loads(ep.call("find_file", {"name": "verify.py"}).content) == []
        for c in task.reference.calls:
            assert ep.call(c.tool, dict(c.args)).ok
        assert ep.finish(task.reference.answer).reward == 1.0
        sbx.box.settle()  # the verify's clean-up runs after the verdict returns, before the box's next use
        assert not (sbx.box.iodir / "hidden").exists(), "hidden/ is removed before the next runtime starts"
    sbx.reset()
    assert json.loads(sbx.call("find_file", {"name": "verify.py"}).content) == []
    empty = Episode(sbx, docker_tiny_pack.tasks[0])
    assert empty.finish("").reward == 0.0


def test_reset_restores_pristine_state_and_empties_tmp(sbx):
    assert sbx.call("put", {"key": "k", "value": "v"}).ok
    assert sbx.call("write_outside", {"path": "/tmp/leftover"}).ok
    sbx.reset()
    assert sbx.call("get", {"key": "k"}).error["type"] == "KeyError"
    assert json.loads(sbx.call("find_file", {"name": "leftover"}).content) == []


def test_noop_call_is_a_pipe_round_trip(sbx):
    for _ in range(50):
        sbx.call("noop", {})
    times = sorted(sbx.call("noop", {}).seconds for _ in range(500))
    assert times[len(times) // 2] < 0.0005, f"no-op p50 {times[len(times) // 2] * 1e3:.3f} ms"


def test_container_runs_with_the_containment_defaults(sbx):
    attrs = engine().api.inspect_container(sbx.container_id)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["Memory"] == 256 << 20 and host["MemorySwap"] == 256 << 20
    assert host["NanoCpus"] == 10**9 and host["PidsLimit"] == PIDS_LIMIT
    assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
    labels = attrs["Config"]["Labels"]
    assert labels[LABEL] == "1" and labels["envgen.pack"] == "tiny" and labels["envgen.owner_pid"] == str(os.getpid())
    assert {p["uid"] for p in sbx.processes()} == {10001}, "everything the agent can reach runs unprivileged"


# ---------------------------------------------------------------- containment


def test_fork_bomb_is_capped_then_cleared(sbx):
    r = sbx.call("fork_bomb", {})
    # The runtime's own alarm answers "timeout"; starved of CPU by its children it may miss the host's
    # deadline instead, and then the host kills everything ("killed"). Either way the call is stopped.
    assert r.error["type"] in ("timeout", "killed")
    assert len(_live(sbx)) <= PIDS_LIMIT
    assert sbx.call("noop", {}).ok
    before = sbx.strays_killed
    sbx.reset()
    assert [p["name"] for p in _live(sbx)] == ["python3"], "only the fresh runtime is left"
    if r.error["type"] == "timeout":
        assert sbx.strays_killed - before > 100


def test_memory_hog_is_stopped_by_the_memory_limit(sbx):
    assert sbx.call("hog", {"mb": 100_000}).error["type"] == "MemoryError"
    r = sbx.call("fill", {"mb": 1024})
    assert r.error["type"] == "crashed" and "restarted" in r.error["message"]
    assert sbx.call("fill", {"mb": 16}).content == str(16 << 20)


def test_runaway_python_and_blocked_c_code_are_stopped(sbx):
    t0 = time.monotonic()
    assert sbx.call("spin", {}, timeout=0.5).error["type"] == "timeout"
    assert time.monotonic() - t0 < 2 and sbx.call("noop", {}).ok
    sbx.call("put", {"key": "kept", "value": "yes"})
    restarts = sbx.restarts
    r = sbx.call("block", {}, timeout=0.5)
    assert r.error["type"] == "killed" and sbx.restarts == restarts + 1
    assert sbx.call("get", {"key": "kept"}).content == "yes", "the episode's state survives the restart"


def test_a_gigabyte_of_output_is_truncated_or_stopped(sbx, docker_tiny_pack):
    limit = docker_tiny_pack.manifest.limits.output_limit
    r = sbx.call("flood", {"mb": 1024})
    assert r.ok and len(r.content) < limit + 100 and "...[truncated" in r.content
    r = sbx.call("shout", {"n": 1 << 30})  # one 1 GiB string: past the 256 MB limit
    assert r.error["type"] == "crashed"


def test_network_egress_is_refused(sbx):
    r = sbx.call("egress", {})
    assert r.error["type"] == "OSError" and "unreachable" in r.error["message"]
    assert not sbx.call("egress", {"host": "example.com", "port": 443}).ok


def test_writes_outside_the_work_dir_are_refused(sbx):
    for path in ("/env/tools.py", "/etc/passwd", "/opt/envgen/runtime/server.py", "/usr/bin/python3", "/pwned"):
        r = sbx.call("write_outside", {"path": path})
        assert not r.ok and "Read-only file system" in r.error["message"], path
    r = sbx.call("write_outside", {"path": "/run/envgen/injected"})
    assert r.error["type"] == "PermissionError"
    assert sbx.call("write_outside", {"path": "/work/mine"}).ok


def test_killing_the_runtime_or_the_supervisor(sbx):
    assert sbx.call("signal_pid", {"pid": 1}).error["type"] == "PermissionError"
    r = sbx.call("die", {})
    assert r.error["type"] == "crashed" and "restarted" in r.error["message"]
    assert sbx.call("noop", {}).ok


def test_stray_processes_are_killed_before_hidden_is_staged(sbx, docker_tiny_pack):
    pid = int(sbx.call("sleeper", {}).content)
    assert pid in {p["pid"] for p in _live(sbx)}
    assert sbx.verify(docker_tiny_pack.tasks[1], "", []).reward == 0.0
    assert pid not in {p["pid"] for p in _live(sbx)}
    assert sbx.strays_killed >= 1


def test_a_forked_child_cannot_touch_the_parents_container(sbx):
    pid = os.fork()
    if pid == 0:  # a process-pool worker forked while the sandbox was open, closing its copy
        try:
            sbx.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert sbx.call("noop", {}).ok and sbx.box.iodir.exists()


def test_episode_wall_clock_limit(docker_tiny_pack, tmp_path):
    manifest = docker_tiny_pack.manifest.model_copy(deep=True)
    manifest.limits.episode_timeout_s = 1.0
    pack = packmod.save(packmod.Pack(manifest, docker_tiny_pack.tasks, docker_tiny_pack.root), tmp_path / "short")
    with DockerSandbox(pack) as sbx:
        sbx.reset()
        r = sbx.call("spin", {"seconds": 5.0})
        assert r.error["type"] in ("timeout", "killed")
        r = sbx.call("noop", {})
        assert r.error["type"] == "episode_timeout"
        sbx.reset()
        assert sbx.call("noop", {}).ok


# ---------------------------------------------------------------- lifecycle: close, gc, pool


def test_close_leaves_nothing_behind(docker_tiny_pack):
    client = engine()
    sbx = open_sandbox(docker_tiny_pack, "docker")
    assert isinstance(sbx, DockerSandbox) and _scores(sbx)
    cid, iodir = sbx.container_id, sbx.box.iodir
    sbx.close()
    assert cid not in {c.id for c in _ours(client)} and not iodir.exists()
    assert isinstance(open_sandbox(docker_tiny_pack, "auto"), DockerSandbox)


def test_killed_owner_leaves_nothing_after_gc(docker_tiny_pack):
    client = engine()
    code = textwrap.dedent(f"""
        import sys, time
        from envgen.pack import load
        from envgen.sandbox.docker import DockerSandbox
        s = DockerSandbox(load({str(docker_tiny_pack.root)!r})).__enter__()
        print(s.container_id, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        cid = proc.stdout.readline().strip()
        assert cid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    gc(client)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and cid in {c.id for c in client.containers.list(all=True)}:
        time.sleep(0.1)
    assert cid not in {c.id for c in client.containers.list(all=True)}
    assert not [d for d in io_root().iterdir() if f"-{proc.pid}-" in d.name]


def test_gc_removes_containers_of_dead_owners_only(docker_tiny_pack):
    client = engine()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = client.containers.run(docker_tiny_pack.manifest.image.tag, ["sleep", "600"], detach=True,
                                   network_mode="none", labels={LABEL: "1", "envgen.owner_host": os.uname().nodename,
                                                                "envgen.owner_pid": dead.stdout.strip(),
                                                                "envgen.owner_start": "0"})
    with DockerSandbox(docker_tiny_pack) as live:
        live.reset()
        assert gc(client) == 1
        assert orphan.id not in {c.id for c in client.containers.list(all=True)}
        assert live.call("noop", {}).ok, "a live owner's container is left alone"


def test_warm_pool_hands_out_started_containers_and_recycles_them(docker_tiny_pack):
    client = engine()
    with WarmPool(size=1, idle_timeout_s=60) as pool:
        pool.prewarm(docker_tiny_pack, wait=True)
        assert pool.idle() == 1
        t0 = time.perf_counter()
        sbx = DockerSandbox(docker_tiny_pack, pool=pool).__enter__()
        sbx.reset()
        assert time.perf_counter() - t0 < 0.25 and pool.hits == 1
        first = sbx.container_id
        assert sbx.call("write_outside", {"path": "/tmp/dirt"}).ok and _scores(sbx)
        sbx.close()
        deadline = time.monotonic() + 10
        while pool.idle() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        with DockerSandbox(docker_tiny_pack, pool=pool) as again:
            again.reset()
            assert again.container_id == first, "the recycled container came back"
            assert json.loads(again.call("find_file", {"name": "dirt"}).content) == []
            assert _scores(again)
    assert first not in {c.id for c in _ours(client)}, "closing the pool removes its containers"


def test_pool_idle_timeout_removes_containers(docker_tiny_pack):
    with WarmPool(size=1, idle_timeout_s=0.5) as pool:
        pool.prewarm(docker_tiny_pack, wait=True)
        assert pool.idle() == 1
        deadline = time.monotonic() + 10
        while pool.idle() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pool.idle() == 0


def test_a_missing_image_is_one_clear_error(docker_tiny_pack):
    with pytest.raises(SandboxError, match="not present"):
        DockerSandbox(docker_tiny_pack, image="envgen/pack:does-not-exist")


def test_a_pack_may_ask_for_network(docker_tiny_pack, tmp_path):
    manifest = docker_tiny_pack.manifest.model_copy(deep=True)
    manifest.limits.network = True
    pack = packmod.save(packmod.Pack(manifest, docker_tiny_pack.tasks, docker_tiny_pack.root), tmp_path / "net")
    with DockerSandbox(pack) as sbx:
        sbx.reset()
        assert engine().api.inspect_container(sbx.container_id)["HostConfig"]["NetworkMode"] == "bridge"


def test_travel_pack_end_to_end_through_gymnasium(tmp_path):
    """The general family's travel-planning pack, gated and played in Docker: oracle 1, null 0, check_env."""
    import warnings

    import gymnasium
    from gymnasium.utils.env_checker import check_env

    from envgen.build.offline import build
    from envgen.policies.builtin import make_policy, rollout

    build("general", "travel-planning", tmp_path / "travel", tasks=3, seed=5, sandbox="docker", workers=2)
    env = gymnasium.make("envgen/Pack-v0", pack=str(tmp_path / "travel"), sandbox="docker")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)
        assert [str(w.message) for w in caught] == []
        for task in packmod.load(tmp_path / "travel").tasks:
            assert rollout(env, make_policy("oracle"), task_id=task.id).reward == 1.0
            assert rollout(env, make_policy("null"), task_id=task.id).reward == 0.0
        assert env.unwrapped.sandbox.backend == "docker"
        cid = env.unwrapped.sandbox.container_id
    finally:
        env.close()
    assert cid not in {c.id for c in _ours(engine())}
