"""Models behind any OpenAI-compatible endpoint: configs, the client, thinking retention.

Pieces, each usable alone (``envgen.llm.agent`` drives them through tool calls):

- ``LLMConfig`` / ``LLMPool``: named model configs (endpoint, model, sampling, timeouts, retry budget,
  prices), loaded from flags or a YAML/JSON file, mixed per role or round-robin.
- ``LLMClient``: one chat completion through the ``openai`` client with envgen's own retry loop
  (exponential backoff with jitter on 429, 5xx, timeouts and connection errors; ``Retry-After``
  honoured), token and cost accounting, an optional cache (the build store) so a resumed build replays
  paid calls instead of repeating them, and a JSONL transcript of everything it did.
- ``messages_for_request``: DeepSeek-V3.2 thinking retention, as one pure function.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import os
import random
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from ..errors import ContextTooLong, InputError, LLMError, LLMUnavailable

log = logging.getLogger("envgen.llm")

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
    unknown: int = 0
    """Paid responses that carried no ``usage`` (some servers leave it out): their tokens and cost count 0, so
    the totals are lower bounds while this is above 0."""

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


class TranscriptFile:
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
    """Where paid responses are kept by request hash (``envgen.store.Store`` implements it).

    Shared by concurrent workers (threads, processes, Ray nodes on one PostgreSQL store): two workers that
    miss the same key both pay for it, and ``put_llm_call`` keeps the first copy once, without failing the
    second (whether the put stored a new row is its return value, None where a cache does not say)."""

    def get_llm_call(self, key: str) -> dict[str, Any] | None: ...

    def put_llm_call(self, key: str, *, config: str, model: str, request: dict, response: dict, usage: dict,
                     cost: float, latency_s: float, run_id: str | None, agent: str | None) -> bool | None: ...


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


def response_data(resp: Any) -> tuple[dict[str, Any] | None, str]:
    """``(completion as a dict, "")`` for what ``chat.completions.create`` returned, or ``(None, why)`` when it is
    not a usable completion.

    The openai client hands back the body as a *string* when a 200 response is not JSON (a proxy's or a load
    balancer's HTML error page): that, and a completion without choices, is a bad response to retry, never an
    AttributeError. The ``openai:`` policy and the simulated user read completions through this too.
    """
    if not hasattr(resp, "model_dump"):
        text = " ".join(str(resp).split())
        return None, (f"HTTP 200 with a body that is not a chat completion (not JSON: {text[:120]!r}); a proxy's "
                      "error page? check the base URL")
    data = resp.model_dump(mode="json")
    if not data.get("choices") or data["choices"][0].get("message") is None:
        return None, "the response had no choices"
    return data, ""


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
        self._warned_usage = False
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
                 salt: str = "", transcript: TranscriptFile | None = None, usage: Usage | None = None,
                 agent: str | None = None) -> Completion:
        """One assistant reply for ``messages`` (already filtered by ``messages_for_request``)."""
        import openai

        cfg = self.config
        transcript = transcript or TranscriptFile(None)
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
                data, why = response_data(resp)
                if data is None:
                    raise _BadReply(why)
            except openai.APITimeoutError:
                kind, last = "timeout", f"no response within {cfg.timeout:g} s"
            except openai.APIConnectionError as e:
                kind, last = "connection", f"{e.__cause__ or e}"
            except openai.APIStatusError as e:
                code = e.status_code
                kind, last = f"http_{code}", f"HTTP {code}: {_error_text(e)}"
                if code < 500 and code not in RETRYABLE_STATUS:
                    too_long = code in (400, 413) and _CONTEXT_TOO_LONG.search(last) is not None
                    kind = "context_length" if too_long else kind
                    transcript.write("error", key=key, attempt=attempt + 1, kind=kind, error=last, retry=False)
                    usage.errors += 1
                    raise (ContextTooLong if too_long else LLMError)(f"{cfg.describe()}: {last}{_hint(code, cfg)}") \
                        from None
                retry_after = _retry_after(e.response.headers)
            except _BadReply as e:
                kind, last = ("empty_reply" if "no choices" in str(e) else "bad_response"), str(e)
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
                transcript: TranscriptFile, usage: Usage, agent: str | None) -> Completion:
        cfg = self.config
        choice = data["choices"][0]
        message = _assistant_message(choice["message"])
        u = data.get("usage") or {}
        if not u.get("prompt_tokens") and not u.get("completion_tokens"):
            usage.unknown += 1
            if not self._warned_usage:
                self._warned_usage = True
                note = (f"{cfg.describe()}: the endpoint sends no token usage; tokens and cost of its calls are "
                        "counted as unknown (0)")
                log.warning(note)
                transcript.write("warning", key=key, warning=note)
        details = u.get("completion_tokens_details") or {}
        pdetails = u.get("prompt_tokens_details") or {}
        cached_in = int(pdetails.get("cached_tokens") or u.get("prompt_cache_hit_tokens") or 0)
        tokens = {"prompt_tokens": int(u.get("prompt_tokens") or 0),
                  "completion_tokens": int(u.get("completion_tokens") or 0),
                  "reasoning_tokens": int(details.get("reasoning_tokens") or 0), "cached_tokens": cached_in}
        if not u.get("prompt_tokens") and not u.get("completion_tokens"):
            tokens["unknown"] = 1
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


class _BadReply(Exception):
    """A 200 response that is not a usable completion (retried like a 5xx)."""


def _error_text(e: Any) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        return json.dumps(body)[:300]
    return str(getattr(e, "message", e))[:300]


_CONTEXT_TOO_LONG = re.compile(
    r"context[ _-]?(length|window)|maximum context|context_length_exceeded|too many tokens|prompt is too long|"
    r"input is too long|exceeds? the (model'?s )?(maximum|max)|longer than the model", re.I)
"""How vLLM, SGLang, llama.cpp, OpenAI and Anthropic-compatible servers word a request over the context window."""


def _hint(code: int, cfg: LLMConfig) -> str:
    if code == 401:
        return f" (check the API key: {cfg.api_key_env} or api_key in the LLM config)"
    if code == 404:
        return f" (check the base URL and that the endpoint serves model {cfg.model!r})"
    return ""
