"""Shared fixtures: a tiny hand-written pack whose tools exercise every runtime path."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from envgen.pack import format as packmod
from envgen.sandbox.local import describe_tools

TOOLS = '''
"""Tools of the tiny test pack."""
import json, os, sqlite3, time


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


def put(key: str, value: str) -> str:
    """Store a value in the pack's database.

    Args:
        key: the key
        value: the value
    """
    con = sqlite3.connect("state/kv.db")
    con.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))
    con.commit()
    return "stored"


def get(key: str) -> str:
    """Read a value.

    Args:
        key: the key
    """
    row = sqlite3.connect("state/kv.db").execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
    if row is None:
        raise KeyError(f"no key {key}")
    return row[0]


def noop() -> str:
    """Do nothing."""
    return "ok"


def boom() -> str:
    """Raise an error."""
    raise ValueError("boom happened")


def shout(n: int) -> str:
    """Print n characters and return nothing.

    Args:
        n: how many characters
    """
    print("x" * n)


def spin(seconds: float = 1000.0) -> str:
    """Loop in Python for a while.

    Args:
        seconds: how long
    """
    end = time.time() + seconds
    while time.time() < end:
        pass
    return "done"


def block(seconds: float = 1000.0) -> str:
    """Sleep in C code with SIGALRM ignored, so only the host's deadline can stop it.

    Args:
        seconds: how long
    """
    import signal
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep(seconds)
    return "woke"


def hog(mb: int = 100000) -> str:
    """Allocate memory.

    Args:
        mb: megabytes
    """
    data = bytearray(mb << 20)
    return str(len(data))


def die() -> str:
    """Kill the runtime process."""
    os._exit(3)


def peek_hidden() -> str:
    """Try to read hidden files."""
    hits = []
    for root in ("/hidden", "../hidden", "hidden"):
        if os.path.exists(root):
            hits.append(root)
    return json.dumps(hits)


def submit(answer: str) -> str:
    """Hand in the answer.

    Args:
        answer: the answer
    """
    return "submitted"


def fork_bomb() -> str:
    """Fork without end; every child forks too and never returns (Docker tests only: pids limit)."""
    while True:
        try:
            pid = os.fork()
        except OSError:
            continue
        if pid == 0:
            try:
                while True:
                    try:
                        os.fork()
                    except OSError:
                        pass
            finally:
                os._exit(0)


def fill(mb: int = 2048) -> str:
    """Allocate and touch memory (unlike hog, whose untouched pages a cgroup never charges).

    Args:
        mb: megabytes
    """
    data = bytearray(b"x") * (mb << 20)
    return str(len(data))


def flood(mb: int = 1024) -> str:
    """Print mb megabytes, one megabyte at a time.

    Args:
        mb: megabytes
    """
    chunk = "y" * (1 << 20)
    for _ in range(mb):
        print(chunk)
    return "flooded"


def egress(host: str = "1.1.1.1", port: int = 80) -> str:
    """Open a TCP connection out of the sandbox.

    Args:
        host: address
        port: port
    """
    import socket
    with socket.create_connection((host, port), timeout=3):
        return "connected"


def write_outside(path: str) -> str:
    """Write a file at an absolute path.

    Args:
        path: where
    """
    with open(path, "w") as f:
        f.write("pwned")
    return "written"


def find_file(name: str) -> str:
    """Search the whole file system for files with this name (Docker tests only).

    Args:
        name: file name
    """
    hits = []
    for root, dirs, files in os.walk("/"):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/dev")]
        if name in files:
            hits.append(os.path.join(root, name))
    return json.dumps(hits)


def sleeper(seconds: float = 1000.0) -> str:
    """Leave a background process running.

    Args:
        seconds: how long it sleeps
    """
    import subprocess
    return str(subprocess.Popen(["sleep", str(seconds)], start_new_session=True).pid)


def signal_pid(pid: int, sig: int = 9) -> str:
    """Send a signal to a process.

    Args:
        pid: process id (-1: every process the tool may signal)
        sig: signal number
    """
    os.kill(pid, sig)
    return "sent"
'''

VERIFY = '''
def verify(answer, calls, params, ctx):
    subs = [c for c in calls if c["tool"] == "submit" and c.get("ok")]
    if not subs:
        return 0.0, {"reason": "no submission"}
    got = subs[-1]["args"].get("answer")
    row = ctx.db("state/kv.db").execute("SELECT v FROM kv WHERE k = ?", (params["key"],)).fetchone()
    ok = got == params["expected"] and row is not None and row[0] == params["expected"]
    return float(ok), {"got": got}
'''


def make_tiny_pack(dest: Path, *, tasks: int = 3, limits: dict | None = None, extra_tools: str = "") -> packmod.Pack:
    """A pack with a key-value db, the tools above (plus `extra_tools`), and `tasks` program-verified tasks."""
    import sqlite3

    src = dest.parent / f"{dest.name}-src"
    (src / "env" / "state").mkdir(parents=True)
    (src / "hidden").mkdir()
    (src / "env" / "tools.py").write_text(textwrap.dedent(TOOLS) + textwrap.dedent(extra_tools))
    (src / "hidden" / "verify.py").write_text(textwrap.dedent(VERIFY))
    con = sqlite3.connect(src / "env" / "state" / "kv.db")
    con.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)")
    con.commit()
    con.close()
    schemas = describe_tools(src / "env")  # derived by the runtime itself, as a family build does
    manifest = packmod.Manifest(name="tiny", family="test", description="tiny test pack", tools=schemas,
                                submit_tool="submit", limits=packmod.Limits(**{"step_timeout_s": 3, **(limits or {})}))
    task_list = []
    for i in range(tasks):
        key, val = f"k{i}", f"value-{i}"
        task_list.append(packmod.Task(
            id=f"tiny-{i}", prompt=[{"role": "user", "content": f"Store {val} under {key}, then submit it."}],
            verifier={"kind": "program", "args": {"params": {"key": key, "expected": val}}},
            reference={"calls": [{"tool": "put", "args": {"key": key, "value": val}},
                                 {"tool": "submit", "args": {"answer": val}}], "answer": f"Stored {val}."},
            difficulty=2))
    return packmod.save(packmod.Pack(manifest, task_list), dest, env_from=src / "env", hidden_from=src / "hidden")


@pytest.fixture
def tiny_pack(tmp_path) -> packmod.Pack:
    return make_tiny_pack(tmp_path / "tiny")


# ---------------------------------------------------------------- Docker tests: run for real, or say why not

_DOCKER_COUNTS = {"ran": 0, "skipped": 0}


def pytest_collection_modifyitems(config, items):
    """Skip Docker tests with a reason when no local engine answers (CI then fails the session below)."""
    marked = [item for item in items if item.get_closest_marker("docker")]
    if not marked:
        return
    from envgen.sandbox.docker import docker_available

    if not docker_available():
        skip = pytest.mark.skip(reason="no local Docker engine answers; run .ci/setup-docker.sh (needs root)")
        for item in marked:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    if "docker" not in report.keywords:
        return
    if report.skipped and report.when in ("setup", "call"):
        _DOCKER_COUNTS["skipped"] += 1
    elif report.when == "call":
        _DOCKER_COUNTS["ran"] += 1


def _docker_expected_but_missing() -> bool:
    ci = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
    return ci and (_DOCKER_COUNTS["skipped"] > 0 or _DOCKER_COUNTS["ran"] == 0)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    ran, skipped = _DOCKER_COUNTS["ran"], _DOCKER_COUNTS["skipped"]
    terminalreporter.write_line(f"docker tests: {ran} ran, {skipped} skipped")
    if _docker_expected_but_missing():
        terminalreporter.write_line("CI=true but Docker tests did not all run: failing the session", red=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller sees every report and decides
    if _docker_expected_but_missing() and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def docker_tiny_pack(tmp_path_factory):
    """The tiny pack (256 MB memory limit) with its image built once per session; present layers are reused."""
    from envgen.sandbox.images import build_pack_image, stderr_log

    pack = make_tiny_pack(tmp_path_factory.mktemp("docker") / "tiny", limits={"memory_mb": 256})
    return build_pack_image(pack, log=stderr_log)


# ----------------------------------------------------------------------------- PostgreSQL (tests/postgres.py)


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for the session (initdb + pg_ctl, run as an unprivileged user when root).

    Skips with a reason when PostgreSQL or psycopg is missing; under CI=true that fails instead."""
    try:
        from .postgres import PostgresServer, missing_reason
    except ImportError:
        from postgres import PostgresServer, missing_reason

    why = missing_reason()
    if why is not None:
        if _ci():
            pytest.fail(f"CI=true but no PostgreSQL server can be started: {why}")
        pytest.skip(why)
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """The URL (postgresql+psycopg://) of a fresh, empty database on the session's PostgreSQL server."""
    return postgres_server.create_database()


@pytest.fixture(scope="module")
def ray_cluster():
    """A real Ray cluster for one test module: a head (1 CPU) and a second node (1 CPU) on this machine, this
    process connected to the head (its ``address`` is one other processes can join). Shut down with the module,
    so a later ``ray.init`` starts its own.

    Skips with a reason when Ray is missing; under CI=true that fails instead."""
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        (pytest.fail if _ci() else pytest.skip)("Ray is not installed: pip install 'envgen[ray]'")
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
