"""The sandbox interface: where one episode's tools and verifier execute.

Backends (local subprocess, Docker container) differ only in how they start and kill the runtime
server (`envs/runtime/server.py`) and how they move `hidden/` in for verification; the JSON-lines
protocol, deadlines and crash recovery live here once.
"""

from __future__ import annotations

import json
import os
import select
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ..errors import SandboxError
from ..pack import Pack, Task

HARD_GRACE_S = 2.0
"""Seconds past a call's own timeout before the host kills the runtime (a tool blocked in C code)."""
START_TIMEOUT_S = 60.0


@dataclass
class ToolResult:
    """What one tool call gave: the text the agent sees, and the structured error if it failed."""

    ok: bool
    content: str
    error: dict[str, Any] | None = None
    seconds: float = 0.0

    @classmethod
    def failure(cls, kind: str, message: str, seconds: float = 0.0) -> ToolResult:
        return cls(False, f"Error ({kind}): {message}", {"type": kind, "message": message}, seconds)


@dataclass
class Verdict:
    reward: float
    details: dict[str, Any] = field(default_factory=dict)


class Channel:
    """JSON lines over a pair of file descriptors (pipes, FIFOs or a socket), with deadlines."""

    def __init__(self, rfd: int, wfd: int, close=None):
        self.rfd, self.wfd, self._close = rfd, wfd, close
        self._buf = bytearray()
        self._poll = select.poll()
        self._poll.register(rfd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def send(self, obj: dict) -> None:
        data = json.dumps(obj, ensure_ascii=False).encode() + b"\n"
        view = memoryview(data)
        while view:
            n = os.write(self.wfd, view)
            view = view[n:]

    def recv(self, deadline: float) -> dict | None:
        """The next reply, or None at the deadline; raises EOFError when the peer is gone."""
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                return json.loads(line)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not self._poll.poll(left * 1000):
                return None
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise EOFError("runtime closed its output")
            self._buf += chunk

    def close(self) -> None:
        if self._close:
            self._close()


class Sandbox(ABC):
    """One stream of episodes of a pack. Use as a context manager; `close()` leaves nothing behind.

    Contract: `reset()` before each episode restores the pristine state; `call()` never raises for a
    tool's failure (a timeout, an exception, a killed runtime all come back as a failed ToolResult,
    and the sandbox keeps working); `verify()` copies `hidden/` in after the agent's last action.
    """

    backend = "abstract"

    def __init__(self, pack: Pack):
        self.pack = pack
        self.limits = pack.manifest.limits
        self._chan: Channel | None = None
        self._seq = 0
        self.tools: list[dict] = []
        self.restarts = 0

    # -- backend hooks

    @abstractmethod
    def _spawn(self) -> Channel:
        """Start the runtime server; return the channel to it."""

    @abstractmethod
    def _kill(self) -> None:
        """Kill the runtime server and everything it started."""

    @abstractmethod
    def _stage_hidden(self) -> str | None:
        """Make hidden/ visible to the runtime; return its path there (None if the pack has none)."""

    @abstractmethod
    def _unstage_hidden(self) -> None:
        """Remove what _stage_hidden put in place."""

    def _release(self) -> None:
        """Free backend resources after the runtime is killed (temp dirs, containers)."""

    # -- protocol

    def _start(self) -> None:
        self._chan = self._spawn()
        try:
            ready = self._chan.recv(time.monotonic() + START_TIMEOUT_S)
        except (EOFError, ValueError) as e:
            ready = {"ok": False, "error": {"message": f"runtime exited at start ({e})"}}
        if not ready or not ready.get("ok"):
            msg = (ready or {}).get("error", {}).get("message", "no answer within the start timeout")
            self._kill()
            raise SandboxError(f"pack {self.pack.manifest.name!r}: the sandbox runtime did not start: {msg}")
        hello = self._request({"op": "hello"}, START_TIMEOUT_S)
        if not hello.get("ok"):
            raise SandboxError(f"pack {self.pack.manifest.name!r}: runtime hello failed: {hello['error']['message']}")
        self.tools = hello["tools"]

    def _restart(self) -> None:
        self._kill()
        self.restarts += 1
        self._start()

    def _request(self, req: dict, timeout: float) -> dict:
        """Send one request; on a missed deadline or a dead runtime, kill+restart and answer an error."""
        if self._chan is None:
            self._start()
        self._seq += 1
        req["id"] = self._seq
        deadline = time.monotonic() + timeout + HARD_GRACE_S
        try:
            self._chan.send(req)
            while True:
                reply = self._chan.recv(deadline)
                if reply is None:
                    self._restart()
                    return {"ok": False, "error": {"type": "killed", "message":
                            f"no answer within {timeout + HARD_GRACE_S:g} s; the sandbox was restarted"}}
                if reply.get("id") == self._seq:
                    return reply
        except (EOFError, BrokenPipeError, ConnectionError, ValueError, OSError) as e:
            self._restart()
            return {"ok": False, "error": {"type": "crashed", "message":
                    f"the sandbox runtime died ({type(e).__name__}); it was restarted"}}

    # -- public API

    def reset(self) -> None:
        """Restore the pristine state for a new episode."""
        reply = self._request({"op": "reset"}, START_TIMEOUT_S)
        if not reply.get("ok"):
            self._restart()
            reply = self._request({"op": "reset"}, START_TIMEOUT_S)
            if not reply.get("ok"):
                raise SandboxError(f"pack {self.pack.manifest.name!r}: reset failed: {reply['error']['message']}")

    def call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> ToolResult:
        timeout = timeout or self.limits.step_timeout_s
        t0 = time.perf_counter()
        reply = self._request({"op": "call", "tool": tool, "args": args, "timeout": timeout}, timeout)
        dt = time.perf_counter() - t0
        if reply.get("ok"):
            return ToolResult(True, reply["content"], None, dt)
        err = reply["error"]
        return ToolResult.failure(err.get("type", "error"), err.get("message", ""), dt)

    def verify(self, task: Task, answer: str, calls: list[dict[str, Any]]) -> Verdict:
        """Judge the finished episode. `calls` is the host's record: [{tool, args, ok, content}]."""
        hidden = self._stage_hidden()
        try:
            timeout = max(self.limits.step_timeout_s, 60.0)
            reply = self._request({"op": "verify", "verifier": task.verifier.model_dump(), "answer": answer,
                                   "calls": calls, "prompt": [m.model_dump() for m in task.prompt],
                                   "hidden": hidden, "timeout": timeout}, timeout)
        finally:
            self._unstage_hidden()
        if not reply.get("ok"):
            err = reply["error"]
            return Verdict(0.0, {"error": f"{err.get('type')}: {err.get('message')}"})
        return Verdict(float(reply["reward"]), reply.get("details") or {})

    def close(self) -> None:
        if self._chan is not None:
            try:
                self._chan.send({"op": "exit"})
            except OSError:
                pass
        self._kill()
        self._chan = None
        self._release()

    def __enter__(self) -> Sandbox:
        if self._chan is None:
            self._start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            if self._chan is not None:
                self.close()
        except Exception:
            pass
