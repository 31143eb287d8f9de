"""Where pass-check rollouts run. A *worker* owns one PackEnv (so one sandbox) and one policy instance and
runs rollout (task, index) with the index's fixed seed. ``local`` is a thread pool in this process (the
sandboxes are processes or containers, and model calls are HTTP or a batched local model, so threads keep
every core busy without pickling envs); ``ray`` runs the same workers as Ray actors on a cluster.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import socket
import threading
import time
from typing import Any, Callable

from ..episodes.gym import PackEnv
from ..errors import EnvgenError, InputError
from ..policies.builtin import make_policy, rollout
from ..sandbox.remote import PREFIX as REMOTE_PREFIX
from .config import PASS_THRESHOLD
from .rules import Outcome, rollout_seed



class Worker:
    """One env + one policy; runs rollouts one after another.

    On a remote sandbox (an ``envgen serve``) a worker holds a session only while a rollout runs, and waits
    for a free one without a time limit: with more workers than the server's ``--max-sessions`` the sessions
    go round (in the order the workers asked, see ``envgen.sandbox.remote``), and a full server is a wait,
    never an errored rollout."""

    def __init__(self, pack_ref: str, policy_spec: str, sandbox: str = "local", seed: int = 0,
                 pass_threshold: float = PASS_THRESHOLD, judge: str | None = None, user: str | None = None):
        self.remote = sandbox.startswith(REMOTE_PREFIX)
        self.env = PackEnv(pack_ref, sandbox=sandbox, judge=judge, user=user,
                           sandbox_options={"busy_wait_s": None} if self.remote else None)
        self.policy = make_policy(policy_spec)
        self.seed, self.pass_threshold = seed, pass_threshold

    def run(self, task_id: str, index: int) -> Outcome:
        t0 = time.perf_counter()
        try:
            t = rollout(self.env, self.policy, task_id=task_id, seed=rollout_seed(task_id, index, self.seed))
        except EnvgenError as e:  # an endpoint that stays down, a sandbox that cannot start
            return Outcome(task_id, index, 0.0, False, seconds=time.perf_counter() - t0, error=str(e))
        finally:
            if self.remote:
                self.env.close()  # the session goes back to the server; the next rollout opens one
        return Outcome(task_id, index, t.reward, t.reward >= self.pass_threshold, turns=t.turns, tokens=t.tokens,
                       seconds=t.seconds, step_latencies=t.step_seconds)

    def close(self) -> None:
        self.env.close()


class LocalExecutor:
    """A thread pool; each thread lazily builds its own Worker and keeps it for later rollouts."""

    def __init__(self, make_worker: Callable[[], Worker], workers: int):
        self._make = make_worker
        self._pool = cf.ThreadPoolExecutor(workers, thread_name_prefix="envgen-rollout")
        self._local = threading.local()
        self._workers: list[Worker] = []
        self._lock = threading.Lock()
        self._futures: set[cf.Future] = set()

    def _run(self, task_id: str, index: int) -> Outcome:
        w = getattr(self._local, "worker", None)
        if w is None:
            w = self._local.worker = self._make()
            with self._lock:
                self._workers.append(w)
        return w.run(task_id, index)

    def submit(self, task_id: str, index: int) -> None:
        self._futures.add(self._pool.submit(self._run, task_id, index))

    def wait(self) -> list[Outcome]:
        done, self._futures = cf.wait(self._futures, return_when=cf.FIRST_COMPLETED)
        return [f.result() for f in done]

    def close(self) -> None:
        for f in self._futures:
            f.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for w in self._workers:
            w.close()


def connect_ray(address: str | None = None, workers: int = 1):
    """The ``ray`` module, initialised: joined to ``address`` (or ``RAY_ADDRESS``), else a local cluster with
    ``workers`` CPUs (``address="local"``: a new one even when a ``ray start`` cluster runs on this machine, which
    ``ray.init()`` would otherwise join and then refuse ``num_cpus``). An already initialised Ray (a test's
    cluster, a notebook) is used as it is."""
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install 'envgen[ray]'") from None
    if not ray.is_initialized():
        address = address or os.environ.get("RAY_ADDRESS") or None
        if address and address != "auto":
            _reachable(address)
        try:
            ray.init(address=address or "local", ignore_reinit_error=True, log_to_driver=False,
                     include_dashboard=False, **({} if address else {"num_cpus": max(workers, 1)}))
        except ConnectionError as e:
            raise InputError(f"--ray-address {address}: cannot join the Ray cluster: {e}") from None
    return ray


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail at once, with the address, when nothing listens there: ``ray.init`` retries an unreachable
    cluster for minutes before it gives up."""
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        return  # a form Ray resolves itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise InputError(f"--ray-address {address}: no Ray cluster answers there ({e.strerror or e}); start one "
                         f"with `ray start --head`, or leave --ray-address out to start a local one") from None


class RayExecutor:
    """The same workers as Ray actors (one sandbox each); `address` joins an existing cluster.

    Actors open the pack by the reference given (a path every node can read, or hf://ORG/NAME).
    """

    def __init__(self, pack_ref: str, policy_spec: str, sandbox: str, seed: int, workers: int,
                 pass_threshold: float = PASS_THRESHOLD, address: str | None = None, judge: str | None = None,
                 user: str | None = None):
        self.ray = ray = connect_ray(address, workers)
        actor = ray.remote(num_cpus=1)(Worker)
        self._idle = [actor.remote(pack_ref, policy_spec, sandbox, seed, pass_threshold, judge, user) for _ in range(workers)]
        self._all = list(self._idle)
        self._pending: dict[Any, Any] = {}

    def submit(self, task_id: str, index: int) -> None:
        a = self._idle.pop()
        self._pending[a.run.remote(task_id, index)] = a

    def wait(self) -> list[Outcome]:
        ready, _ = self.ray.wait(list(self._pending), num_returns=1)
        out = []
        for ref in ready:
            self._idle.append(self._pending.pop(ref))
            out.append(self.ray.get(ref))
        return out

    def close(self) -> None:
        for a in self._all:
            try:
                self.ray.get(a.close.remote())
            finally:
                self.ray.kill(a)


def make_executor(kind: str, pack_ref: str, policy_spec: str, *, sandbox: str, seed: int, workers: int,
                  pass_threshold: float = PASS_THRESHOLD, ray_address: str | None = None, judge: str | None = None,
                  user: str | None = None):
    """`judge` and `user` are spec strings (see envgen.llm.judge.make_judge, envgen.episodes.users.make_user) so
    each worker, Ray actors included, builds its own."""
    if kind == "local":
        return LocalExecutor(lambda: Worker(pack_ref, policy_spec, sandbox, seed, pass_threshold, judge, user), workers)
    if kind == "ray":
        return RayExecutor(pack_ref, policy_spec, sandbox, seed, workers, pass_threshold, ray_address, judge, user)
    raise InputError(f"unknown executor {kind!r}; use local or ray")
