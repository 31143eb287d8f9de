"""A warm pool of sandbox containers, started ahead of demand.

Starting a container costs about half a second here; a rollout should not pay it. The pool keeps
`size` started containers per Spec (image + limits), each with a runtime already spawned, hands one
out in about a millisecond, and takes containers back: recycled in the background (every process
killed, /work and /tmp emptied, a fresh runtime spawned) and kept up to `size`, then removed. Idle
containers older than `idle_timeout_s` are removed, so an unused pool costs nothing for long.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor

from .engine import engine
from ..errors import SandboxError
from ..pack.format import Pack
from .docker import Box, Spec, _resolve_image


class WarmPool:
    def __init__(self, size: int = 2, idle_timeout_s: float = 300.0, *, client=None, workers: int = 2):
        if size < 0 or idle_timeout_s <= 0:
            raise SandboxError(f"pool size must be >= 0 and idle timeout > 0 (got {size}, {idle_timeout_s})")
        self.size, self.idle_timeout_s = size, idle_timeout_s
        self.client = client or engine()
        self.hits = self.misses = 0
        self._idle: dict[Spec, deque[Box]] = {}
        self._starting: Counter[Spec] = Counter()
        self._recycling: Counter[Spec] = Counter()
        self._lock = threading.Lock()
        self._exec = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="envgen-pool")
        self._closed = False
        self._wake = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="envgen-pool-reaper", daemon=True)
        self._reaper.start()

    # -- public

    def acquire(self, spec: Spec) -> Box:
        """A started container for `spec`: a warm one when there is one, else a cold start (and a refill)."""
        if self._closed:
            raise SandboxError("the warm pool is closed")
        while True:
            with self._lock:
                dq = self._idle.get(spec)
                box = dq.popleft() if dq else None
            if box is None:
                break
            if not box.dead and box.ping():
                with self._lock:
                    self.hits += 1
                self._refill(spec)
                return box
            box.destroy()
        with self._lock:
            self.misses += 1
        self._refill(spec)
        return Box.start(self.client, spec)

    def release(self, box: Box) -> None:
        """Take a container back: recycled and kept while the pool is short of `size`, else removed."""
        if not (self._closed or box.dead):
            with self._lock:
                self._recycling[box.spec] += 1
            try:
                self._exec.submit(self._recycle, box)
                return
            except RuntimeError:  # closed meanwhile
                with self._lock:
                    self._recycling[box.spec] -= 1
        box.destroy()

    def prewarm(self, pack: Pack | Spec, n: int | None = None, *, wait: bool = False) -> None:
        """Start containers for a pack (or a Spec) now, up to `n` idle ones (default: the pool size)."""
        spec = pack if isinstance(pack, Spec) else Spec.for_pack(pack, _resolve_image(self.client, pack, None))
        futures = self._refill(spec, n)
        if wait:
            for f in futures:
                f.result()

    def idle(self, spec: Spec | None = None) -> int:
        with self._lock:
            return sum(len(dq) for s, dq in self._idle.items() if spec is None or s == spec)

    def close(self) -> None:
        """Remove every idle container and stop; containers still in use are removed when released."""
        with self._lock:
            self._closed = True
            boxes = [b for dq in self._idle.values() for b in dq]
            self._idle.clear()
        self._wake.set()
        self._exec.shutdown(wait=True)
        for b in boxes:
            b.destroy()

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- background work

    def _refill(self, spec: Spec, target: int | None = None) -> list[Future]:
        target = self.size if target is None else target
        with self._lock:
            coming = self._starting[spec] + self._recycling[spec]  # a recycled container counts as coming
            need = target - len(self._idle.get(spec, ())) - coming
            if self._closed or need <= 0:
                return []
            self._starting[spec] += need
        futures = []
        for _ in range(need):
            try:
                futures.append(self._exec.submit(self._start_one, spec))
            except RuntimeError:  # closed meanwhile
                with self._lock:
                    self._starting[spec] -= 1
        return futures

    def _start_one(self, spec: Spec) -> None:
        box = None
        try:
            box = Box.start(self.client, spec)
            box.prespawn()
            box.wait_ready()
        except Exception as e:
            print(f"envgen: warm pool could not start a container: {e}", file=sys.stderr)
            if box is not None:
                box.destroy()
            with self._lock:
                self._starting[spec] -= 1
            return
        self._keep(box, self._starting)

    def _recycle(self, box: Box) -> None:
        try:
            box.recycle()
            box.wait_ready()
        except Exception:
            box.destroy()
            with self._lock:
                self._recycling[box.spec] -= 1
            return
        self._keep(box, self._recycling)

    def _keep(self, box: Box, coming: Counter) -> None:
        """File a ready container as idle (or remove it when the pool is full), in one step with the
        count it came from, so a concurrent refill never sees it as neither coming nor idle."""
        with self._lock:
            coming[box.spec] -= 1
            dq = self._idle.setdefault(box.spec, deque())
            keep = not self._closed and len(dq) < self.size
            if keep:
                box.idle_since = time.monotonic()
                dq.append(box)
        if not keep:
            box.destroy()

    def _reap_loop(self) -> None:
        while not self._closed:
            self._wake.wait(min(5.0, self.idle_timeout_s / 2))
            now = time.monotonic()
            expired = []
            with self._lock:
                for dq in self._idle.values():
                    for b in list(dq):
                        if now - b.idle_since > self.idle_timeout_s:
                            dq.remove(b)
                            expired.append(b)
            for b in expired:
                b.destroy()


_default: WarmPool | None = None
_default_lock = threading.Lock()


def default_pool() -> WarmPool:
    """The process-wide pool (ENVGEN_POOL_SIZE containers per image, default 2; ENVGEN_POOL_IDLE_S, default 300)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = WarmPool(int(os.environ.get("ENVGEN_POOL_SIZE", "2")),
                                float(os.environ.get("ENVGEN_POOL_IDLE_S", "300")))
            atexit.register(_default.close)
        return _default


def _after_fork_in_child() -> None:
    global _default
    _default = None  # the parent's pool threads do not exist here; the child builds its own on demand


os.register_at_fork(after_in_child=_after_fork_in_child)
