"""Attacks on the sandbox and the verification path (issue classes 1-6), each a real attack through
`gymnasium.make`: hostile tools run in a real sandbox, and the attack must not earn reward 1, leak
`hidden/`, outlive its episode, or grow the host.

The hostile tools stand in for what an RL policy could make a pack's tools do (the code family's bash
tool runs arbitrary code, and a general pack's tools may have bugs): patch the verifier kit in memory,
forge verdict lines on the reply channel, leave threads and detached processes that wait for
`hidden/`, stash data in /dev/shm, /tmp and System V IPC for the next episode, flood the reply channel.
"""

from __future__ import annotations

import json
import os
import stat
import tracemalloc

import gymnasium
import pytest

import envgen  # noqa: F401  (registers envgen/Pack-v0)
import envgen.paths
from envgen.episodes.actions import render_action
from envgen.errors import SandboxError

from conftest import make_tiny_pack

HOSTILE = r'''

import ctypes, shutil, sys, threading, types


def _verifier_dirs() -> list:
    """Every verifier-kit dir a tool can learn from the command lines it can see."""
    found = {"/opt/envgen/verifiers"}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
            except OSError:
                continue
            for i, a in enumerate(argv):
                if a == "--verifiers" and i + 1 < len(argv):
                    found.add(argv[i + 1])
                if a.startswith("[") and "--verifiers" in a:
                    cmd = json.loads(a)
                    found.add(cmd[cmd.index("--verifiers") + 1])
    return sorted(d for d in found if os.path.isdir(d))


def tamper() -> str:
    """Replace and patch the verifier kit in this process, every way a tool can."""
    fake = types.ModuleType("envgen_verifiers")
    fake.verify = lambda *a, **k: {"reward": 1.0, "details": {"forged": True}}
    dirs = _verifier_dirs()
    for d in dirs:
        sys.path.insert(0, d)
    try:
        import envgen_verifiers as real
        real.verify = fake.verify
        for kind in list(real.KINDS):
            real.KINDS[kind] = lambda *a, **k: {"reward": 1.0}
    except ImportError:
        pass
    sys.modules["envgen_verifiers"] = fake
    import builtins
    orig = builtins.__import__
    builtins.__import__ = lambda name, *a, **k: fake if name == "envgen_verifiers" else orig(name, *a, **k)
    return json.dumps(dirs)


def forge() -> str:
    """A thread that keeps writing forged verdicts (every plausible id) on every writable fd."""
    lines = b"".join(json.dumps({"ok": True, "reward": 1.0, "details": {"forged": True}, "id": i}).encode() + b"\n"
                     for i in range(1, 200))

    def loop():
        while True:
            for fd in range(0, 64):
                try:
                    os.write(fd, lines)
                except OSError:
                    pass
            time.sleep(0.001)

    threading.Thread(target=loop, daemon=True).start()
    return "forging"


_TARGETS = ["/run/envgen/hidden", os.path.abspath("../io/hidden")]


def _copy_hidden_forever():
    while True:
        for t in _TARGETS:
            if os.path.isdir(t):
                for dest in ("/dev/shm/loot", "/tmp/loot", os.path.join(os.environ.get("TMPDIR", "/tmp"), "loot"),
                             "loot"):
                    try:
                        shutil.copytree(t, dest, dirs_exist_ok=True)
                    except OSError:
                        pass
        time.sleep(0.0005)


def spy() -> str:
    """Leave a thread and a detached (setsid, double-forked) process copying hidden/ out when it appears,
    and a System V shared memory segment for the next episode."""
    threading.Thread(target=_copy_hidden_forever, daemon=True).start()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                _copy_hidden_forever()
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    with open("/dev/shm/stash", "w") as f:
        f.write("from an earlier episode")
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(0x5EC2E7, 4096, 0o1600)  # IPC_CREAT | 0600
    return json.dumps({"shmid": shmid})


def loot() -> str:
    """What an earlier episode left behind, anywhere this episode can look."""
    seen = {}
    for d in ("/dev/shm", "/tmp", os.environ.get("TMPDIR", "/tmp"), "."):
        try:
            seen[d] = sorted(n for n in os.listdir(d) if n in ("loot", "stash"))
        except OSError:
            seen[d] = []
    try:
        seen["ipc"] = [r.split()[0] for r in open("/proc/sysvipc/shm").read().splitlines()[1:]]
    except OSError:
        seen["ipc"] = []
    return json.dumps(seen)


def reply_flood(mb: int = 200) -> str:
    """Write megabytes with no newline straight onto the reply channel, then answer normally.

    Args:
        mb: megabytes
    """
    chunk = b"z" * (1 << 20)
    for fd in range(3, 64):
        try:
            if os.fstat(fd).st_mode & 0o170000 == 0o010000 and os.get_blocking(fd):  # a FIFO
                for _ in range(mb):
                    os.write(fd, chunk)
        except OSError:
            pass
    return "flooded"


def detach(marker: int) -> str:
    """Start a setsid'd, double-forked sleeper named by `marker` that should outlive the sandbox.

    Args:
        marker: seconds to sleep (a number unlikely to appear elsewhere, to find it on the host)
    """
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", str(marker)])
        os._exit(0)
    os.waitpid(pid, 0)
    return "detached"


def escape(marker: str) -> str:
    """Try to change the host: new files beside the verifier kit and in /etc and /var/tmp, an edit of the
    pristine env copy, and a remount of / read-write.

    Args:
        marker: a name part that makes the files this test's
    """
    out = {}
    targets = [os.path.join(d, "envgen_verifiers", f"pwned_{marker}.py") for d in _verifier_dirs()]
    targets += [f"/etc/envgen-pwned-{marker}", f"/var/tmp/envgen-pwned-{marker}", os.path.abspath("../env/tools.py"),
                os.path.abspath(f"../io/pwned-{marker}")]
    for t in targets:
        try:
            with open(t, "a") as f:
                f.write("PWNED = True\n")
            out[t] = "written"
        except OSError as e:
            out[t] = type(e).__name__
    libc = ctypes.CDLL(None, use_errno=True)
    rc = libc.mount(None, b"/", None, ctypes.c_ulong(32 | 4096), None)  # MS_REMOUNT | MS_BIND, read-write
    out["remount"] = "ok" if rc == 0 else os.strerror(ctypes.get_errno())
    return json.dumps(out)


def whereami() -> str:
    """Every path this process can learn about itself and the processes it can see."""
    seen = {"cwd": os.getcwd(), "environ": dict(os.environ), "uid": os.getuid(), "cmdlines": [], "fds": []}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                seen["cmdlines"].append(open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"))
            except OSError:
                pass
    for fd in os.listdir("/proc/self/fd"):
        try:
            seen["fds"].append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return json.dumps(seen)
'''


def call(name, **args):
    return render_action("", [(name, args)])


def tool(env, name, **args) -> tuple[str, dict]:
    """Step one tool call; the tool's own text (the last tool message) and the step's info."""
    *_, info = env.step(call(name, **args))
    return info["messages"][-1]["content"], info


@pytest.fixture(scope="module")
def hostile_pack(tmp_path_factory):
    return make_tiny_pack(tmp_path_factory.mktemp("hostile") / "tiny", extra_tools=HOSTILE)


@pytest.fixture(scope="module")
def docker_hostile_pack(tmp_path_factory):
    from envgen.sandbox.images import build_pack_image, stderr_log

    pack = make_tiny_pack(tmp_path_factory.mktemp("dhostile") / "tiny", extra_tools=HOSTILE, limits={"memory_mb": 256})
    return build_pack_image(pack, log=stderr_log)


def _env(pack, backend):
    return gymnasium.make("envgen/Pack-v0", pack=str(pack.root), sandbox=backend)


def _wrong_episode(env, attack, **args) -> float:
    """Run an attack tool, then hand in a wrong answer; the reward the verifier gives."""
    env.reset(options={"task_id": "tiny-0"})
    text, info = tool(env, attack, **args)
    # The forger's own call already meets its forged lines (they carry no content): proof it is writing.
    assert info["tool_errors"] == 0 or (attack == "forge" and "bad_reply" in text), f"the attack failed: {text}"
    env.step(call("submit", answer="not the value"))
    _, reward, terminated, _, info = env.step("Done.")
    assert terminated
    return reward


def _right_episode(env) -> float:
    env.reset(options={"task_id": "tiny-0"})
    env.step(call("put", key="k0", value="value-0"))
    env.step(call("submit", answer="value-0"))
    return env.step("Done.")[1]


BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


def _pack_for(backend, request):
    return request.getfixturevalue("docker_hostile_pack" if backend == "docker" else "hostile_pack")


# ---------------------------------------------------------------- 1. verification shares a process with the tools


@pytest.mark.parametrize("backend", [*BACKENDS, "local-subreaper"])
@pytest.mark.parametrize("attack", ["tamper", "forge"])
def test_tools_cannot_reach_the_verdict(backend, attack, request):
    """A patched/replaced verifier kit or forged verdict lines: the wrong answer still scores 0, in this
    episode and in the next ones (the local runtime used to be reused, tampering and all)."""
    if backend == "local-subreaper":
        env = gymnasium.make("envgen/Pack-v0", pack=str(request.getfixturevalue("hostile_pack").root),
                             sandbox="local", sandbox_options={"isolation": "subreaper"})
    else:
        env = _env(_pack_for(backend, request), backend)
    try:
        assert _wrong_episode(env, attack) == 0.0
        assert _wrong_episode(env, "noop") == 0.0, "tampering must not survive into the next episode"
        assert _right_episode(env) == 1.0
    finally:
        env.close()


# ---------------------------------------------------------------- 2. state survives between episodes


@pytest.mark.parametrize("backend", BACKENDS)
def test_hidden_never_reaches_a_thread_a_detached_process_or_the_next_episode(backend, request):
    env = _env(_pack_for(backend, request), backend)
    try:
        sbx = env.unwrapped.sandbox
        env.reset(options={"task_id": "tiny-0"})  # starts the sandbox, so its isolation is known
        if backend == "local" and sbx.box.isolation != "namespaces":
            pytest.skip("without namespaces (not root) the local backend shares /tmp, /dev/shm and IPC with the host")
        assert _wrong_episode(env, "spy") == 0.0
        env.reset(options={"task_id": "tiny-0"})
        live = [p for p in sbx.processes() if p["state"] not in ("Z", "X")]
        assert len(live) == 1, f"only the fresh runtime is alive: {live}"
        seen = json.loads(tool(env, "loot")[0])
        assert all(v == [] for v in seen.values()), seen
        env.step(call("put", key="k0", value="value-0"))
        env.step(call("submit", answer="value-0"))
        assert env.step("Done.")[1] == 1.0
    finally:
        env.close()


# ---------------------------------------------------------------- 3. unbounded reply line


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reply_without_newline_is_a_tool_error_with_host_memory_bounded(backend, request):
    env = _env(_pack_for(backend, request), backend)
    try:
        env.reset(options={"task_id": "tiny-0"})
        tracemalloc.start()
        try:
            obs, info = tool(env, "reply_flood", mb=200)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert "output_overflow" in obs or "crashed" in obs, obs[:300]
        assert peak < 32 << 20, f"the host buffered {peak / 2**20:.0f} MiB"
        assert info["tool_errors"] == 1
        assert _right_episode(env) == 1.0
    finally:
        env.close()


# ---------------------------------------------------------------- 4. the Docker io root


@pytest.mark.docker
@pytest.mark.parametrize("how", ["world-writable", "another-owner", "symlink"])
def test_an_io_root_someone_else_controls_is_refused(how, docker_hostile_pack, tmp_path, monkeypatch):
    root = tmp_path / "ioroot"
    if how == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        root.symlink_to(tmp_path / "elsewhere")
    else:
        root.mkdir(mode=0o700)
        if how == "world-writable":
            os.chmod(root, 0o777)
        else:
            if os.geteuid() != 0:
                pytest.skip("making a dir owned by another user needs root")
            os.chown(root, 65534, 65534)
    monkeypatch.setenv("ENVGEN_SANDBOX_DIR", str(root))
    env = _env(docker_hostile_pack, "docker")
    try:
        with pytest.raises(SandboxError, match="no one else can write") as e:
            env.reset(options={"task_id": "tiny-0"})
        assert "\n" not in str(e.value)
    finally:
        env.close()


@pytest.mark.docker
def test_the_io_root_is_created_private(docker_hostile_pack, tmp_path, monkeypatch):
    root = tmp_path / "fresh" / "ioroot"
    monkeypatch.setenv("ENVGEN_SANDBOX_DIR", str(root))
    env = _env(docker_hostile_pack, "docker")
    try:
        assert _right_episode(env) == 1.0
        assert stat.S_IMODE(root.stat().st_mode) == 0o700 and root.stat().st_uid == os.geteuid()
    finally:
        env.close()


# ---------------------------------------------------------------- 5. gc and a live owner's paused container


@pytest.mark.docker
def test_gc_leaves_a_live_owners_paused_and_stopped_containers_alone(docker_hostile_pack):
    from envgen.sandbox.docker import engine, gc

    env = _env(docker_hostile_pack, "docker")
    try:
        env.reset(options={"task_id": "tiny-0"})
        sbx = env.unwrapped.sandbox
        container = engine().containers.get(sbx.container_id)
        container.pause()
        try:
            gc()
            container.reload()
            assert container.status == "paused"
        finally:
            container.unpause()
        env.step(call("put", key="k0", value="value-0"))
        env.step(call("submit", answer="value-0"))
        assert env.step("Done.")[1] == 1.0
    finally:
        env.close()


# ---------------------------------------------------------------- 6. the local backend


def _sleepers(marker: str, expect: int) -> int:
    """How many host processes run `sleep MARKER`, polled briefly until `expect` (a detached child execs late)."""
    import time

    end = time.monotonic() + 3
    while True:
        n = len(_host_processes_with(f"sleep\0{marker}"))
        if n == expect or time.monotonic() > end:
            return n
        time.sleep(0.02)


def _host_processes_with(marker: str) -> list[int]:
    hits = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker in open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"):
                    hits.append(int(pid))
            except OSError:
                pass
    return hits


def test_local_tools_never_learn_the_pack_path(hostile_pack):
    env = _env(hostile_pack, "local")
    try:
        env.reset(options={"task_id": "tiny-0"})
        seen = json.loads(tool(env, "whereami")[0])
        pack_path = str(hostile_pack.root.resolve())
        own = [seen["cwd"], json.dumps(seen["environ"]), *seen["fds"]]
        assert not [s for s in own if pack_path in s]
        sbx = env.unwrapped.sandbox
        if sbx.box.isolation == "namespaces":
            assert not [c for c in seen["cmdlines"] if pack_path in c], "no visible command line names the pack"
            assert len(seen["cmdlines"]) <= 3, "only the sandbox's own processes are visible"
    finally:
        env.close()


@pytest.mark.parametrize("isolation", ["best", "subreaper"])
def test_local_close_kills_setsid_descendants(hostile_pack, isolation):
    """Whatever the isolation (a subreaper is what an unprivileged user gets), detached children die."""
    env = gymnasium.make("envgen/Pack-v0", pack=str(hostile_pack.root), sandbox="local",
                         sandbox_options={} if isolation == "best" else {"isolation": isolation})
    marker = str(8_000_000 + os.getpid() % 1_000_000)
    try:
        env.reset(options={"task_id": "tiny-0"})
        env.step(call("detach", marker=int(marker)))
        env.step(call("detach", marker=int(marker)))
        assert _sleepers(marker, 2) == 2
        assert _wrong_episode(env, "noop") == 0.0  # an episode boundary kills them already
        assert _sleepers(marker, 0) == 0
        env.reset(options={"task_id": "tiny-0"})
        env.step(call("detach", marker=int(marker)))
        assert _sleepers(marker, 1) == 1
    finally:
        env.close()
    assert _sleepers(marker, 0) == 0, "close() leaves no process behind"


def test_local_root_is_said_once_and_tools_run_unprivileged_where_possible(hostile_pack, capfd):
    from envgen.sandbox import local

    if os.geteuid() != 0:
        pytest.skip("only root runs tools as another user")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else None
    if python is None:
        pytest.skip("no system Python to compare with")
    local._identity.pop(python, None)
    uid, _ = local.tool_identity(python)
    local.tool_identity(python)
    said = capfd.readouterr().err
    assert said.count("runs as root") == (1 if uid == 0 else 0)
    with local.LocalSandbox(hostile_pack, python=python) as sbx:
        sbx.reset()
        seen = json.loads(sbx.call("whereami", {}).content)
        assert seen["uid"] == uid
        if uid != 0:
            assert not sbx.call("write_outside", {"path": "/etc/envgen-pwned"}).ok


def test_local_tools_running_as_root_cannot_change_the_host(hostile_pack):
    """As root the local backend's tools may run as root (when `nobody` cannot read the interpreter): the host
    is then read-only to them and they hold no capability, so they cannot plant code beside the verifier kit,
    edit system files or the pristine env copy, or remount."""
    import glob

    if os.geteuid() != 0:
        pytest.skip("only a root host runs tools in namespaces")
    marker = f"{os.getpid()}"
    env = _env(hostile_pack, "local")
    try:
        env.reset(options={"task_id": "tiny-0"})
        assert env.unwrapped.sandbox.box.isolation == "namespaces"
        out = json.loads(tool(env, "escape", marker=marker)[0])
        assert any("envgen_verifiers" in t for t in out), "the attack found the verifier kit"
        assert out["remount"] != "ok"
        assert [t for t, r in out.items() if r == "written"] == [], out
        assert _right_episode(env) == 1.0
    finally:
        env.close()
        for leftover in [f"/etc/envgen-pwned-{marker}", f"/var/tmp/envgen-pwned-{marker}",
                         *glob.glob(f"{envgen.paths.bundled('verifiers')}/envgen_verifiers/pwned_{marker}.py")]:
            if os.path.exists(leftover):
                os.unlink(leftover)


LOOK = '''

def look(path: str) -> str:
    """What the sandbox shows at `path`: missing, a dir's first entries, or a file's first bytes."""
    import os
    if not os.path.exists(path):
        return "missing"
    if os.path.isdir(path):
        return "dir:" + ",".join(sorted(os.listdir(path))[:20])
    try:
        with open(path, errors="replace") as f:
            return "file:" + f.read(200)
    except OSError as e:
        return f"unreadable: {e}"
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="the local sandbox hides the host's files in namespaces (root only)")
def test_local_agent_code_finds_no_pack_and_no_host_project_file(tmp_path, monkeypatch):
    """Code the agent runs in the local sandbox (the interpreter and code families run the policy's own) looks for
    the answers: the pack's hidden/ and tasks.jsonl (the pack sits in a folder on the host's sys.path, as beside a
    driving script), the envgen checkout, the host's home and service sockets. It finds none of them, and the
    sandbox still runs its tools with the interpreter's stdlib and site-packages."""
    import sys

    from envgen.sandbox.local import _interpreter_paths

    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.syspath_prepend(str(project))  # the driving script's folder
    # one step per looked-at path: the suite's sys.path is long, so the episode gets the turns it needs
    pack = make_tiny_pack(project / "tiny", extra_tools=LOOK, limits={"max_turns": 200})
    repo = os.path.dirname(os.path.dirname(os.path.abspath(envgen.__file__)))
    env = _env(pack, "local")
    try:
        env.reset(options={"task_id": "tiny-0"})
        kept = [os.path.realpath(k) for k in (*_interpreter_paths(sys.executable), str(env.unwrapped.sandbox.root))]
        on_the_way = {part for k in kept for part in k.split("/")}  # dirs leading to what the sandbox keeps
        for path in (pack.root / "hidden" / "verify.py", pack.root / "tasks.jsonl", pack.root, project,
                     *(p for p in sys.path if p and os.path.isdir(p)  # but what the sandbox keeps (the kit)
                       and not any(os.path.realpath(p) == k or os.path.realpath(p).startswith(k + "/") for k in kept)),
                     os.path.join(repo, "pyproject.toml"), os.path.join(repo, "tests"), "/root/.bash_history",
                     "/home", "/run/docker.sock", "/var/run/docker.sock", "/srv", "/opt"):
            seen = tool(env, "look", path=str(path))[0]
            shown = set(seen[len("dir:"):].split(",")) - {""} if seen.startswith("dir:") else set()
            assert seen == "missing" or (seen.startswith("dir:") and shown <= on_the_way), f"{path}: {seen[:200]}"
        assert tool(env, "add", a=2, b=3)[0] == "5"  # the interpreter and the runtime still work
        assert tool(env, "look", path=sys.base_prefix)[0].startswith("dir:")
    finally:
        env.close()
