"""The agent runtime: models behind any OpenAI-compatible endpoint, driven through tool calls.

Pieces, each usable alone:

- ``LLMConfig`` / ``LLMPool``: named model configs (endpoint, model, sampling, timeouts, retry budget,
  prices), loaded from flags or a YAML/JSON file, mixed per role or round-robin.
- ``LLMClient``: one chat completion through the ``openai`` client with envgen's own retry loop
  (exponential backoff with jitter on 429, 5xx, timeouts and connection errors; ``Retry-After``
  honoured), token and cost accounting, an optional cache (the build store) so a resumed build replays
  paid calls instead of repeating them, and a JSONL transcript of everything it did.
- ``messages_for_request``: DeepSeek-V3.2 thinking retention, as one pure function.
- ``Agent``: one conversation of one role with a set of tools until it answers, a tool ends it, or
  its turn budget runs out. Whatever the model writes (bad JSON arguments, unknown tools) becomes an
  error tool result for the model, never an exception.
"""

from __future__ import annotations

import email.utils
import hashlib
import inspect
import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from .errors import EnvgenError, InputError, LLMError, LLMUnavailable
from .paths import bundled

# ----------------------------------------------------------------------------- configs


class LLMConfig(BaseModel):
    """One model behind one OpenAI-compatible endpoint, with its sampling, retry budget and prices."""

    model_config = ConfigDict(extra="forbid")

    name: str = "default"
    base_url: str | None = Field(default_factory=lambda: os.environ.get("OPENAI_BASE_URL") or None)
    """None means the openai client's default (api.openai.com)."""
    model: str = Field(min_length=1)
    api_key: SecretStr | None = None
    """Explicit key; else the environment variable named by ``api_key_env``."""
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = Field(None, ge=1)
    timeout: float = Field(600.0, gt=0)
    """Seconds for one HTTP request (reasoning models can think for minutes)."""
    max_retries: int = Field(6, ge=0)
    """Retries after the first attempt, on 429, 5xx, timeouts and connection errors."""
    backoff_base: float = Field(1.0, ge=0)
    backoff_max: float = Field(60.0, ge=0)
    max_wait: float = Field(300.0, ge=0)
    """The longest Retry-After honoured; a server asking for more makes the call give up at once."""
    price_input: float = Field(0.0, ge=0)
    """USD per 1M prompt tokens."""
    price_output: float = Field(0.0, ge=0)
    """USD per 1M completion tokens (reasoning included)."""
    price_cached_input: float | None = Field(None, ge=0)
    """USD per 1M prompt tokens served from the provider's prompt cache (default: price_input)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific request fields, e.g. ``{"thinking": {"type": "enabled"}}``."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or not all(c.isalnum() or c in "-_." for c in v):
            raise ValueError(f"config name {v!r} may hold only letters, digits, '-', '_' and '.'")
        return v

    def key(self) -> str:
        """The API key to send: explicit, else the environment; a placeholder for keyless local servers."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        value = os.environ.get(self.api_key_env)
        if value:
            return value
        if self.base_url is None:
            raise LLMError(f"LLM config {self.name!r}: no API key; set {self.api_key_env} or give a base URL "
                           "of a server that needs none")
        return "EMPTY"

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        cached_price = self.price_input if self.price_cached_input is None else self.price_cached_input
        fresh = max(0, prompt_tokens - cached_tokens)
        return (fresh * self.price_input + cached_tokens * cached_price + completion_tokens * self.price_output) / 1e6

    def describe(self) -> str:
        return f"{self.name} ({self.model} at {self.base_url or 'api.openai.com'})"


Strategy = Literal["round_robin", "first"]


class _PoolFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: list[LLMConfig] = Field(min_length=1)
    roles: dict[str, str] = Field(default_factory=dict)
    strategy: Strategy = "round_robin"


class LLMPool:
    """Several named configs and the rule that picks one for an agent.

    ``pick(role, preferred, ordinal)``: an explicit role mapping wins; else the agent spec's preferred
    config when the pool has one by that name; else the strategy (``round_robin`` over ``ordinal``, a
    stable number the caller gives, e.g. the stage's position in the build plan, so a resumed build
    picks the same model for the same stage and its cached calls still match; ``first``).
    """

    def __init__(self, configs: Iterable[LLMConfig], roles: dict[str, str] | None = None,
                 strategy: Strategy = "round_robin"):
        self.configs = list(configs)
        if not self.configs:
            raise InputError("an LLM pool needs at least one model config")
        names = [c.name for c in self.configs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InputError(f"LLM config names repeat: {', '.join(dup)}")
        self.by_name = {c.name: c for c in self.configs}
        self.roles = dict(roles or {})
        for role, name in self.roles.items():
            if name not in self.by_name:
                raise InputError(f"LLM roles: {role!r} names config {name!r}, which is not one of {', '.join(names)}")
        if strategy not in ("round_robin", "first"):
            raise InputError(f"unknown LLM strategy {strategy!r}; use round_robin or first")
        self.strategy = strategy

    @classmethod
    def of(cls, llm: LLMConfig | Iterable[LLMConfig] | LLMPool) -> LLMPool:
        if isinstance(llm, LLMPool):
            return llm
        if isinstance(llm, LLMConfig):
            return cls([llm])
        return cls(list(llm))

    def get(self, name: str) -> LLMConfig:
        try:
            return self.by_name[name]
        except KeyError:
            raise InputError(f"no LLM config named {name!r}; the pool has {', '.join(self.by_name)}") from None

    def pick(self, role: str | None = None, preferred: str | None = None, ordinal: int = 0) -> LLMConfig:
        if role is not None and role in self.roles:
            return self.by_name[self.roles[role]]
        if preferred is not None and preferred in self.by_name:
            return self.by_name[preferred]
        if self.strategy == "first":
            return self.configs[0]
        return self.configs[ordinal % len(self.configs)]


def load_llm_file(path: str | os.PathLike) -> LLMPool:
    """A pool from YAML or JSON: ``{models: [{name, base_url, model, ...}], roles: {role: name}, strategy}``
    (a bare list of configs also works)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read the LLM config file ({e.strerror})") from None
    try:
        if p.suffix.lower() == ".json":
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text)
    except Exception as e:  # json.JSONDecodeError, yaml.YAMLError
        raise InputError(f"{p}: not valid {'JSON' if p.suffix.lower() == '.json' else 'YAML'}: {e}") from None
    if isinstance(raw, list):
        raw = {"models": raw}
    if not isinstance(raw, dict):
        raise InputError(f"{p}: expected a mapping with 'models' (a list of configs)")
    try:
        parsed = _PoolFile.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise InputError(f"{p}: {where}: {err['msg']}") from None
    return LLMPool(parsed.models, parsed.roles, parsed.strategy)


def load_llm(config_file: str | os.PathLike | None = None, *, base_url: str | None = None,
             model: str | None = None, api_key: str | None = None, **overrides: Any) -> LLMPool:
    """The pool the CLI builds from ``--llm-config FILE`` and/or ``--llm-base-url``/``--llm-model``.

    Flags describe one more config, named ``cli`` and placed first (so ``strategy: first`` uses it);
    ``overrides`` (temperature, timeout, price_input, ...) apply to that config.
    """
    configs: list[LLMConfig] = []
    roles: dict[str, str] = {}
    strategy: Strategy = "round_robin"
    if config_file is not None:
        pool = load_llm_file(config_file)
        configs, roles, strategy = pool.configs, pool.roles, pool.strategy
    if model is not None or base_url is not None:
        if model is None:
            raise InputError("--llm-base-url needs --llm-model (the model name the endpoint serves)")
        fields: dict[str, Any] = {"name": "cli", "model": model, **{k: v for k, v in overrides.items() if v is not None}}
        if base_url is not None:
            fields["base_url"] = base_url
        if api_key is not None:
            fields["api_key"] = api_key
        try:
            configs = [LLMConfig(**fields), *[c for c in configs if c.name != "cli"]]
        except ValidationError as e:
            err = e.errors()[0]
            raise InputError(f"LLM flags: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    if not configs:
        raise InputError("no LLM given: pass --llm-model (and --llm-base-url) or --llm-config FILE")
    return LLMPool(configs, roles, strategy)


# ----------------------------------------------------------------------------- accounting


@dataclass
class Usage:
    """Tokens and money. ``calls`` are paid responses; ``cached_calls`` were replayed from the store."""

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cost: float = 0.0
    retries: int = 0
    errors: int = 0

    def add(self, other: Usage) -> Usage:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)
        return self

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cost"] = round(d["cost"], 6)
        d["total_tokens"] = self.total_tokens
        return d


class Transcript:
    """A JSONL log of one agent run: every request, response, error, tool call and the outcome.

    Each line is flushed when written, so a killed process leaves a readable transcript.
    """

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path is not None else None
        self._f = None
        self.messages_logged = 0
        """Requests log only the messages after this many (the history is append-only), keeping the file linear."""
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = self.path.open("a", encoding="utf-8")

    def write(self, event: str, **fields: Any) -> None:
        if self._f is None:
            return
        self._f.write(json.dumps({"ts": round(time.time(), 3), "event": event, **fields},
                                 ensure_ascii=False, default=str) + "\n")
        self._f.flush()

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


class CallCache(Protocol):
    """Where paid responses are kept by request hash (``envgen.store.Store`` implements it)."""

    def get_llm_call(self, key: str) -> dict[str, Any] | None: ...

    def put_llm_call(self, key: str, *, config: str, model: str, request: dict, response: dict, usage: dict,
                     cost: float, latency_s: float, run_id: str | None, agent: str | None) -> None: ...


# ----------------------------------------------------------------------------- thinking retention


def messages_for_request(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages to send for ``history``, under DeepSeek-V3.2 thinking retention.

    An assistant turn's ``reasoning_content`` is sent back while the user turn it answers is still
    going on (through tool calls and their results), and dropped once a newer user message exists.
    Tool calls and tool results are always kept. Pure: ``history`` is not modified.
    """
    last_user = max((i for i, m in enumerate(history) if m.get("role") == "user"), default=-1)
    out = []
    for i, msg in enumerate(history):
        msg = dict(msg)
        if msg.get("role") == "assistant" and (i < last_user or msg.get("reasoning_content") is None):
            msg.pop("reasoning_content", None)
        out.append(msg)
    return out


# ----------------------------------------------------------------------------- one completion


@dataclass
class Completion:
    """One assistant reply: the message as it goes into the history, plus its accounting."""

    message: dict[str, Any]
    finish_reason: str | None
    usage: dict[str, int]
    cost: float
    latency_s: float
    attempts: int
    cached: bool
    key: str
    config: str


RETRYABLE_STATUS = frozenset({408, 409, 425, 429})


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, else ``retry-after`` (seconds or a date)."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(ra)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def request_key(body: dict[str, Any], salt: str = "") -> str:
    """The cache key of a request: sha256 over its canonical JSON (model, messages, tools, sampling) and a salt."""
    canon = json.dumps({"body": body, "salt": salt}, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def _assistant_message(msg: dict[str, Any]) -> dict[str, Any]:
    """The history entry for a response message: content, reasoning (DeepSeek/vLLM spellings), tool calls."""
    out: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
    reasoning = msg.get("reasoning_content")
    if reasoning is None:
        reasoning = msg.get("reasoning")
    if reasoning:
        out["reasoning_content"] = reasoning
    calls = []
    for i, tc in enumerate(msg.get("tool_calls") or []):
        fn = tc.get("function") or {}
        args = fn.get("arguments")
        calls.append({"id": tc.get("id") or f"call_{i}", "type": "function",
                      "function": {"name": fn.get("name") or "",
                                   "arguments": args if isinstance(args, str) else json.dumps(args or {})}})
    if calls:
        out["tool_calls"] = calls
    return out


class LLMClient:
    """Chat completions for one config, with retries, accounting, caching and transcripts."""

    def __init__(self, config: LLMConfig, *, cache: CallCache | None = None, run_id: str | None = None,
                 sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None):
        from openai import OpenAI

        self.config = config
        self.cache = cache
        self.run_id = run_id
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._client = OpenAI(base_url=config.base_url, api_key=config.key(), max_retries=0, timeout=config.timeout)

    def body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        cfg = self.config
        body: dict[str, Any] = {"model": cfg.model, "messages": messages}
        if tools:
            body["tools"] = tools
        for k in ("temperature", "top_p", "max_tokens"):
            if getattr(cfg, k) is not None:
                body[k] = getattr(cfg, k)
        if cfg.extra_body:
            body["extra_body"] = cfg.extra_body
        return body

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        cfg = self.config
        cap = min(cfg.backoff_max, cfg.backoff_base * (2 ** attempt))
        backoff = cap / 2 + self._rng.uniform(0, cap / 2)  # "equal jitter": never zero, spread out
        return max(backoff, retry_after) if retry_after is not None else backoff

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                 salt: str = "", transcript: Transcript | None = None, usage: Usage | None = None,
                 agent: str | None = None) -> Completion:
        """One assistant reply for ``messages`` (already filtered by ``messages_for_request``)."""
        import openai

        cfg = self.config
        transcript = transcript or Transcript(None)
        usage = usage if usage is not None else Usage()
        body = self.body(messages, tools)
        key = request_key(body, salt)
        seen = transcript.messages_logged if len(messages) >= transcript.messages_logged else 0
        transcript.write("request", config=cfg.name, model=cfg.model, key=key, n_messages=len(messages),
                         new_messages=messages[seen:], tools=[t.get("function", {}).get("name") for t in tools or []])
        transcript.messages_logged = len(messages)
        if self.cache is not None:
            hit = self.cache.get_llm_call(key)
            if hit is not None:
                usage.cached_calls += 1
                transcript.write("response", key=key, cached=True, message=hit["message"],
                                 finish_reason=hit.get("finish_reason"), usage=hit.get("usage", {}))
                return Completion(hit["message"], hit.get("finish_reason"), hit.get("usage", {}), 0.0, 0.0, 0, True,
                                  key, cfg.name)
        started = time.monotonic()
        last = ""
        for attempt in range(cfg.max_retries + 1):
            t0 = time.monotonic()
            retry_after: float | None = None
            try:
                kwargs = {k: v for k, v in body.items() if k != "extra_body"}
                resp = self._client.chat.completions.create(**kwargs, extra_body=body.get("extra_body"))
                data = resp.model_dump(mode="json")
                if not data.get("choices") or data["choices"][0].get("message") is None:
                    raise _EmptyReply()
            except openai.APITimeoutError:
                kind, last = "timeout", f"no response within {cfg.timeout:g} s"
            except openai.APIConnectionError as e:
                kind, last = "connection", f"{e.__cause__ or e}"
            except openai.APIStatusError as e:
                code = e.status_code
                kind, last = f"http_{code}", f"HTTP {code}: {_error_text(e)}"
                if code < 500 and code not in RETRYABLE_STATUS:
                    transcript.write("error", key=key, attempt=attempt + 1, kind=kind, error=last, retry=False)
                    usage.errors += 1
                    raise LLMError(f"{cfg.describe()}: {last}{_hint(code, cfg)}") from None
                retry_after = _retry_after(e.response.headers)
            except _EmptyReply:
                kind, last = "empty_reply", "the response had no choices"
            except openai.APIError as e:  # e.g. a body that does not fit the schema
                kind, last = "bad_response", str(e)
            except ValueError as e:  # a 200 whose body is not JSON (a proxy's error page, a cut-off stream)
                kind, last = "bad_response", f"the response body is not JSON ({e})"
            else:
                latency = time.monotonic() - t0
                return self._accept(data, key, body, salt, latency, attempt + 1, transcript, usage, agent)
            usage.errors += 1
            latency = time.monotonic() - t0
            if attempt == cfg.max_retries:
                transcript.write("error", key=key, attempt=attempt + 1, kind=kind, error=last, latency_s=round(latency, 3),
                                 retry=False)
                raise LLMUnavailable(
                    f"{cfg.describe()}: gave up after {attempt + 1} attempts in {time.monotonic() - started:.1f} s; "
                    f"last error: {last}. Check the endpoint, or raise max_retries/timeout in the LLM config")
            if retry_after is not None and retry_after > cfg.max_wait:
                transcript.write("error", key=key, attempt=attempt + 1, kind=kind, error=last, retry=False,
                                 retry_after=retry_after)
                raise LLMUnavailable(f"{cfg.describe()}: {last}; the server asks to wait {retry_after:.0f} s, more "
                                     f"than max_wait={cfg.max_wait:g} s")
            delay = self._delay(attempt, retry_after)
            transcript.write("error", key=key, attempt=attempt + 1, kind=kind, error=last, latency_s=round(latency, 3),
                             retry=True, retry_after=retry_after, wait_s=round(delay, 3))
            usage.retries += 1
            self._sleep(delay)
        raise AssertionError("unreachable")

    def _accept(self, data: dict, key: str, body: dict, salt: str, latency: float, attempts: int,
                transcript: Transcript, usage: Usage, agent: str | None) -> Completion:
        cfg = self.config
        choice = data["choices"][0]
        message = _assistant_message(choice["message"])
        u = data.get("usage") or {}
        details = u.get("completion_tokens_details") or {}
        pdetails = u.get("prompt_tokens_details") or {}
        cached_in = int(pdetails.get("cached_tokens") or u.get("prompt_cache_hit_tokens") or 0)
        tokens = {"prompt_tokens": int(u.get("prompt_tokens") or 0),
                  "completion_tokens": int(u.get("completion_tokens") or 0),
                  "reasoning_tokens": int(details.get("reasoning_tokens") or 0), "cached_tokens": cached_in}
        cost = cfg.cost(tokens["prompt_tokens"], tokens["completion_tokens"], cached_in)
        usage.calls += 1
        usage.prompt_tokens += tokens["prompt_tokens"]
        usage.completion_tokens += tokens["completion_tokens"]
        usage.reasoning_tokens += tokens["reasoning_tokens"]
        usage.cost += cost
        finish = choice.get("finish_reason")
        transcript.write("response", key=key, cached=False, attempts=attempts, latency_s=round(latency, 3),
                         message=message, finish_reason=finish, usage=tokens, cost=round(cost, 8))
        if self.cache is not None:
            self.cache.put_llm_call(key, config=cfg.name, model=cfg.model, request={"body": body, "salt": salt},
                                    response={"message": message, "finish_reason": finish, "usage": tokens},
                                    usage=tokens, cost=cost, latency_s=latency, run_id=self.run_id, agent=agent)
        return Completion(message, finish, tokens, cost, latency, attempts, False, key, cfg.name)


class _EmptyReply(Exception):
    pass


def _error_text(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        return json.dumps(body)[:300]
    return str(getattr(e, "message", e))[:300]


def _hint(code: int, cfg: LLMConfig) -> str:
    if code == 401:
        return f" (check the API key: {cfg.api_key_env} or api_key in the LLM config)"
    if code == 404:
        return f" (check the base URL and that the endpoint serves model {cfg.model!r})"
    return ""


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

    outcome: Literal["answered", "stopped", "turn_budget", "token_budget"]
    answer: str | None
    """The final message (answered), the ending tool's output (stopped), else None."""
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
    salt: str = ""
    transcript: Transcript = field(default_factory=lambda: Transcript(None))
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
        while True:
            if self.turns >= self.max_turns:
                return self._end("turn_budget", None, start)
            if self.max_tokens is not None and self.tokens_seen >= self.max_tokens:
                return self._end("token_budget", None, start)
            self.turns += 1
            done = self.llm.complete(messages_for_request(self.history), self._schemas or None, salt=self.salt,
                                     transcript=self.transcript, usage=self.usage, agent=self.name)
            self.tokens_seen += int(done.usage.get("prompt_tokens", 0)) + int(done.usage.get("completion_tokens", 0))
            msg = done.message
            self.history.append(msg)
            calls = msg.get("tool_calls") or []
            if not calls:
                return self._end("answered", msg.get("content") or "", start)
            final: ToolOutput | None = None
            for tc in calls:
                if final is None:
                    out = self._run_tool(tc)
                else:  # the run already ended (a submission was taken): later calls of the message do not run
                    out = error_output("skipped", f"not run: the run ended with {final_name}")
                    self.transcript.write("tool", id=tc.get("id"), name=tc["function"]["name"], skipped=True)
                self.history.append({"role": "tool", "tool_call_id": tc["id"], "content": out.content})
                if out.final and final is None:
                    final, final_name = out, tc["function"]["name"]
            if final is not None:
                return self._end("stopped", final.content, start, final.data)

    def _run_tool(self, tc: dict[str, Any]) -> ToolOutput:
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
