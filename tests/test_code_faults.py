"""Faults of a running `envgen build code`: an interrupt and a Docker engine that stops answering.

Both run the real CLI in a subprocess, as a user runs it. The interrupt comes as ``kill -INT`` to a build
started with SIGINT ignored (what a shell does to a background job); the engine is the real one behind a
Unix-socket relay that answers the CLI's ping and then goes away, as a restarting dockerd does. The build
must stop (exit 130; a non-zero exit naming the engine), leave the store resumable, and a rerun must
finish the candidate it stopped at: in Docker that rerun is the end-to-end run of ``sensors_repo`` (the
sandbox has no network: its two network tests are reported as such).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sqlalchemy import select

from envgen.store import Stage, Store

try:
    from .sensors_repo import INSTANCE, NETWORK, REPO, make_sensors_repo, write_swebench
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from sensors_repo import INSTANCE, NETWORK, REPO, make_sensors_repo, write_swebench


def _cli(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "envgen.cli", "build", "code", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, **kw)


@pytest.fixture
def sensors_file(tmp_path):
    shas = make_sensors_repo(tmp_path / "sensors")
    rows = write_swebench(tmp_path / "all.jsonl", tmp_path / "sensors", shas)
    src = tmp_path / "instances.jsonl"
    src.write_text(json.dumps(rows[0]) + "\n")
    return src, ["--repo-path", f"{REPO}={tmp_path / 'sensors'}"]


def _stage_status(store_path: Path) -> list[str]:
    """The status of every candidate stage the build's store holds."""
    with Store(store_path).session() as s:
        return [st.status for st in s.scalars(select(Stage))]


def test_kill_int_stops_a_background_build_and_a_rerun_resumes(sensors_file, tmp_path):
    src, repo = sensors_file
    args = ["--from", f"swebench:{src}", *repo, "--out", str(tmp_path / "out"), "--store", str(tmp_path / "s.db"),
            "--sandbox", "local", "--no-gate"]
    proc = _cli(*args, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 120
    while not (tmp_path / "out" / ".staging").exists():  # the candidate is being built
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    stops = [line for line in err.splitlines() if "interrupted" in line]
    assert len(stops) == 1 and f"interrupted at {INSTANCE}" in stops[0] and "rerun the same command" in stops[0]
    assert json.loads((tmp_path / "out" / "build.json").read_text())["status"] == "running"
    assert "done" not in _stage_status(tmp_path / "s.db")
    again = _cli(*args, "--json")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    report = json.loads(out)
    assert report["kept"] == 1 and report["details"]["tasks"][INSTANCE]["network"] == NETWORK


class _DyingEngine:
    """A Unix-socket relay to the real Docker engine that answers pings and version queries, then, at the
    first request that would do work, drops every connection and removes its socket: the engine is gone."""

    def __init__(self, path: Path, target: str = "/var/run/docker.sock"):
        self.path, self.target = str(path), target
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(16)
        self.conns: list[socket.socket] = []
        self.dead = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.dead.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.conns.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(self.target)
        self.conns.append(upstream)

        def back() -> None:
            try:
                while chunk := upstream.recv(65536):
                    client.sendall(chunk)
            except OSError:
                pass

        threading.Thread(target=back, daemon=True).start()
        try:
            while chunk := client.recv(65536):
                line = chunk.split(b"\r\n", 1)[0]
                if line.startswith((b"GET ", b"POST ", b"DELETE ", b"HEAD ")) and b"/_ping" not in line \
                        and b"/version" not in line:
                    self.die()
                    return
                upstream.sendall(chunk)
        except OSError:
            pass

    def die(self) -> None:
        self.dead.set()
        for s in [self.server, *self.conns]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


@pytest.mark.docker
@pytest.mark.slow
def test_an_engine_that_stops_answering_stops_the_build_and_a_rerun_builds_the_candidate(sensors_file, tmp_path):
    src, repo = sensors_file
    engine = _DyingEngine(tmp_path / "docker.sock")
    args = ["--from", f"swebench:{src}", *repo, "--out", str(tmp_path / "out"), "--store", str(tmp_path / "s.db"),
            "--sandbox", "docker", "--no-gate"]
    proc = _cli(*args, env={"DOCKER_HOST": f"unix://{tmp_path / 'docker.sock'}"})
    _, err = proc.communicate(timeout=300)
    engine.die()
    assert engine.dead.is_set()
    assert proc.returncode not in (0, 130), err
    last = err.strip().splitlines()[-1]
    assert last.startswith("sandbox error:") and "Docker engine stopped answering" in last and "rerun" in last
    assert "done" not in _stage_status(tmp_path / "s.db")  # nothing recorded as rejected: the rerun builds it
    again = _cli(*args, "--json", env={"DOCKER_HOST": ""})
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    report = json.loads(out)
    assert report["kept"] == 1, report["rejections"]
    assert report["details"]["network"] == {"tests": 2, "tasks": {INSTANCE: NETWORK}}  # no network in the sandbox
