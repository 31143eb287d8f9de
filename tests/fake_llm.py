"""A local OpenAI-compatible server that plays scripted model turns: the LLM's HTTP boundary in tests.

The real ``openai`` client talks to it over real HTTP. ``POST /v1/chat/completions`` answers with the
next scripted turn (a queue), else with ``responder(body)`` (a function of the request, so replays of
the same request get the same answer). Turns:

- ``Reply(content, reasoning, calls)``: an assistant message; ``calls`` are ``(name, args)`` with args a
  dict, or a raw string for malformed JSON;
- ``Fail(status, headers)``: an error status (429 with ``retry-after``, 500, ...);
- ``Slow(seconds, then)``: answer only after ``seconds`` (for client timeouts);
- ``Raw(body)``: these bytes as the body (a garbled or empty reply).

Every request is recorded (``log``) with its body, its canonical hash and whether an answer went back.
``hold_at=N`` makes the N-th request block until ``release()``, so a test can kill a client mid-call.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    content: str = ""
    reasoning: str | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: bool = True
    """False: the completion has no ``usage`` (some servers leave it out)."""


@dataclass
class Fail:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "scripted failure"


@dataclass
class Raw:
    """A reply body sent as is (garbled JSON, an empty choice list)."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    """e.g. ``text/html`` for a proxy's error page."""


@dataclass
class Slow:
    seconds: float
    then: Reply


@dataclass
class Record:
    n: int
    t: float
    body: dict[str, Any]
    key: str
    status: int = 0
    answered: bool = False


def body_key(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def tool_names(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


class FakeLLM:
    def __init__(self, responder: Callable[[dict[str, Any]], Any] | None = None):
        self.queue: deque = deque()
        self.responder = responder
        self.log: list[Record] = []
        self.errors: list[str] = []
        self.hold_at: int | None = None
        self.held = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                body = json.loads(raw)
                fake._handle(self, body)

            def _send(self, status: int, obj: dict | bytes, headers: dict | None = None,
                      content_type: str = "application/json") -> bool:
                data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                    return True
                except (BrokenPipeError, ConnectionResetError):
                    return False

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    # -- control

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def script(self, *turns: Any) -> FakeLLM:
        with self._lock:
            self.queue.extend(turns)
        return self

    def release(self) -> None:
        self._release.set()

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeLLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def answered(self) -> list[Record]:
        return [r for r in self.log if r.answered]

    # -- serving

    def _handle(self, handler, body: dict[str, Any]) -> None:
        with self._lock:
            rec = Record(len(self.log) + 1, time.monotonic(), body, body_key(body))
            self.log.append(rec)
            turn = self.queue.popleft() if self.queue else None
        if self.hold_at is not None and rec.n == self.hold_at:
            self.held.set()
            self._release.wait()
            rec.status = -1
            return  # never answered: the client is gone by now
        if turn is None:
            if self.responder is None:
                turn = Fail(500, message="the fake LLM has no scripted turn left")
            else:
                try:
                    turn = self.responder(body)
                except Exception as e:  # a bug in the test's script: fail loudly, visibly
                    self.errors.append(f"{type(e).__name__}: {e}")
                    turn = Fail(500, message=f"responder failed: {type(e).__name__}: {e}")
        if isinstance(turn, Slow):
            time.sleep(turn.seconds)
            turn = turn.then
        if isinstance(turn, Fail):
            rec.status = turn.status
            rec.answered = handler._send(turn.status, {"error": {"message": turn.message, "type": "scripted"}},
                                         turn.headers)
            return
        if isinstance(turn, Raw):
            rec.status = turn.status
            rec.answered = handler._send(turn.status, turn.body, content_type=turn.content_type)
            return
        rec.status = 200
        rec.answered = handler._send(200, self._completion(body, rec.key, turn))

    @staticmethod
    def _completion(body: dict[str, Any], key: str, turn: Reply) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": turn.content or None}
        if turn.reasoning is not None:
            msg["reasoning_content"] = turn.reasoning
        calls = []
        for i, (name, args) in enumerate(turn.calls):
            text = args if isinstance(args, str) else json.dumps(args)
            calls.append({"id": f"call_{key[:10]}_{i}", "type": "function",
                          "function": {"name": name, "arguments": text}})
        if calls:
            msg["tool_calls"] = calls
        out_chars = len(turn.content or "") + sum(len(c["function"]["arguments"]) for c in calls)
        reasoning = len(turn.reasoning or "") // 4
        prompt = len(json.dumps(body.get("messages", []))) // 4 + 1
        completion = out_chars // 4 + 1 + reasoning
        out = {"id": f"chatcmpl-{key[:12]}", "object": "chat.completion", "created": 0, "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": turn.finish_reason or ("tool_calls" if calls else "stop"),
                             "message": msg}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion,
                          "completion_tokens_details": {"reasoning_tokens": reasoning}}}
        if not turn.usage:
            del out["usage"]
        return out
