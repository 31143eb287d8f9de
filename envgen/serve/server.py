"""``envgen serve``: packs' episodes over the network, through OpenEnv's own server library (``openenv-core``).

The transport, the sessions, the concurrency cap and the idle reaper are OpenEnv's ``HTTPEnvServer`` (its
WebSocket endpoint ``/ws``, one Environment instance per connection); envgen adds only what OpenEnv leaves to
the environment or the operator:

- `EnvgenEnvironment`, the per-session Environment. A session is either a whole **episode** (reset picks a
  pack and a task and answers the prompt; each step is an assistant message, as in PackEnv, whose logic it
  runs) or a bare **sandbox** (reset ``mode="sandbox"``; steps ``op`` = ``reset`` / ``call`` / ``verify``:
  what ``envgen.sandbox.remote.RemoteSandbox`` sends, so gymnasium, the pass check and TRL run remotely).
  One sandbox per session, opened at its first reset and closed with the session (a closed WebSocket, a
  ``close`` message, or the idle reaper).
- `TokenGate`, bearer-token access (OpenEnv's server has none): every path but ``/health``; a WebSocket
  without the token is refused at the handshake with HTTP 401.
- ``/metrics``: sessions, calls per operation, errors, latencies (p50/p99), sandboxes open.

What never leaves the server: ``hidden/`` (the sandbox mounts it for the verifier only) and the tasks'
references (verification uses the server's copy of the task; verifier details, which may quote the expected
answer, are withheld: only the reward, and an error's text, go back).

What the server judges is its own record: a sandbox session's ``verify`` judges the calls this session ran
since its last ``reset`` (their results as the server saw them; `judged_calls`), never a record the client
made up, and it answers once per episode (no oracle for testing guesses against a hidden answer). The client's
list serves only for each call's turn and for calls refused without running, which the server re-checks.

OpenEnv's HTTP ``/reset`` and ``/step`` (a throwaway environment per request) are not registered
(``ServerMode.PRODUCTION``): an episode needs a session.
"""

from __future__ import annotations

import base64
import hmac
import json
import logging
import threading
import time
from collections import Counter, deque
from typing import Any, Callable, Literal

from ..errors import EnvgenError, InputError, SandboxError
from ..episodes.episode import allowed_tools, call_record, refusal
from ..episodes.gym import PackEnv
from ..pack.format import Pack, Task
from ..sandbox import open_sandbox
from ..sandbox.remote import BUSY_CLOSE, PREFIX as REMOTE_PREFIX, SANDBOX_MODE
from . import resolve_token

try:
    from openenv.core.env_server.http_server import HTTPEnvServer
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, ConcurrencyConfig, Observation, ServerMode, State
    from pydantic import Field
except ImportError as e:  # pragma: no cover - depends on the install
    raise InputError(f"envgen serve needs openenv-core ({e}); install envgen[serve]") from e

log = logging.getLogger("envgen.serve")

SAFE_DETAIL_KEYS = frozenset({"error", "truncated", "verified", "message"})
"""Verifier details a client may see; the rest (expected answers, reference outputs) stay on the server."""
RESET_OPTIONS = frozenset({"pack", "task_id", "mode", "version", "tool_format", "max_turns"})


class EnvgenAction(Action):
    """One step of a session. Episode sessions send ``message`` (an assistant message: raw model text, or an
    OpenAI message object with ``content`` and ``tool_calls``); sandbox sessions send ``op`` with its fields."""

    op: Literal["message", "reset", "call", "verify"] = "message"
    message: str | dict[str, Any] | None = Field(None, description="The assistant's message (op=message).")
    tool: str | None = Field(None, description="Tool name (op=call).")
    args: dict[str, Any] | None = Field(None, description="Tool arguments (op=call).")
    timeout: float | None = Field(None, gt=0, description="Seconds for the call (op=call; default: the pack's).")
    turn: int | None = Field(None, description="The assistant message that made the call (op=call; recorded).")
    task_id: str | None = Field(None, description="The task to judge (op=verify).")
    answer: str | None = Field(None, description="The final answer (op=verify).")
    calls: list[dict[str, Any]] | None = Field(
        None, description="The client's record of the episode's calls (op=verify): it gives the calls' turns and "
                          "the calls refused without running; the verdict judges the calls this session ran.")
    messages: list[dict[str, Any]] | None = Field(None, description="The conversation (op=verify).")


class EnvgenObservation(Observation):
    """``text``: what the agent reads (the prompt, tool results, a user's reply); ``info``: PackEnv's info
    (task id, messages, tool schemas, counters) or, in sandbox sessions, the call's outcome."""

    text: str = ""
    info: dict[str, Any] = Field(default_factory=dict)


def safe_details(details: dict[str, Any] | None) -> dict[str, Any]:
    out = {k: v for k, v in (details or {}).items() if k in SAFE_DETAIL_KEYS}
    if set(details or {}) - SAFE_DETAIL_KEYS:
        out["withheld"] = "the verifier's details stay on the server"
    return out


def _same_call(own: dict[str, Any], claimed: dict[str, Any]) -> bool:
    canon = (lambda a: json.dumps(a, sort_keys=True, default=str))
    return own["tool"] == claimed.get("tool") and canon(own["args"]) == canon(claimed.get("args"))


def judged_calls(own: list[dict[str, Any]], claimed: list[Any], pack: Pack, task: Task) -> list[dict[str, Any]]:
    """The calls a verdict judges: `own` (what the session ran, in order, with the server's results), each with
    the turn of the client's matching entry; a client entry that matches no call the session ran counts only as
    a call refused without running, and only where the server's own check (`refusal`) refuses it too; calls
    the client left out are judged all the same. So a forged record (a ``submit`` that never ran, a changed
    result) changes nothing, and an honest client's verdict equals the local one."""
    allowed = allowed_tools(pack, task)
    out: list[dict[str, Any]] = []
    i = 0
    for c in claimed:
        if not isinstance(c, dict):
            continue
        turn = c.get("turn") if isinstance(c.get("turn"), int) else None
        if i < len(own) and _same_call(own[i], c):
            out.append({**own[i], "turn": turn if turn is not None else own[i]["turn"]})
            i += 1
        elif isinstance(c.get("tool"), str) and isinstance(c.get("args"), dict) \
                and (refused := refusal(pack, allowed, c["tool"], c["args"])) is not None:
            out.append(call_record(c["tool"], c["args"], refused, turn))
    return out + own[i:]


class Metrics:
    """Counters and recent latencies, shared by every session (thread-safe: sessions step in their own threads)."""

    def __init__(self, window: int = 20000):
        self._lock = threading.Lock()
        self.started = time.time()
        self.counts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.lat: dict[str, deque[float]] = {}
        self.window = window

    def bump(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counts[key] += n

    def record(self, op: str, seconds: float, error: bool) -> None:
        with self._lock:
            self.counts[f"calls.{op}"] += 1
            if error:
                self.errors[op] += 1
            self.lat.setdefault(op, deque(maxlen=self.window)).append(seconds)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            lat = {}
            for op, xs in self.lat.items():
                s = sorted(xs)
                lat[op] = {"n": len(s), "p50_ms": round(s[len(s) // 2] * 1e3, 3),
                           "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3, 3)}
            c = self.counts
            return {"uptime_s": round(time.time() - self.started, 1),
                    "sessions": {"opened": c["sessions.opened"], "closed": c["sessions.closed"],
                                 "reaped": c["sessions.reaped"]},
                    "sandboxes": {"opened": c["sandboxes.opened"], "closed": c["sandboxes.closed"],
                                  "open": c["sandboxes.opened"] - c["sandboxes.closed"]},
                    "calls": {k.split(".", 1)[1]: v for k, v in c.items() if k.startswith("calls.")},
                    "errors": dict(self.errors), "latency": lat}


class Service:
    """What every session of one server shares: the packs, the sandbox backend, the metrics."""

    def __init__(self, packs: list[Pack], backend: str = "local", sandbox_options: dict[str, Any] | None = None,
                 idle_timeout_s: float | None = 300.0):
        if backend.startswith(REMOTE_PREFIX):
            raise InputError("envgen serve runs sandboxes itself: use --sandbox local, docker or auto")
        self.packs: dict[str, Pack] = {}
        for p in packs:
            if p.manifest.name in self.packs:
                raise InputError(f"two packs named {p.manifest.name!r}: serve one of each name")
            self.packs[p.manifest.name] = p
        if not self.packs:
            raise InputError("envgen serve needs at least one pack")
        self.backend, self.sandbox_options = backend, dict(sandbox_options or {})
        self.idle_timeout_s = idle_timeout_s
        self.metrics = Metrics()
        self.live: set[EnvgenEnvironment] = set()
        self._lock = threading.Lock()

    def pack(self, name: str | None) -> Pack:
        if name is None:
            if len(self.packs) == 1:
                return next(iter(self.packs.values()))
            raise InputError(f"this server has several packs; reset with pack=NAME, one of {', '.join(sorted(self.packs))}")
        if name not in self.packs:
            raise InputError(f"no pack named {name!r} here; this server has {', '.join(sorted(self.packs))}")
        return self.packs[name]

    def close_all(self) -> None:
        with self._lock:
            live = list(self.live)
        for env in live:
            env.close()


class EnvgenEnvironment(Environment):
    """One session: one sandbox, episodes of one pack at a time (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session owns its sandbox; nothing mutable is shared

    def __init__(self, service: Service):
        super().__init__()
        self.service = service
        self.mode: str | None = None
        self.pack: Pack | None = None
        self.env: PackEnv | None = None
        self.sbx = None
        self._tool_format = "auto"
        self._closed = False
        self._last = time.monotonic()
        self._state = State(episode_id=None, step_count=0)
        self._calls: list[dict[str, Any]] | None = None
        """Sandbox sessions: the calls run since the last op=reset, as the server saw them (None: no episode open,
        or it was verified)."""
        self._counted = False
        """Counted in the metrics from its first message: OpenEnv also builds an instance at start to probe it."""
        with service._lock:
            service.live.add(self)

    # -- OpenEnv Environment API

    def reset(self, seed: int | None = None, episode_id: str | None = None, **options: Any) -> EnvgenObservation:
        return self._timed("session_reset", lambda: self._reset(seed, episode_id, options))

    def step(self, action: EnvgenAction, timeout_s: float | None = None, **kwargs: Any) -> EnvgenObservation:
        return self._timed(action.op, lambda: self._step(action))

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        """Close the session's sandbox (idempotent); called by OpenEnv when the session ends or is reaped."""
        if self._closed:
            return
        self._closed = True
        m = self.service.metrics
        idle = self.service.idle_timeout_s
        if self._counted:
            if idle is not None and time.monotonic() - self._last >= idle:
                m.bump("sessions.reaped")
            m.bump("sessions.closed")
        self._drop_sandbox()
        with self.service._lock:
            self.service.live.discard(self)

    # -- internals

    def _timed(self, op: str, fn) -> EnvgenObservation:
        if self._closed:
            raise SandboxError("this session is closed (idle too long, or the server is stopping); "
                               "open a new connection")
        self._last = time.monotonic()
        if not self._counted:
            self._counted = True
            self.service.metrics.bump("sessions.opened")
        t0, failed = time.perf_counter(), True
        try:
            obs = fn()
            failed = False
            return obs
        except EnvgenError as e:  # the client's mistake (or its sandbox's): the client reads it; one line here
            log.info("session %s refused: %s", op, e)
            raise
        except Exception as e:
            if type(e).__module__.startswith("gymnasium"):  # ResetNeeded & co: a step after the episode's end
                log.info("session %s refused: %s", op, e)
                raise
            # a bug, not the client's fault: one line for the client, the traceback in the log
            log.exception("session step failed")
            raise RuntimeError(f"internal error ({type(e).__name__}: {e})") from e
        finally:
            self.service.metrics.record(op, time.perf_counter() - t0, failed)
            self._last = time.monotonic()

    def _drop_sandbox(self) -> None:
        env, sbx = self.env, self.sbx
        self.env = self.sbx = None
        had = (env is not None and env._sandbox is not None) or sbx is not None
        try:
            if env is not None:
                env.close()
            if sbx is not None:
                sbx.close()
        finally:
            if had:
                self.service.metrics.bump("sandboxes.closed")

    def _reset(self, seed: int | None, episode_id: str | None, options: dict[str, Any]) -> EnvgenObservation:
        unknown = set(options) - RESET_OPTIONS
        if unknown:
            raise InputError(f"unknown reset option(s) {sorted(unknown)}; use {', '.join(sorted(RESET_OPTIONS))}")
        mode = options.get("mode") or "episode"
        if mode not in ("episode", SANDBOX_MODE):
            raise InputError(f"unknown mode {mode!r}; use episode or {SANDBOX_MODE}")
        pack = self.service.pack(options.get("pack"))
        version = options.get("version")
        if version is not None and version != pack.manifest.version:
            raise InputError(f"pack {pack.manifest.name!r}: this server has version {pack.manifest.version}, "
                             f"the client {version}; use the same pack on both sides")
        tool_format = options.get("tool_format") or "auto"
        if (mode, pack, tool_format) != (self.mode, self.pack, self._tool_format):
            self._drop_sandbox()
        self.mode, self.pack, self._tool_format = mode, pack, tool_format
        self._state = State(episode_id=episode_id, step_count=0)
        self._calls = None
        sv = self.service
        if mode == SANDBOX_MODE:
            if self.sbx is None:
                self.sbx = open_sandbox(pack, sv.backend, **sv.sandbox_options)
                sv.metrics.bump("sandboxes.opened")
            return EnvgenObservation(info={"tools": self.sbx.tools, "pack": pack.manifest.name,
                                           "version": pack.manifest.version})
        if self.env is None:
            self.env = PackEnv(pack, sandbox=sv.backend, sandbox_options=sv.sandbox_options, tool_format=tool_format,
                               max_turns=options.get("max_turns"))
        task_id = options.get("task_id")
        started = self.env._sandbox is not None
        try:
            obs, info = self.env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
        finally:  # PackEnv opens its sandbox at the first reset (counted even when the reset then fails)
            if not started and self.env._sandbox is not None:
                sv.metrics.bump("sandboxes.opened")
        self._state = State(episode_id=episode_id, step_count=0, task_id=info["task_id"], pack=pack.manifest.name)
        return EnvgenObservation(text=obs, info=self._safe_info(info))

    @staticmethod
    def _safe_info(info: dict[str, Any]) -> dict[str, Any]:
        info = dict(info)
        if "reward_details" in info:
            info["reward_details"] = safe_details(info["reward_details"])
        return info

    def _step(self, a: EnvgenAction) -> EnvgenObservation:
        if self.mode is None:
            raise InputError("reset the session before stepping it")
        self._state.step_count += 1
        if self.mode != SANDBOX_MODE:
            if a.op != "message" or a.message is None:
                raise InputError("an episode session takes {\"message\": ...} (the assistant's message) per step")
            obs, reward, terminated, truncated, info = self.env.step(a.message)
            info = {**self._safe_info(info), "terminated": terminated, "truncated": truncated}
            return EnvgenObservation(text=obs, info=info, reward=float(reward), done=bool(terminated or truncated))
        sbx = self.sbx
        if a.op == "reset":
            self._calls = None
            sbx.reset()
            self._calls = []
            return EnvgenObservation(info={"restarts": sbx.restarts})
        if a.op in ("call", "verify") and self._calls is None:
            raise InputError(f"op={a.op} outside an episode: send op=reset first (an episode is verified once, "
                             f"then the next one starts with op=reset)")
        if a.op == "call":
            if not a.tool:
                raise InputError("op=call needs tool (and args)")
            args = dict(a.args or {})
            r = refusal(self.pack, None, a.tool, args) or sbx.call(a.tool, args, a.timeout)
            self._calls.append(call_record(a.tool, args, r, a.turn))
            return EnvgenObservation(text=r.content, info={"ok": r.ok, "error": r.error, "seconds": r.seconds,
                                                           "restarts": sbx.restarts})
        if a.op == "verify":
            if a.task_id is None:
                raise InputError("op=verify needs task_id")
            task = self.pack.task(a.task_id)
            own, self._calls = self._calls, None  # once per episode, whatever the verdict
            calls = judged_calls(own, list(a.calls or []), self.pack, task)
            verdict = sbx.verify(task, a.answer or "", calls, list(a.messages or []))
            return EnvgenObservation(reward=float(verdict.reward), done=True,
                                     info={"details": safe_details(verdict.details)})
        raise InputError(f"op {a.op!r} is for episode sessions; a sandbox session takes reset, call or verify")


# ---------------------------------------------------------------- access


class TokenGate:
    """ASGI middleware: a request (HTTP or WebSocket handshake) without ``Authorization: Bearer TOKEN`` (or
    Basic with the token as password, which is what a stock OpenEnv EnvClient sends for a URL
    ``http://user:TOKEN@host``) gets 401. Written here because OpenEnv's server has no access control."""

    def __init__(self, app, token: str | None, open_paths: tuple[str, ...] = ("/health",)):
        self.app, self.token, self.open_paths = app, token, open_paths

    def _ok(self, scope) -> bool:
        auth = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        scheme, _, cred = auth.partition(" ")
        if scheme.lower() == "basic":
            try:
                cred = base64.b64decode(cred, validate=True).decode().partition(":")[2]
            except Exception:
                return False
        elif scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(cred.strip().encode(), self.token.encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or self.token is None or scope["path"] in self.open_paths \
                or self._ok(scope):
            return await self.app(scope, receive, _CloseSend(send) if scope["type"] == "websocket" else send)
        body = b'{"detail":"missing or wrong token: send Authorization: Bearer TOKEN (envgen serve printed it)"}'
        headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        elif "websocket.http.response" in (scope.get("extensions") or {}):
            await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008})


class _CloseSend:
    """The ASGI ``send`` of one WebSocket, amended in two ways OpenEnv's endpoint leaves out:

    - its closing frame after a CAPACITY_REACHED answer carries code 1013 and a reason, so a stock client
      whose first send already meets the closed socket (a ``GenericEnvClient``) still reads why;
    - closing a socket the client has closed already (the normal end of a session) is not an error: OpenEnv
      closes every socket at the end and only expects RuntimeError, so uvicorn would log a traceback."""

    def __init__(self, send):
        self.send, self.busy = send, None

    async def __call__(self, message):
        kind = message.get("type")
        if kind == "websocket.send" and '"CAPACITY_REACHED"' in (message.get("text") or ""):
            data = json.loads(message["text"]).get("data", {})
            self.busy = (f"envgen serve is at its session cap ({data.get('active_sessions', '?')} of "
                         f"{data.get('max_sessions', '?')}): retry later, or serve with more --max-sessions")
        if kind != "websocket.close":
            return await self.send(message)
        if self.busy:
            message = {**message, "code": BUSY_CLOSE, "reason": self.busy[:120]}
        try:
            await self.send(message)
        except Exception as e:  # the client went first (uvicorn's ClientDisconnected, an OSError): nothing to close
            log.info("websocket closed by the client before the server's close (%s)", type(e).__name__)


# ---------------------------------------------------------------- app


def build_app(packs: list[Pack], *, backend: str = "local", token: str | None = None, max_sessions: int = 8,
              idle_timeout_s: float | None = 300.0, sandbox_options: dict[str, Any] | None = None):
    """The ASGI app: OpenEnv's session server for `packs` behind the token gate, plus ``/metrics``.
    Its ``service`` is the shared Service (tests and benchmarks read its metrics)."""
    from fastapi import FastAPI

    if max_sessions < 1:
        raise InputError(f"--max-sessions must be at least 1, got {max_sessions}")
    service = Service(packs, backend, sandbox_options, idle_timeout_s)
    server = HTTPEnvServer(lambda: EnvgenEnvironment(service), EnvgenAction, EnvgenObservation,
                           concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions,
                                                                session_timeout=idle_timeout_s))
    app = FastAPI(title="envgen serve", description="envgen packs as OpenEnv sessions")
    server.register_routes(app, mode=ServerMode.PRODUCTION)

    @app.get("/metrics", tags=["Health"], summary="Sessions, calls, errors and latencies")
    def metrics() -> dict[str, Any]:
        snap = service.metrics.snapshot()
        snap["sessions"].update(active=server.active_sessions, max=max_sessions)
        snap["packs"] = {n: p.manifest.version for n, p in service.packs.items()}
        snap["backend"] = service.backend
        return snap

    app.router.on_shutdown.append(service.close_all)
    gate = TokenGate(app, token)
    gate.service, gate.server = service, server
    return gate


def serve(packs: list[Pack], *, host: str = "127.0.0.1", port: int = 8000, token: str | None = None,
          no_token: bool = False, backend: str = "local", max_sessions: int = 8, idle_timeout_s: float = 300.0,
          pool: bool = False, log: Callable[[str], None] = print,
          on_start: Callable[[dict[str, Any]], None] | None = None, **uvicorn_options: Any) -> None:
    """Serve `packs` until interrupted. The token is `token`, else a new one; none only with ``no_token`` on a
    loopback host. What a client needs (address, token) goes to `on_start` as a dict, else to `log` as lines."""
    import uvicorn

    token = resolve_token(token, no_token, host)
    options = {"pool": True} if pool and backend in ("docker", "auto") else {}
    app = build_app(packs, backend=backend, token=token, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                    sandbox_options=options)
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}"
    info = {"url": url, "token": token, "packs": {p.manifest.name: p.manifest.version for p in packs},
            "sandbox": backend, "max_sessions": max_sessions, "idle_timeout_s": idle_timeout_s}
    if on_start is not None:
        on_start(info)
    else:
        names = ", ".join(f"{p.manifest.name}@{p.manifest.version[:19]}" for p in packs)
        log(f"serving {names} on {url} (sandbox {backend}, at most {max_sessions} sessions, idle sessions "
            f"closed after {idle_timeout_s:g} s)")
        log(f"token: {token}" if token else "no token required (loopback only)")
        log(f"connect: an OpenEnv EnvClient on {url} with Authorization: Bearer TOKEN (or the token as the URL's "
            f"password), or sandbox='remote:{url}' with ENVGEN_SERVE_TOKEN set")
    uvicorn.run(app, host=host, port=port, log_level=uvicorn_options.pop("log_level", "warning"),
                ws_max_size=64 << 20, **uvicorn_options)
