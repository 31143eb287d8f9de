"""The remote backend: a sandbox whose runtime lives on an ``envgen serve`` elsewhere.

``open_sandbox(pack, "remote:http://HOST:PORT")`` gives a `Sandbox` like the local and Docker ones, so PackEnv
(``gymnasium.make(..., sandbox="remote:URL")``), the pass check and the TRL adapter run their episodes on a
server without knowing it. The transport is OpenEnv's own (``openenv-core``): one WebSocket session per
sandbox through its ``EnvClient``, with envgen's sandbox operations as the session's actions
(``SANDBOX_MODE`` below; ``envgen.serve`` answers them). The server keeps the pack's hidden/ and the
task references: ``verify`` names the task, and the server judges it with its own copy.

Semantics are the local sandbox's: a tool's failure is a failed ToolResult, never an exception. Every network
wait has a deadline (connect, each reply: the call's own timeout plus a grace). A lost connection (the server
killed, the network gone, the session reaped) fails the call in flight and every later call of that episode
with ``connection_lost`` (the server's state of the episode is gone; running on in a fresh one would judge a
different episode), its verdict is 0 with the error, and the next ``reset`` opens a new session (retried
until ``connect_timeout`` runs out). A server at capacity answers "busy"; ``reset`` waits for a slot up to
``busy_wait_s`` (None: as long as it takes), then raises SandboxError. The sandboxes of one process that wait
for one server take the slots that free up in the order they asked (`_Queue`): a sandbox that has just given its
session back (``close``) and opens a new one queues behind those already waiting, so a pass check with more
workers than the server's ``--max-sessions`` hands sessions round instead of starving some workers.

The server judges only the calls it ran in the session (see ``envgen.serve.server``): ``verify`` sends the
client's record for the calls' turns, and gets 0 for a call the server never ran.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import urllib.parse
from typing import Any

from ..errors import InputError, SandboxError
from ..pack.format import Pack, Task
from .base import HARD_GRACE_S, Sandbox, ToolResult, Verdict

PREFIX = "remote:"
TOKEN_ENV = "ENVGEN_SERVE_TOKEN"
SANDBOX_MODE = "sandbox"
"""The reset ``mode`` that makes a served session a bare sandbox (ops ``call`` and ``verify``) rather than a
whole episode (assistant messages in, observations out)."""
BUSY_CODE = "CAPACITY_REACHED"
BUSY_CLOSE = 1013
"""WebSocket close code ("try again later") of a session the server refused at its session cap."""
NETWORK_GRACE_S = 10.0
"""Seconds past the server's own deadline for an answer (the server enforces tool and verify timeouts; this
only bounds a network or server that stopped answering)."""


def parse_remote(spec: str) -> tuple[str, str | None]:
    """``remote:URL`` as (base URL without credentials, token). The token comes from the URL's password
    (``http://user:TOKEN@host:port``) or ``?token=``, else ENVGEN_SERVE_TOKEN; None means none."""
    url = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    parts = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.hostname:
        raise InputError(f"sandbox {spec!r}: use remote:http://HOST:PORT (the address of an envgen serve)")
    query = urllib.parse.parse_qs(parts.query)
    token = parts.password or (query.get("token") or [None])[0] or os.environ.get(TOKEN_ENV) or None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", "")), token


def display_url(spec: str) -> str:
    """The URL of ``remote:URL`` without its token (for ledgers, logs and reports)."""
    return parse_remote(spec)[0]


def _client_class():
    """openenv-core's EnvClient with the bearer token in the handshake (imported on first use: an extra)."""
    try:
        from openenv.core.client_types import StepResult
        from openenv.core.env_client import EnvClient
        from openenv.core.utils import convert_to_ws_url
        from websockets.asyncio.client import connect as ws_connect
    except ImportError as e:  # pragma: no cover - depends on the install
        raise InputError(f"the remote sandbox needs openenv-core ({e}); install envgen[serve]") from e

    class TokenClient(EnvClient):
        """OpenEnv's WebSocket session client; the only addition is the ``Authorization`` header (EnvClient
        passes none; a stock EnvClient can put the token in the URL's password instead)."""

        def __init__(self, base_url: str, token: str | None, **kw: Any):
            super().__init__(base_url, **kw)
            self._token = token
            self._ws_url = f"{convert_to_ws_url(base_url)}/ws"

        async def connect(self):
            if self._ws is None:
                headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
                self._ws = await ws_connect(self._ws_url, open_timeout=self._connect_timeout,
                                            max_size=self._max_message_size, additional_headers=headers,
                                            close_timeout=2, proxy=None)
            return self

        def _step_payload(self, action: dict) -> dict:
            return action

        def _parse_result(self, payload: dict) -> StepResult:
            return StepResult(observation=payload.get("observation", {}), reward=payload.get("reward"),
                              done=payload.get("done", False))

        def _parse_state(self, payload: dict) -> dict:
            return payload

    return TokenClient


class _Loop:
    """One event loop thread per process for every remote sandbox's async client: a sync caller waits on its
    future with a deadline. Recreated after a fork (a forked child has the thread object but no thread)."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid = 0

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="envgen-remote", daemon=True).start()
                cls._loop, cls._pid = loop, os.getpid()
            return cls._loop

    @classmethod
    def run(cls, coro, timeout: float):
        fut = asyncio.run_coroutine_threadsafe(coro, cls.get())
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise


async def _exchange(client, message: dict, timeout: float) -> dict:
    """EnvClient's send-and-receive, except that a send on a connection the server has just closed still
    reads the answer the server left before closing (its busy answer comes right after the handshake)."""
    from websockets.exceptions import ConnectionClosed

    await client._ensure_connected()
    try:
        await client._ws.send(json.dumps(message))
    except ConnectionClosed:
        pass  # recv below returns what the server sent before closing, or raises
    response = json.loads(await asyncio.wait_for(client._ws.recv(), timeout))
    if response.get("type") == "error":
        err = response.get("data", {})
        raise RuntimeError(f"Server error: {err.get('message', 'unknown error')} (code: {err.get('code', '?')})")
    return response.get("data", {})


class _Queue:
    """Per server URL, in this process: the sandboxes waiting for a session, first come first served (see the
    module docstring). A waiter tries to connect only at the head of the queue; a session given back wakes it."""

    cond = threading.Condition()
    waiting: dict[str, list[object]] = {}

    @classmethod
    def join(cls, url: str, ticket: object) -> None:
        with cls.cond:
            q = cls.waiting.setdefault(url, [])
            if ticket not in q:
                q.append(ticket)

    @classmethod
    def leave(cls, url: str, ticket: object) -> None:
        with cls.cond:
            q = cls.waiting.get(url, [])
            if ticket in q:
                q.remove(ticket)
            cls.cond.notify_all()

    @classmethod
    def others_first(cls, url: str, ticket: object) -> bool:
        """Whether sandboxes that asked before `ticket` still wait (it must not take their slot)."""
        with cls.cond:
            q = cls.waiting.get(url, [])
            return bool(q) and q[0] is not ticket

    @classmethod
    def wait(cls, seconds: float) -> None:
        """Sleep up to `seconds`, or until a session of this process is given back (to any URL)."""
        with cls.cond:
            cls.cond.wait(seconds)

    @classmethod
    def released(cls) -> None:
        with cls.cond:
            cls.cond.notify_all()


class RemoteSandbox(Sandbox):
    """A sandbox on an ``envgen serve`` (see the module docstring)."""

    backend = "remote"

    def __init__(self, pack: Pack, url: str, *, token: str | None = None, connect_timeout: float = 10.0,
                 busy_wait_s: float | None = 30.0):
        """`busy_wait_s`: seconds a session may wait for a server at its session cap (None: no limit, for
        callers that give sessions back between episodes, like the pass check)."""
        super().__init__(pack)
        self.url, url_token = parse_remote(url)
        self.token = token or url_token
        self.connect_timeout, self.busy_wait_s = connect_timeout, busy_wait_s
        self._client = None
        self._lost: str | None = None
        """Why the current episode's session is gone (None while it is alive)."""
        self.reconnects = 0

    # -- the backend hooks of Sandbox are not used: the supervisor runs on the server

    def _open_box(self):  # pragma: no cover - never called
        raise AssertionError("a remote sandbox has no local supervisor")

    def _close_box(self, box) -> None:  # pragma: no cover - never called
        pass

    @property
    def verifier_env_dir(self) -> str:
        return ""

    # -- transport

    def _send(self, kind: str, data: dict, timeout: float) -> dict:
        """One OpenEnv message and its reply payload; raises ConnectionError (lost) or RuntimeError (the server's
        error answer; its busy answer names BUSY_CODE)."""
        try:
            return _Loop.run(_exchange(self._client, {"type": kind, "data": data}, timeout), timeout + 1.0)
        except RuntimeError:
            raise  # the server's answer, not a lost connection (the catch-all below must not take it)
        except (asyncio.TimeoutError, TimeoutError) as e:
            raise ConnectionError(f"no answer from {self.url} within {timeout:g} s") from e
        except (OSError, EOFError, asyncio.CancelledError) as e:
            raise ConnectionError(f"the connection to {self.url} was lost ({type(e).__name__}: {e})") from e
        except Exception as e:  # websockets' ConnectionClosed and friends
            raise ConnectionError(f"the connection to {self.url} was lost ({type(e).__name__}: {e})") from e

    def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                _Loop.run(client.close(), 3.0)
            except Exception:
                pass
            _Queue.released()

    def _open_session(self) -> None:
        """Connect and open a sandbox-mode session for this pack (retrying a busy or unreachable server
        until its deadline); on return ``tools`` is the runtime's hello."""
        self._drop_client()
        ticket = object()
        try:
            data = self._connect_in_turn(time.monotonic(), ticket)
        finally:
            _Queue.leave(self.url, ticket)
        self.tools = data.get("observation", {}).get("info", {}).get("tools", [])
        self._lost = None

    def _connect_in_turn(self, start: float, ticket: object) -> dict:
        """The session's opening answer; waits its turn among this process's sandboxes for a busy server."""
        delay, last = 0.1, ""
        while True:
            if _Queue.others_first(self.url, ticket):  # others of this process wait for this server: queue up
                _Queue.join(self.url, ticket)
                if self.busy_wait_s is not None and time.monotonic() - start > self.busy_wait_s:
                    raise SandboxError(f"pack {self.pack.manifest.name!r}: no session on {self.url}: it is busy "
                                       f"(at its session cap) and {self.busy_wait_s:g} s passed waiting")
                _Queue.wait(0.5)
                continue
            self._client = _client_class()(self.url, self.token, connect_timeout_s=self.connect_timeout,
                                           message_timeout_s=self.connect_timeout)
            busy = None
            try:
                try:
                    _Loop.run(self._client.connect(), self.connect_timeout + 1.0)
                except Exception as e:  # refused, unreachable, HTTP 401 at the handshake, timed out
                    raise ConnectionError(f"cannot connect to {self.url} ({type(e).__name__}: {e})") from None
                return self._send("reset", {"mode": SANDBOX_MODE, "pack": self.pack.manifest.name,
                                            "version": self.pack.manifest.version},
                                  max(60.0, self.limits.step_timeout_s) + NETWORK_GRACE_S)
            except RuntimeError as e:
                self._drop_client()
                if BUSY_CODE not in str(e):
                    raise SandboxError(f"pack {self.pack.manifest.name!r} on {self.url}: {e}") from None
                busy = str(e)
            except (ConnectionError, TimeoutError, OSError) as e:
                self._drop_client()
                last = str(e)
                if "HTTP 401" in last or "HTTP 403" in last:
                    raise SandboxError(f"{self.url} refused the connection: the token is missing or wrong "
                                       f"(set {TOKEN_ENV} or put it in the URL)") from None
                if f"{BUSY_CLOSE} (try again later)" in last:  # the busy close came before its answer was read
                    busy = last
            if busy is not None:
                last = f"{self.url} is busy (at its session cap): {busy}"
                _Queue.join(self.url, ticket)
                if self.busy_wait_s is not None and time.monotonic() - start + delay > self.busy_wait_s:
                    raise SandboxError(f"pack {self.pack.manifest.name!r}: no session on {self.url}: {last}")
                _Queue.wait(delay)  # a session of this process given back wakes it sooner
            else:
                if time.monotonic() - start + delay > self.connect_timeout:
                    raise SandboxError(f"pack {self.pack.manifest.name!r}: no session on {self.url}: {last}")
                time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _lose(self, why: str) -> None:
        self._lost = why
        self._drop_client()

    # -- public API (the Sandbox contract)

    def reset(self) -> None:
        """A fresh episode on the server. A session that is gone (lost connection, reaped while idle, server
        restarted) is replaced by a new one, once; a second failure is a SandboxError."""
        if self._client is None or self._lost is not None:
            if self._lost is not None:
                self.reconnects += 1
            self._open_session()
        timeout = max(60.0, self.limits.step_timeout_s) + NETWORK_GRACE_S
        for attempt in (1, 2):
            try:
                self._send("step", {"op": "reset"}, timeout)
                break
            except (ConnectionError, RuntimeError) as e:
                self._lose(str(e))
                if attempt == 2 or (isinstance(e, RuntimeError) and "session is closed" not in str(e)):
                    raise SandboxError(f"pack {self.pack.manifest.name!r}: reset on {self.url} failed: {e}") from None
                self.reconnects += 1
                self._open_session()
        self._deadline = time.monotonic() + self.limits.episode_timeout_s

    def call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> ToolResult:
        left = self._time_left()
        if isinstance(left, ToolResult):
            return left
        if self._lost is not None or self._client is None:
            return ToolResult.failure("connection_lost", f"{self._lost or 'no session'}; reset to start a new episode")
        timeout = min(timeout or self.limits.step_timeout_s, left)
        t0 = time.perf_counter()
        try:
            data = self._send("step", {"op": "call", "tool": tool, "args": args, "timeout": timeout},
                              timeout + HARD_GRACE_S + NETWORK_GRACE_S)
        except (ConnectionError, RuntimeError) as e:
            self._lose(str(e))
            return ToolResult.failure("connection_lost", f"{e}; the episode's remote sandbox is gone "
                                      f"(reset to start a new episode)", time.perf_counter() - t0)
        obs = data.get("observation", {})
        info = obs.get("info", {})
        self.restarts = int(info.get("restarts", self.restarts))
        if info.get("ok"):
            return ToolResult(True, str(obs.get("text", "")), None, time.perf_counter() - t0)
        err = info.get("error") if isinstance(info.get("error"), dict) else {"type": "error", "message": ""}
        return ToolResult.failure(str(err.get("type", "error")), str(err.get("message", "")),
                                  time.perf_counter() - t0)

    def verify(self, task: Task, answer: str, calls: list[dict[str, Any]],
               messages: list[dict[str, Any]] | None = None) -> Verdict:
        """Judged on the server with its own copy of the task (the reference and hidden/ never travel)."""
        if self._lost is not None or self._client is None:
            return Verdict(0.0, {"error": f"connection_lost: {self._lost or 'no session'}"})
        timeout = max(self.limits.step_timeout_s, 60.0) + HARD_GRACE_S + NETWORK_GRACE_S
        try:
            data = self._send("step", {"op": "verify", "task_id": task.id, "answer": answer,
                                       "calls": json.loads(json.dumps(calls, default=str)),
                                       "messages": list(messages or [])}, timeout)
        except (ConnectionError, RuntimeError) as e:
            self._lose(str(e))
            return Verdict(0.0, {"error": f"connection_lost: {e}"})
        obs = data.get("observation", {})
        return Verdict(float(data.get("reward") or 0.0), dict(obs.get("info", {}).get("details") or {}))

    def processes(self) -> list[dict]:
        return []

    def close(self) -> None:
        self._drop_client()

    def __enter__(self) -> RemoteSandbox:
        if self._client is None:
            self._open_session()
        return self

    def __del__(self):
        try:
            if self._client is not None:
                self.close()
        except Exception:
            pass
