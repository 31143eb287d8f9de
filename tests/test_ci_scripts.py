"""The CI set-up scripts: a background service they start (dockerd) lives in a session of its own, so a Ctrl-C or a
SIGTERM to the test run's process group does not take the Docker engine down with it. Run for real with stand-in
`docker`/`dockerd` commands on PATH (no engine is touched)."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + textwrap.dedent(body))
    path.chmod(0o755)


@pytest.mark.skipif(os.geteuid() != 0, reason="setup-docker.sh starts dockerd as root (sudo -n otherwise)")
def test_setup_docker_starts_dockerd_outside_the_callers_process_group(tmp_path):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    # a stand-in engine: records its session and process group, then runs until killed
    _stub(bin_dir / "dockerd", f"""\
        echo "$$ $(ps -o sid= -p $$) $(ps -o pgid= -p $$)" > {state}/ids
        exec sleep 300
        """)
    _stub(bin_dir / "docker", f"""\
        [ -s {state}/ids ] || exit 1
        [ "$1" = version ] && echo stand-in
        exit 0
        """)
    _stub(bin_dir / "debootstrap", "exit 0\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ENVGEN_SKIP_BASE": "1", "DOCKERD_WAIT_S": "10"}
    caller = subprocess.Popen(["bash", str(ROOT / ".ci" / "setup-docker.sh")], env=env, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = caller.communicate(timeout=60)
    assert caller.returncode == 0, out
    pid, sid, pgid = (int(x) for x in (state / "ids").read_text().split())
    try:
        assert sid != caller.pid and pgid != caller.pid  # not the caller's session, not its process group
        if _group_alive(caller.pid):  # what a Ctrl-C or SIGTERM to the test run reaches
            os.killpg(caller.pid, signal.SIGTERM)
        time.sleep(0.2)
        os.kill(pid, 0)  # the engine is still up
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
