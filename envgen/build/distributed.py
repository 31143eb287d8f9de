"""Builds on a Ray cluster: a family's units of work (a code candidate, a category's task) as Ray tasks.

Ray schedules, retries a task whose worker or node died, and moves arguments and results; envgen keeps
what a resume needs in the shared state store (``envgen.store``; a PostgreSQL URL when the nodes are
several machines), so this module is only the seam between the two:

- ``connect`` joins a cluster (``--ray-address``, ``RAY_ADDRESS``) or starts a local one, the way the
  pass check's Ray executor does;
- ``Units`` submits one function call per unit and hands back results as they finish, in completion
  order, with the unit's key; the first exception cancels the rest;
- ``run_unit`` runs a unit under a lease in the store (``Store.lease``): a unit another worker holds is
  waited for, a dead worker's is taken over when its lease runs out, a done one is not run again; a unit
  of a driver that died (or was stopped) is taken over at once, since Ray killed its workers with it
  (``unit_owner`` / ``abandoned``);
- ``pack_bytes`` / ``unpack`` carry a pack a worker wrote on its own disk to the driver through the store
  (an artifact), so a pack survives the worker, and a driver that was killed finds it on resume.

A unit is idempotent by construction: it first looks its key up in the store and returns the stored
result when a finished attempt is there (a retried task whose first attempt finished before its worker
died), so nothing is lost or done twice.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import InputError
from ..store import Lease, Store, worker_id

EXECUTORS = ("local", "ray")
RETRIES = 3
"""Times Ray reruns a unit whose worker process or node died (its own exceptions are not retried)."""


def check_executor(executor: str) -> str:
    if executor not in EXECUTORS:
        raise InputError(f"unknown executor {executor!r}; use local or ray")
    return executor


class Units:
    """Unit calls as Ray tasks (one CPU each), their results as they finish.

    ``fn`` must be importable by the workers (a module-level function of envgen); its arguments are
    pickled once per unit.
    """

    def __init__(self, ray: Any, fn: Callable[..., Any], *, retries: int = RETRIES,
                 leases: tuple[Store, str] | None = None, log: Callable[[str], None] | None = None):
        self.ray = ray
        self._remote = ray.remote(num_cpus=1, max_retries=retries)(fn)
        self._pending: dict[Any, Any] = {}
        self._leases = leases  # (store, run_id): claims this job's workers hold, released on an interrupt
        self._log = log
        self._interrupted = False

    def submit(self, key: Any, *args: Any) -> None:
        self._pending[self._remote.remote(*args)] = key

    def __len__(self) -> int:
        return len(self._pending)

    def completed(self) -> Iterator[tuple[Any, Any]]:
        """(key, result) for every submitted unit, as each finishes; a unit's exception is raised here
        after the others are cancelled."""
        try:
            while self._pending:
                ready, _ = self.ray.wait(list(self._pending), num_returns=1)
                for ref in ready:
                    key = self._pending.pop(ref)
                    yield key, self.ray.get(ref)
        except KeyboardInterrupt:
            self.interrupted()
            raise
        finally:
            self.cancel()

    def cancel(self, force: bool = True) -> None:
        """Cancel every unit not yet returned: ``force`` kills the worker of a running one (its lease then runs
        out); without it a running unit is interrupted (``KeyboardInterrupt``) and releases its lease."""
        for ref in self._pending:
            try:
                self.ray.cancel(ref, force=force)
            except Exception:  # already finished or its worker is gone: nothing left to stop
                pass
        self._pending.clear()

    def interrupted(self) -> None:
        """The driver was interrupted (Ctrl-C): stop the units in flight, give their leases back, so a rerun
        (or another driver) takes them at once, and say so. ``completed`` calls it when the interrupt comes
        while it waits (nearly always); a caller whose own code was interrupted calls it too (once is done).

        The units are stopped by ending this driver's Ray job (``ray.shutdown``): Ray then kills the job's
        workers on every node, as it does for a driver that died. Force-cancelling each task instead raced
        the tasks' replies in Ray's core worker here (a fatal check, now and then, on Ctrl-C)."""
        if self._interrupted:
            return
        self._interrupted = True
        n = len(self._pending)
        self._pending.clear()
        prefix = job_prefix(self.ray)
        try:
            self.ray.shutdown()
        except Exception:  # already disconnected: the job has ended all the same
            pass
        released = 0
        if self._leases is not None:
            time.sleep(DRIVER_GRACE_S)  # for Ray's kill of the job's workers to land before their leases go
            store, run_id = self._leases
            try:
                released = store.release_owned(run_id, prefix)
            except Exception:  # the store is unreachable: the rerun takes them over as a dead driver's
                pass
        if self._log is not None:
            where = f"; finished ones are kept in {self._leases[0].url}" if self._leases else ""
            self._log(f"interrupted: stopped the {n} unit(s) still pending and released {released} lease(s); "
                      f"rerun the same command to resume{where}")


LEASE_S = 60.0
"""How long a unit's claim holds without a heartbeat (renewed every third of it while the unit runs): a worker
that died is taken over this long after its last heartbeat."""


DRIVER_GRACE_S = 3.0
"""How long after its driver's job ended a unit's lease is taken over: Ray kills a dead job's workers (on
every node; measured here within 0.4 s of a SIGKILLed driver), this is the margin for that kill to land."""

OWNER_PREFIX = "ray:"


def job_prefix(ray: Any) -> str:
    """The start of every lease owner name of this process's Ray job: the cluster's session (job ids restart
    at 01000000 on a new cluster) and the job id."""
    ctx = ray.get_runtime_context()
    return f"{OWNER_PREFIX}{ctx.get_session_name()}:{ctx.get_job_id()}:"


def unit_owner(ray: Any) -> str:
    """A lease owner name for a unit run by this Ray worker: its job's prefix, then host, pid and a random
    part (``store.worker_id``)."""
    return job_prefix(ray) + worker_id()


def abandoned(ray: Any, owner: str, grace_s: float = DRIVER_GRACE_S) -> bool:
    """Is ``owner`` (a ``unit_owner``) provably gone? True only for a worker of this same cluster whose job is
    dead in the cluster's job table for ``grace_s``: Ray force-kills a finished job's workers (a driver that
    exits, is killed or loses its node ends its job), so that worker runs no more. Anything else (a live job,
    another cluster, a job the table does not know, an owner not on Ray, no answer) is not: its lease is
    waited out as before."""
    if not owner.startswith(OWNER_PREFIX):
        return False
    try:
        session, job = owner[len(OWNER_PREFIX):].split(":", 2)[:2]
        if session != ray.get_runtime_context().get_session_name():
            return False
        # Ray's public job API (ray.util.state.list_jobs) needs the dashboard, which clusters may run
        # without; the job table the GCS keeps is what it reads too
        jobs = ray._private.state.jobs()
    except Exception:
        return False
    for j in jobs:
        if j.get("JobID") == job:
            return bool(j.get("IsDead")) and time.time() * 1000 - float(j.get("EndTime") or 0) >= grace_s * 1000
    return False


def _ray_worker() -> Any:
    """The ``ray`` module when this process is a Ray worker (a unit running as a task), else None."""
    try:
        import ray
    except ImportError:
        return None
    if not ray.is_initialized() or ray.get_runtime_context().worker.mode != ray.WORKER_MODE:
        return None
    return ray


def run_unit(store: Store, run_id: str, key: str, body: Callable[[Lease], dict[str, Any] | None], *,
             lease_s: float = LEASE_S) -> dict[str, Any]:
    """Run ``body(lease)`` as unit ``key`` of ``run_id`` under a lease in the store; the unit's result.

    A unit the store has done returns its stored result without running (a retried task whose first attempt
    finished). A unit whose lease another worker holds is waited for: it is either finished by that worker
    (its result is returned) or taken over once the lease runs out (the holder died: Ray retried this task
    because its worker did). ``body`` marks the stage done itself (``Store.finish_stage``, with what it
    produced) after ``publish(lease)``, and returns its result; a result not to keep (an error a rerun should
    retry) is given back by raising ``Unfinished``.

    On a Ray worker the lease names the worker's job (``unit_owner``), and a lease whose job is dead is
    taken over at once (``abandoned``): a driver killed mid-build leaves units its killed workers held, and
    its rerun runs them now, not once their leases run out.
    """
    ray = _ray_worker()
    owner = unit_owner(ray) if ray is not None else None
    gone = (lambda holder: abandoned(ray, holder)) if ray is not None else None
    while True:
        st = store.stage(run_id, key)
        if st is not None and st.status == "done":
            return dict(st.result or {})
        with store.lease(run_id, key, owner=owner, lease_s=lease_s, abandoned=gone) as lease:
            if lease is not None:
                try:
                    return body(lease)
                except Unfinished as e:
                    store.release(run_id, key, lease.owner)  # a rerun (or another driver) may try it again
                    return e.result
                except Lost:
                    pass  # another worker took the unit over while this one worked: wait for its result
        time.sleep(min(2.0, lease_s / 3))


def publish(lease: Lease) -> None:
    """Call right before storing a unit's result: raises ``Lost`` when the lease went to another worker
    (whose result, not this one's, is the unit's)."""
    if lease.lost.is_set():
        raise Lost(lease.key)


class Lost(Exception):
    """The unit's lease was taken over by another worker."""


class Unfinished(Exception):
    """Raised by a unit's body with a result that is reported but not stored as done."""

    def __init__(self, result: dict[str, Any]):
        super().__init__(result.get("reason", ""))
        self.result = result


def pack_bytes(root: Path) -> bytes:
    """A pack directory as a gzipped tar (names relative to it, no owners), to store as an artifact."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for p in sorted(Path(root).rglob("*")):
            info = tar.gettarinfo(str(p), arcname=p.relative_to(root).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if p.is_file() and not p.is_symlink():
                with p.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def unpack(blob: bytes, dest: Path) -> Path:
    """Write ``pack_bytes``' output to ``dest`` atomically (a temp dir beside it, then a rename)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            tar.extractall(tmp, filter="data")  # refuses absolute names, .. and links out of tmp
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest
