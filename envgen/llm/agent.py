"""Tool-using agents: one conversation of one role with a set of tools until it answers, a tool ends it,
or its turn budget runs out. Whatever the model writes (bad JSON arguments, unknown tools) becomes an
error tool result for the model, never an exception.

What real endpoints and small models do is handled here, each case said in the transcript: tool calls that
arrive as text (the server's tool parser is off) are parsed and run (``envgen.llm.textcalls``); a reply cut at
the token limit is never taken as the final answer (the model is told, a call cut mid-arguments is reported as
cut); a request over the model's context window is retried once with old tool results trimmed; and the calls
of one message are bounded (``max_calls_per_message``), the excess answered with an error result.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

from ..errors import ContextTooLong, EnvgenError, InputError
from ..paths import bundled
from .client import Completion, LLMClient, TranscriptFile, Usage, messages_for_request
from .textcalls import parse_text_calls

log = logging.getLogger("envgen.llm")

TEXT_CALLS_NOTE = ("the endpoint returned tool calls as text in the message content (its tool-call parser is off: "
                   "vLLM needs --enable-auto-tool-choice --tool-call-parser NAME, llama.cpp --jinja); envgen parsed "
                   "them as {form} calls")
TRIM_KEEP = 4
"""Messages at the end of the history that trimming for the context window never shortens."""
TRIM_CHARS = 200
"""What a trimmed tool result keeps of its text."""


# ----------------------------------------------------------------------------- tools


@dataclass
class ToolOutput:
    """What a tool gives the model. ``final`` ends the agent run after this message's calls."""

    content: str
    ok: bool = True
    final: bool = False
    data: Any = None
    """Structured result for the caller (not shown to the model)."""


def error_output(kind: str, message: str) -> ToolOutput:
    return ToolOutput(f"Error ({kind}): {message}", ok=False)


class Toolset:
    """Tools an agent may call: their OpenAI schemas and how to run them."""

    def schemas(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def call(self, name: str, args: dict[str, Any]) -> ToolOutput:
        raise NotImplementedError

    @property
    def names(self) -> list[str]:
        return [s["function"]["name"] for s in self.schemas()]


_SCHEMA_FN: Callable[[Callable], dict] | None = None


def function_schema(fn: Callable) -> dict[str, Any]:
    """The OpenAI schema of a Python function, derived exactly as the sandbox runtime derives tool schemas."""
    global _SCHEMA_FN
    if _SCHEMA_FN is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("_envgen_runtime_schema", bundled("envs") / "runtime" / "server.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _SCHEMA_FN = module.tool_schema
    return _SCHEMA_FN(fn)


def _text(result: Any) -> str:
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


class FunctionTools(Toolset):
    """Host-side tools from Python callables (schemas from signature + Google-style docstring).

    A callable returns a ToolOutput, or any value (shown as text/JSON). ValueError, TypeError, KeyError
    and EnvgenError become an error result for the model (its fault: bad arguments, a missing record);
    anything else is a bug in the host tool and propagates.
    """

    def __init__(self, fns: Iterable[Callable[..., Any]]):
        self.fns = {fn.__name__: fn for fn in fns}
        self._schemas = [function_schema(fn) for fn in self.fns.values()]

    def schemas(self) -> list[dict[str, Any]]:
        return self._schemas

    def call(self, name: str, args: dict[str, Any]) -> ToolOutput:
        fn = self.fns[name]
        try:
            inspect.signature(fn).bind(**args)
        except TypeError as e:
            return error_output("bad_arguments", f"{name}: {e}")
        try:
            out = fn(**args)
        except EnvgenError as e:
            return error_output(type(e).__name__, str(e))
        except (ValueError, TypeError, KeyError) as e:
            return error_output(type(e).__name__, str(e))
        return out if isinstance(out, ToolOutput) else ToolOutput(_text(out))


class SandboxTools(Toolset):
    """Tools served by a sandbox's runtime (a pack's tools.py), optionally only some of them.

    ``scrub`` maps strings (the sandbox's private temp paths) to stable stand-ins, so tool output is the
    same from run to run and a resumed build's requests still match its cached ones.
    """

    def __init__(self, sandbox: Any, only: Iterable[str] | None = None, timeout: float | None = None,
                 scrub: dict[str, str] | None = None):
        self.sandbox = sandbox
        allowed = set(only) if only is not None else None
        self._schemas = [s for s in sandbox.tools if allowed is None or s["function"]["name"] in allowed]
        if allowed is not None:
            missing = allowed - {s["function"]["name"] for s in self._schemas}
            if missing:
                raise InputError(f"the sandbox has no tool(s) {', '.join(sorted(missing))}")
        self.timeout = timeout
        self.scrub = dict(scrub or {})
        for attr in ("work", "root"):
            path = getattr(sandbox, attr, None)
            if isinstance(path, str) and path not in self.scrub:
                self.scrub[path] = "." if attr == "work" else "<sandbox>"

    def schemas(self) -> list[dict[str, Any]]:
        return self._schemas

    def call(self, name: str, args: dict[str, Any]) -> ToolOutput:
        timeout = self.timeout
        if name == "bash" and isinstance(args.get("timeout"), (int, float)):
            timeout = max(timeout or 0, float(args["timeout"]) + 5)
        res = self.sandbox.call(name, args, timeout=timeout)
        text = res.content
        for old in sorted(self.scrub, key=len, reverse=True):
            text = text.replace(old, self.scrub[old])
        return ToolOutput(text, ok=res.ok)


class Tools(Toolset):
    """Several toolsets as one (names must not clash)."""

    def __init__(self, *toolsets: Toolset):
        self.toolsets = toolsets
        self._owner: dict[str, Toolset] = {}
        for ts in toolsets:
            for n in ts.names:
                if n in self._owner:
                    raise InputError(f"tool {n!r} is offered twice")
                self._owner[n] = ts

    def schemas(self) -> list[dict[str, Any]]:
        return [s for ts in self.toolsets for s in ts.schemas()]

    def call(self, name: str, args: dict[str, Any]) -> ToolOutput:
        return self._owner[name].call(name, args)


# ----------------------------------------------------------------------------- the agent loop


@dataclass
class AgentResult:
    """How one ``Agent.send`` ended."""

    outcome: Literal["answered", "stopped", "turn_budget", "token_budget", "truncated"]
    answer: str | None
    """The final message (answered), the ending tool's output (stopped), else None. ``truncated``: the model's
    replies were cut at the token limit twice in a row (raise the config's max_tokens)."""
    turns: int
    tool_calls: int
    tool_errors: int
    malformed: int
    """Tool calls whose arguments were not a JSON object, or that named no offered tool."""
    final_data: Any = None
    """The ``data`` of the tool output that ended the run (outcome ``stopped``)."""


@dataclass
class Agent:
    """One conversation of one role: the model, its tools, its history and its budgets.

    ``send(text)`` adds a user message and runs the model/tool loop until the model answers without a
    tool call, a tool returns ``final``, or the session's ``max_turns`` (model calls) or ``max_tokens``
    run out. The history keeps every message (reasoning included); each request is built with
    ``messages_for_request``.
    """

    llm: LLMClient
    tools: Toolset
    system: str | None = None
    name: str = "agent"
    max_turns: int = 30
    max_tokens: int | None = None
    max_calls_per_message: int = 16
    """Tool calls run from one assistant message; the rest are answered with an error result (a small model
    can emit hundreds in one reply)."""
    salt: str = ""
    transcript: TranscriptFile = field(default_factory=lambda: TranscriptFile(None))
    history: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    malformed: int = 0
    last_outcome: str = "not started"
    tokens_seen: int = 0
    """Prompt + completion tokens of every reply, replayed ones included, so a resumed session stops where
    the original did (``usage`` counts only what was paid in this process)."""
    text_calls: int = 0
    """Replies whose tool calls came as text and were parsed here."""
    cut_replies: int = 0
    """Replies cut at the token limit (finish_reason ``length``)."""
    trims: int = 0
    """Times old tool results were trimmed to fit the model's context window."""

    def __post_init__(self) -> None:
        if self.system and not self.history:
            self.history.append({"role": "system", "content": self.system})
        self._schemas = self.tools.schemas()
        self._names = {s["function"]["name"] for s in self._schemas}
        self.transcript.write("start", agent=self.name, config=self.llm.config.name, model=self.llm.config.model,
                              tools=sorted(self._names), max_turns=self.max_turns)

    def send(self, text: str) -> AgentResult:
        self.history.append({"role": "user", "content": text})
        self.transcript.write("user", content=text)
        start = (self.tool_calls, self.tool_errors, self.malformed, self.turns)
        cut_in_row = False  # the last reply was cut at the token limit: a second cut one in a row ends the run
        while True:
            if self.turns >= self.max_turns:
                return self._end("turn_budget", None, start)
            if self.max_tokens is not None and self.tokens_seen >= self.max_tokens:
                return self._end("token_budget", None, start)
            self.turns += 1
            done = self._complete()
            self.tokens_seen += int(done.usage.get("prompt_tokens", 0)) + int(done.usage.get("completion_tokens", 0))
            msg = self._read_text_calls(dict(done.message))
            self.history.append(msg)
            calls = msg.get("tool_calls") or []
            cut = done.finish_reason == "length"
            if cut:
                self.cut_replies += 1
                self.transcript.write("truncated", finish_reason="length", tool_calls=len(calls),
                                      max_tokens=self.llm.config.max_tokens)
            if not calls:
                if not cut:
                    return self._end("answered", msg.get("content") or "", start)
                if cut_in_row:
                    return self._end("truncated", None, start)
                cut_in_row = True
                limit = f" ({self.llm.config.max_tokens} tokens)" if self.llm.config.max_tokens else ""
                nudge = (f"[envgen] Your last reply was cut off at the token limit{limit} before it ended, so it "
                         "is not taken as your answer. Reply again, shorter: call a tool, or give the final answer "
                         "in a few sentences.")
                self.history.append({"role": "user", "content": nudge})
                self.transcript.write("user", content=nudge, reason="truncated")
                continue
            cut_in_row = cut
            final: ToolOutput | None = None
            final_name = ""
            for n, tc in enumerate(calls):
                if final is not None:  # the run already ended (a submission was taken): later calls do not run
                    out = error_output("skipped", f"not run: the run ended with {final_name}")
                    self.transcript.write("tool", id=tc.get("id"), name=tc["function"]["name"], skipped=True)
                elif n >= self.max_calls_per_message:
                    out = error_output("too_many_calls", f"not run: at most {self.max_calls_per_message} tool calls "
                                       "run per message; send the others in your next message")
                    self.transcript.write("tool", id=tc.get("id"), name=tc["function"]["name"], skipped=True,
                                          reason="too_many_calls")
                else:
                    out = self._run_tool(tc, cut=cut)
                self.history.append({"role": "tool", "tool_call_id": tc["id"], "content": out.content})
                if out.final and final is None:
                    final, final_name = out, tc["function"]["name"]
            if final is not None:
                return self._end("stopped", final.content, start, final.data)

    def _complete(self) -> Completion:
        """One reply; a request over the model's context window is retried once with old tool results trimmed."""
        try:
            return self.llm.complete(messages_for_request(self.history), self._schemas or None, salt=self.salt,
                                     transcript=self.transcript, usage=self.usage, agent=self.name)
        except ContextTooLong as e:
            trimmed = self._trim()
            if not trimmed:
                raise
            self.trims += 1
            note = (f"{self.name}: the request did not fit the model's context window ({e}); trimmed {trimmed} old "
                    f"tool result(s) to {TRIM_CHARS} characters and retried once")
            log.warning(note)
            self.transcript.write("trimmed", results=trimmed, keep_last=TRIM_KEEP, note=note)
            try:
                return self.llm.complete(messages_for_request(self.history), self._schemas or None, salt=self.salt,
                                         transcript=self.transcript, usage=self.usage, agent=self.name)
            except ContextTooLong as again:
                raise ContextTooLong(f"{again}; still too long after trimming {trimmed} old tool result(s): use a "
                                     "model with a longer context window, or lower the role's budgets") from None

    def _trim(self) -> int:
        """Shorten the tool results before the last ``TRIM_KEEP`` messages (the system prompt, the task and every
        call stay, so the conversation keeps its shape); how many were shortened."""
        n = 0
        for msg in self.history[:max(0, len(self.history) - TRIM_KEEP)]:
            text = msg.get("content")
            if msg.get("role") == "tool" and isinstance(text, str) and len(text) > TRIM_CHARS + 80:
                msg["content"] = (f"{text[:TRIM_CHARS]}\n[envgen trimmed this tool result: {len(text) - TRIM_CHARS} "
                                  "more characters, to fit the model's context window]")
                n += 1
        return n

    def _read_text_calls(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A reply whose tool calls came as text in its content, with them moved into ``tool_calls``."""
        if msg.get("tool_calls") or not self._schemas:
            return msg
        parsed = parse_text_calls(msg.get("content") or "")
        if parsed is None:
            return msg
        content, calls, form = parsed
        self.text_calls += 1
        note = TEXT_CALLS_NOTE.format(form=form)
        if self.text_calls == 1:
            log.warning("%s (%s): %s", self.name, self.llm.config.describe(), note)
        self.transcript.write("text_tool_calls", form=form, calls=len(calls), note=note)
        for i, tc in enumerate(calls):  # ids unique over the conversation (some servers check)
            tc["id"] = f"text_call_{self.turns}_{i}"
        return {**msg, "content": content, "tool_calls": calls}

    def _run_tool(self, tc: dict[str, Any], cut: bool = False) -> ToolOutput:
        name = tc["function"]["name"]
        raw = tc["function"]["arguments"]
        self.tool_calls += 1
        t0 = time.monotonic()
        args: Any = None
        if name not in self._names:
            out = error_output("unknown_tool", f"no tool named {name!r}; available: {', '.join(sorted(self._names))}")
            self.malformed += 1
        else:
            try:
                args = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError as e:
                if cut:
                    out = error_output("cut_off", f"the arguments of {name} were cut off: your reply hit the token "
                                       f"limit in the middle of this call ({len(raw)} characters sent). Send a "
                                       "shorter call, e.g. write long content in several steps")
                else:
                    out = error_output("bad_arguments", f"the arguments of {name} are not valid JSON ({e.msg} at "
                                       f"column {e.colno}); send one JSON object with the parameters")
                self.malformed += 1
            else:
                if not isinstance(args, dict):
                    out = error_output("bad_arguments", f"the arguments of {name} must be a JSON object, got "
                                       f"{type(args).__name__}")
                    self.malformed += 1
                else:
                    try:
                        out = self.tools.call(name, args)
                    except EnvgenError as e:
                        out = error_output(type(e).__name__, str(e))
        if not out.ok:
            self.tool_errors += 1
        self.transcript.write("tool", id=tc.get("id"), name=name, arguments=raw, ok=out.ok, final=out.final,
                              content=out.content, seconds=round(time.monotonic() - t0, 4))
        return out

    def _end(self, outcome: str, answer: str | None, start: tuple, data: Any = None) -> AgentResult:
        self.last_outcome = outcome
        res = AgentResult(outcome, answer, self.turns - start[3], self.tool_calls - start[0],
                          self.tool_errors - start[1], self.malformed - start[2], data)
        self.transcript.write("end", outcome=outcome, answer=answer, turns=res.turns, tool_calls=res.tool_calls,
                              tool_errors=res.tool_errors, malformed=res.malformed, usage=self.usage.to_dict())
        return res

    def record(self) -> dict[str, Any]:
        """What the store keeps of this agent session (``Store.add_agent_run`` fields)."""
        return {"config": self.llm.config.name, "model": self.llm.config.model, "outcome": self.last_outcome,
                "turns": self.turns, "tool_calls": self.tool_calls, "tool_errors": self.tool_errors,
                "malformed": self.malformed, "usage": self.usage.to_dict(), "transcript": str(self.transcript.path)}

    def close(self) -> None:
        self.transcript.close()
