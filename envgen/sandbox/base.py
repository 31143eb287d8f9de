"""The sandbox interface: where one episode's tools and verifier execute.

Backends (a host process in its own namespaces, a Docker container) differ only in how they start the
supervisor (`envs/runtime/supervisor.py`); the JSON-lines protocol, deadlines, bounded reads, crash
recovery and the fresh-process verification live here and in `supervised.py` once.
"""

from __future__ import annotations

import compileall
import hashlib
import os
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SandboxError
from ..pack.format import Pack, Task
from .channel import Channel, ReplyTooLong
from .supervised import START_TIMEOUT_S, Supervised

HARD_GRACE_S = 2.0
"""Seconds past a call's own timeout before the host kills the runtime (a tool blocked in C code)."""


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


def verifier_warmups(pack: Pack) -> tuple[str, ...]:
    """What the pack's verifier processes should load before their first verdict (the verifier's ``--warm``):
    ``math`` when some task grades an answer by math equivalence (anywhere in its verifier's args)."""

    def modes(obj: Any) -> bool:
        if isinstance(obj, dict):
            return obj.get("mode") == "math" or any(modes(v) for v in obj.values())
        return isinstance(obj, list) and any(modes(v) for v in obj)

    return ("math",) if any(modes(t.verifier.args) for t in pack.tasks) else ()


def _tree_stamp(root: Path) -> str:
    """A digest of every file under `root` (names and bytes): hidden/ is small, and a same-size rewrite
    within one timestamp tick must still count as a change."""
    h = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            path = os.path.join(d, f)
            h.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


class Sandbox(ABC):
    """One stream of episodes of a pack. Use as a context manager; `close()` leaves nothing behind.

    Contract: `reset()` before each episode restores the pristine state (a fresh runtime process,
    pristine work dir, empty scratch space); `call()` never raises for a tool's failure (a timeout, an
    exception, a killed runtime, an oversized reply all come back as a failed ToolResult, and the
    sandbox keeps working); `verify()` kills every process of the episode, then judges it in a fresh
    verifier process that alone sees `hidden/`.

    Both backends run the same supervisor (envs/runtime/supervisor.py); a backend only says how to get
    one (`_open_box`), give it back (`_close_box`), and which pristine env dir its verifier reads.
    """

    backend = "abstract"

    def __init__(self, pack: Pack):
        self.pack = pack
        self.limits = pack.manifest.limits
        self.box: Supervised | None = None
        self._chan: Channel | None = None
        self._seq = 0
        self.tools: list[dict] = []
        self.restarts = 0
        self.strays_killed = 0
        """Processes the agent's tools left behind, killed at episode boundaries (for reports)."""
        self._dirty = False
        self._deadline = float("inf")
        self._hidden: Path | None = None
        """The pack's hidden/, byte-compiled in a private host dir (see _hidden_source); its digest and owner pid."""
        self._hidden_stamp, self._hidden_owner = "", os.getpid()

    # -- backend hooks

    @abstractmethod
    def _open_box(self) -> Supervised:
        """A started supervisor for this pack (new, or from a pool)."""

    @abstractmethod
    def _close_box(self, box: Supervised) -> None:
        """Give a supervisor back (to a pool) or destroy it; never raises."""

    @property
    @abstractmethod
    def verifier_env_dir(self) -> str:
        """The pristine env dir as the verifier process sees it."""

    # -- protocol

    def _spawn(self) -> Channel:
        for attempt in (1, 2):
            if self.box is not None and self.box.dead:
                self._drop_box()
            if self.box is None:
                self.box = self._open_box()
            try:
                return self.box.runtime()
            except SandboxError:
                if attempt == 2 or not self.box.dead:
                    raise
        raise AssertionError("unreachable")

    def _drop_box(self) -> None:
        box, self.box = self.box, None
        if box is not None:
            box.dead = True
            self._close_box(box)

    def _kill(self) -> None:
        self._chan = None
        if self.box is not None:
            self.box.stop_runtime()

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
        if self.tools:
            return  # a runtime of this sandbox has said its tools already; they come from the same env/
        hello = self._request({"op": "hello"}, START_TIMEOUT_S)
        if not hello.get("ok"):
            raise SandboxError(f"pack {self.pack.manifest.name!r}: runtime hello failed: {hello['error']['message']}")
        self.tools = hello["tools"]

    def _restart(self) -> None:
        self._kill()
        self.restarts += 1
        self._start()

    def _request(self, req: dict, timeout: float) -> dict:
        """Send one request; on a missed deadline, an oversized reply or a dead runtime, restart and answer an error."""
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
        except ReplyTooLong as e:
            self._restart()
            return {"ok": False, "error": {"type": "output_overflow", "message":
                    f"{e} (the output limit is {self.limits.output_limit} characters); the sandbox was restarted"}}
        except (EOFError, BrokenPipeError, ConnectionError, ValueError, OSError) as e:
            self._restart()
            return {"ok": False, "error": {"type": "crashed", "message":
                    f"the sandbox runtime died ({type(e).__name__}); it was restarted"}}

    # -- public API

    def reset(self) -> None:
        """A fresh runtime process (nothing the last episode started survives), empty scratch space,
        pristine work dir. After a verify the fresh runtime was started then, so this costs a hello and
        the runtime's reset (restoring the work dir from env/); otherwise one fork (~10 ms)."""
        box = self.box
        if box is not None:
            box.settle()  # a verify's clean-up may still be starting the fresh runtime
        if self._dirty and box is not None and not box.dead and not box.fresh:  # (after a verify it is fresh)
            try:
                self.strays_killed += box.prespawn()
                self._chan = None
                box.wipe_scratch()
            except SandboxError:
                pass  # the sandbox died: the reset request below replaces it
        reply = self._request({"op": "reset"}, START_TIMEOUT_S)
        if not reply.get("ok"):
            self._restart()
            reply = self._request({"op": "reset"}, START_TIMEOUT_S)
            if not reply.get("ok"):
                raise SandboxError(f"pack {self.pack.manifest.name!r}: reset failed: {reply['error']['message']}")
        self._dirty = False
        self._deadline = time.monotonic() + self.limits.episode_timeout_s

    def _time_left(self) -> float | ToolResult:
        """Seconds left of the episode's wall-clock limit, or the refusal of a call once it has passed."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            return ToolResult.failure("episode_timeout", f"the episode ran past its "
                                      f"{self.limits.episode_timeout_s:g} s limit; no more tool calls")
        return left

    def call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> ToolResult:
        """A tool call, refused once the episode's wall-clock limit has passed, and never allowed past it."""
        left = self._time_left()
        if isinstance(left, ToolResult):
            return left
        self._dirty = True
        timeout = min(timeout or self.limits.step_timeout_s, left)
        t0 = time.perf_counter()
        reply = self._request({"op": "call", "tool": tool, "args": args, "timeout": timeout}, timeout)
        dt = time.perf_counter() - t0
        if reply.get("ok") and isinstance(reply.get("content"), str):
            return ToolResult(True, reply["content"], None, dt)
        err = reply.get("error") if isinstance(reply.get("error"), dict) else {
            "type": "bad_reply", "message": "the runtime's reply was malformed"}
        return ToolResult.failure(str(err.get("type", "error")), str(err.get("message", "")), dt)

    def verify(self, task: Task, answer: str, calls: list[dict[str, Any]],
               messages: list[dict[str, Any]] | None = None) -> Verdict:
        """Judge the finished episode. `calls` is the host's record ([{tool, args, ok, content, error,
        seconds, turn}]), `messages` the conversation after the prompt ([{role, content, turn}]).

        The verifier gets the whole episode and, on its side only, the task's reference (the request goes
        to the verifier process, never to the runtime the agent's tools run in). The verdict comes from a
        fresh verifier process started after every process of the episode (the runtime included) is
        killed; the next episode gets a fresh runtime."""
        if self.box is None or self.box.dead:
            self._start()
        self._chan = None
        self._dirty = True
        timeout = max(self.limits.step_timeout_s, 60.0)
        request = {"verifier": task.verifier.model_dump(), "answer": answer, "calls": calls,
                   "messages": list(messages or []), "prompt": [m.model_dump() for m in task.prompt],
                   "reference": task.reference.model_dump(), "env": self.verifier_env_dir}
        reply, killed = self.box.verify(request, self._hidden_source(), timeout)
        self.strays_killed += killed
        if not reply.get("ok"):
            err = reply["error"]
            return Verdict(0.0, {"error": f"{err.get('type')}: {err.get('message')}"})
        return Verdict(float(reply["reward"]), reply.get("details") or {})

    def _hidden_source(self) -> Path | None:
        """The pack's hidden/, copied once per sandbox into a private host dir (0700) with its modules
        compiled, so a fresh verifier process loads bytecode instead of compiling the pack's verify.py
        every time, and staging is a tree of hard links."""
        src = self.pack.hidden_dir
        if not src.is_dir():
            return None
        stamp = _tree_stamp(src)  # a generator may rewrite hidden/ under an open sandbox
        if self._hidden is None or stamp != self._hidden_stamp:
            self._drop_hidden()
            tmp = Path(tempfile.mkdtemp(prefix="envgen-hidden-"))
            shutil.copytree(src, tmp / "hidden", symlinks=False, ignore=shutil.ignore_patterns("__pycache__"))
            compileall.compile_dir(tmp / "hidden", quiet=2)
            for d, _, files in os.walk(tmp / "hidden"):  # readable, never writable, by the verifier's user
                os.chmod(d, 0o755)
                for f in files:
                    os.chmod(os.path.join(d, f), 0o644)
            self._hidden, self._hidden_owner, self._hidden_stamp = tmp / "hidden", os.getpid(), stamp
        return self._hidden

    def _drop_hidden(self) -> None:
        if self._hidden is not None:
            if self._hidden_owner == os.getpid():  # a forked child's close must not take the parent's copy
                shutil.rmtree(self._hidden.parent, ignore_errors=True)
            self._hidden = None

    def processes(self) -> list[dict]:
        """The sandbox's processes but its supervisor (the runtime and whatever the tools started)."""
        return self.box.processes() if self.box is not None else []

    def close(self) -> None:
        self._chan = None
        box, self.box = self.box, None
        if box is not None:
            self._close_box(box)
        self._drop_hidden()

    def __enter__(self) -> Sandbox:
        if self._chan is None:
            self._start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            if self.box is not None or self._hidden is not None:
                self.close()
        except Exception:
            pass
