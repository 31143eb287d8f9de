"""A real PostgreSQL server for tests: Debian's ``initdb`` + ``pg_ctl`` in a temporary directory.

PostgreSQL refuses to run as root and CI runs as root, so the server runs as an unprivileged user
(``nobody``, through ``runuser``) when the tests run as root. It listens on 127.0.0.1 on a free port and
on a unix socket in its own directory, trusts local logins (the tests' user ``envgen`` is a superuser),
and skips durability (fsync off): the data dies with the test session anyway.

``tests/conftest.py`` turns it into the fixtures ``postgres_server`` (one per session) and ``postgres_url``
(a fresh database on it per test). ``.ci/setup-postgres.sh`` installs the package.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

USER = "envgen"
RUN_AS = "nobody"


def pg_bin() -> Path | None:
    """The directory of the newest installed server's ``initdb`` and ``pg_ctl`` (None: not installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("pg_ctl", path=str(Path(initdb).parent)) else None


def missing_reason() -> str | None:
    """Why no server can be started here (None: it can)."""
    if pg_bin() is None:
        return "PostgreSQL's initdb/pg_ctl are not installed; run .ci/setup-postgres.sh (needs root)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root and runuser is missing (PostgreSQL refuses to run as root)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the psycopg driver is not installed (pip install 'envgen[postgres]')"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One throwaway server; ``url(db)`` names a database on it, ``create_database()`` makes a fresh one."""

    def __init__(self):
        self.bin = pg_bin()
        # as root, under /tmp: a TMPDIR inside root's home would be out of the server user's reach
        self.root = Path(tempfile.mkdtemp(prefix="envgen-pg-", dir="/tmp" if os.geteuid() == 0 else None))
        self.data = self.root / "data"
        self.sock = self.root / "sock"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._as_user = os.geteuid() == 0

    def _run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        cmd = (["runuser", "-u", RUN_AS, "--"] if self._as_user else []) + list(argv)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.root)

    def start(self) -> PostgresServer:
        self.root.chmod(0o755)  # the server user must reach its directories
        for d in (self.data, self.sock):
            d.mkdir()
        self.log.touch()
        if self._as_user:
            shutil.chown(self.root, RUN_AS)
            for p in (self.data, self.sock, self.log):
                shutil.chown(p, RUN_AS)
        done = self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust",
                         "--encoding=UTF8", "--no-sync", timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr[-2000:]}")
        opts = (f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        done = self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w",
                         "-t", "60", "start", timeout=90)
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr[-2000:]}\n{self.log.read_text()[-2000:]}")
        return self

    def stop(self) -> None:
        try:
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop", timeout=60)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, db: str = "postgres", *, driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://{USER}@127.0.0.1:{self.port}/{db}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres",
                             autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
