"""Policies that drive a PackEnv, and the episode runner behind ``envgen run``.

A Policy maps (observation, info) to an action. It reads the episode's state from ``info`` (the turn
counter, the messages, the task id), not from private memory, so one policy object can drive many
envs at once (a vector env hands each sub-env's info slice to it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..episodes.actions import RENDER_FORMATS, render_action
from ..episodes.episode import reference_plan
from ..llm.agent import TEXT_CALLS_NOTE
from ..llm.client import messages_for_request, response_data
from ..llm.textcalls import parse_text_calls
from ..errors import InputError, LLMError, LLMUnavailable
from ..episodes.gym import format_messages
from .base import Policy, unbatch_info  # noqa: F401  (unbatch_info: re-exported)
from .hf import HFPolicy
from ..pack.resolve import open_pack

log = logging.getLogger("envgen.policies")


class OraclePolicy(Policy):
    """Replays the task's reference: one reference call per turn, then the reference answer; in a task with a
    simulated user, the reference's messages to the user are played between the calls, one per turn.

    The reference is never in ``info`` (it must not leak to agents or trainer logs); the oracle finds
    it in the pack, given here or taken from the env by ``bind``. ``tool_format`` picks how the calls
    are written, so the oracle also exercises PackEnv's text parsers.
    """

    name = "oracle"

    def __init__(self, pack: Any = None, tool_format: str = "openai"):
        if tool_format not in RENDER_FORMATS:
            raise InputError(f"unknown tool_format {tool_format!r} for the oracle; use one of {', '.join(RENDER_FORMATS)}")
        self.tool_format = tool_format
        self.pack = None
        if pack is not None:
            self.pack = open_pack(pack)

    def bind(self, env: Any) -> None:
        if self.pack is None:
            self.pack = env.unwrapped.pack

    def act(self, observation: str, info: dict[str, Any]) -> str | dict[str, Any]:
        if self.pack is None:
            raise InputError("the oracle policy has no pack: pass OraclePolicy(pack) or run it with rollout(env, policy)")
        task = self.pack.task(info["task_id"])
        ref = task.reference
        plan = reference_plan(ref.calls, ref.messages if task.user is not None else None)
        k = int(info["turns"])
        if k < len(plan):
            step = plan[k]
            if isinstance(step, str):  # a message to the simulated user
                return render_action(step, (), self.tool_format)
            return render_action("", [{"name": step.tool, "arguments": step.args, "id": f"oracle_{k}"}],
                                 self.tool_format)
        return render_action(ref.answer, (), self.tool_format)


class NullPolicy(Policy):
    """Answers nothing at once: one empty final message (the baseline every verifier must score 0)."""

    name = "null"

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return ""


class OpenAIPolicy(Policy):
    """Any OpenAI-compatible chat endpoint (vLLM, SGLang, hosted APIs) through the ``openai`` client.

    Spec: ``openai:MODEL?base_url=URL&temperature=T&top_p=P&top_k=K&max_tokens=N&concurrency=C``;
    base URL and key default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``. The client's own retries cover
    429/5xx/timeouts. Requests carry a per-turn seed derived from the rollout's, so a server that honours
    ``seed`` replays a rollout exactly. The history sent follows thinking retention (`envgen.llm.agent`).
    ``concurrency`` bounds requests in flight across every instance with the same spec. A 200 whose body is not
    a completion (a proxy's HTML error page) is retried ``max_retries`` times, then an LLMUnavailable. Tool calls
    the server left as text in the content (its tool parser is off) are read as calls (``envgen.llm.textcalls``),
    with one warning.
    """

    name = "openai"
    _limits: dict[str, threading.BoundedSemaphore] = {}
    _limits_lock = threading.Lock()

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 temperature: float = 1.0, top_p: float | None = None, top_k: int | None = None,
                 max_tokens: int | None = None, concurrency: int = 64, timeout: float = 600.0, max_retries: int = 5):
        from openai import OpenAI

        if not model:
            raise InputError("openai policy needs a model: openai:MODEL")
        base_url = base_url or os.environ.get("OPENAI_BASE_URL")
        self.model, self.temperature, self.top_p, self.top_k, self.max_tokens = model, temperature, top_p, top_k, max_tokens
        self.client = OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
                             timeout=timeout, max_retries=max_retries)
        self.max_retries = max_retries
        self._warned_text_calls = False
        key = f"{base_url}|{model}"
        with self._limits_lock:
            self._sem = self._limits.setdefault(key, threading.BoundedSemaphore(concurrency))
        self._seed: int | None = None

    def begin(self, seed: int | None) -> None:
        super().begin(seed)
        self._seed = seed

    def act(self, observation: str, info: dict[str, Any]) -> dict[str, Any]:
        import openai


        kwargs: dict[str, Any] = {"model": self.model, "messages": messages_for_request(info["messages"]),
                                  "temperature": self.temperature}
        if info.get("tools"):
            kwargs["tools"] = info["tools"]
        if self.top_p is not None:
            kwargs["top_p"] = self.top_p
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if self.top_k is not None:
            kwargs["extra_body"] = {"top_k": self.top_k}
        if self._seed is not None:
            kwargs["seed"] = (self._seed * 1009 + int(info.get("turns", 0))) % (2**31)
        for attempt in range(self.max_retries + 1):
            try:
                with self._sem:
                    resp = self.client.chat.completions.create(**kwargs)
            except openai.APIError as e:
                raise LLMError(f"policy openai:{self.model}: {type(e).__name__}: {e}") from None
            data, why = response_data(resp)  # a 200 whose body is an HTML error page is retried, then an error
            if data is not None:
                break
            if attempt == self.max_retries:
                raise LLMUnavailable(f"policy openai:{self.model}: gave up after {attempt + 1} attempts: {why}")
            time.sleep(min(8.0, 0.5 * 2 ** attempt))
        usage = data.get("usage") or {}
        self.tokens += int(usage.get("total_tokens") or 0)
        msg = {k: v for k, v in data["choices"][0]["message"].items() if v is not None}
        reasoning = msg.get("reasoning_content") or msg.get("reasoning")
        action: dict[str, Any] = {"content": msg.get("content") or "", "tool_calls": msg.get("tool_calls") or []}
        parsed = None if action["tool_calls"] or not info.get("tools") else parse_text_calls(action["content"])
        if parsed is not None:  # the server's tool parser is off: read the calls the model wrote as text
            action["content"], action["tool_calls"], form = parsed
            if not self._warned_text_calls:
                self._warned_text_calls = True
                log.warning("policy openai:%s: %s", self.model, TEXT_CALLS_NOTE.format(form=form))
        if reasoning:
            action["reasoning_content"] = reasoning
        return action


_FLOATS = {"temperature", "top_p", "timeout", "wait_ms"}
_INTS = {"top_k", "max_tokens", "concurrency", "max_retries", "batch"}


def _parse_query(spec: str, query: str) -> dict[str, Any]:
    from urllib.parse import parse_qsl

    out: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        try:
            out[key] = float(value) if key in _FLOATS else int(value) if key in _INTS else value
        except ValueError:
            raise InputError(f"policy {spec!r}: {key}={value!r} is not a number") from None
    return out


def make_policy(spec: str) -> Policy:
    """A policy from its CLI spelling: ``oracle``, ``oracle:FORMAT`` (calls written in FORMAT), ``null``,
    ``openai:MODEL?opts`` (an OpenAI-compatible endpoint) or ``hf:PATH?opts`` (a local transformers model)."""
    kind, _, arg = spec.partition(":")
    if kind == "oracle":
        return OraclePolicy(tool_format=arg or "openai")
    if kind == "null" and not arg:
        return NullPolicy()
    if kind in ("openai", "hf"):
        target, _, query = arg.partition("?")
        opts = _parse_query(spec, query)
        try:
            if kind == "openai":
                return OpenAIPolicy(target, **opts)
            return HFPolicy(target, **opts)
        except TypeError as e:
            raise InputError(f"policy {spec!r}: {e}") from None
    raise InputError(f"unknown policy {spec!r}; known: oracle, oracle:FORMAT (FORMAT one of "
                      f"{', '.join(RENDER_FORMATS)}), null, openai:MODEL?opts, hf:PATH?opts")


@dataclass
class Transcript:
    """One finished episode: what was said, what it scored, and how it ended."""

    task_id: str
    messages: list[dict[str, Any]]
    reward: float
    turns: int
    terminated: bool
    truncated: bool
    tool_calls: int = 0
    invalid_actions: int = 0
    tool_errors: int = 0
    user_turns: int = 0
    """Replies of the task's simulated user (0 for tasks without one)."""
    reward_details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    tokens: int = 0
    step_seconds: list[float] = field(default_factory=list)
    """Wall time of each env.step (tool execution, parsing, verification)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (for ``--json``)."""
        return asdict(self)


def rollout(env: Any, policy: Policy, task_id: str | None = None, seed: int | None = None) -> Transcript:
    """Run one episode of ``policy`` in ``env`` (a PackEnv, wrapped or not) and return its transcript.

    The loop always ends: PackEnv truncates at max_turns and at the episode timeout.
    """
    t0 = time.perf_counter()
    policy.bind(env)
    policy.begin(seed)
    obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
    reward, terminated, truncated = 0.0, False, False
    steps: list[float] = []
    while not (terminated or truncated):
        action = policy.act(obs, info)
        ts = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append(round(time.perf_counter() - ts, 6))
    return Transcript(task_id=info["task_id"], messages=info["messages"], reward=float(reward),
                      turns=info["turns"], terminated=bool(terminated), truncated=bool(truncated),
                      tool_calls=info["tool_calls"], invalid_actions=info["invalid_actions"],
                      tool_errors=info["tool_errors"], user_turns=info.get("user_turns", 0), reward_details=info.get("reward_details", {}),
                      seconds=round(time.perf_counter() - t0, 4), tokens=policy.tokens, step_seconds=steps)


def format_transcript(t: Transcript) -> str:
    """The transcript as text for ``envgen run``: a one-line summary, then every message."""
    end = "terminated" if t.terminated else ("truncated" if t.truncated else "running")
    head = (f"task {t.task_id} · reward {t.reward:g} · {t.turns} turns · {t.tool_calls} tool calls · "
            f"{t.invalid_actions} invalid actions · {t.tool_errors} tool errors · "
            + (f"{t.user_turns} user replies · " if t.user_turns else "") + f"{end} · {t.seconds:.2f} s")
    details = ""
    if t.reward_details:
        import json

        details = "\n[reward details] " + json.dumps(t.reward_details, ensure_ascii=False, default=str) + "\n"
    return head + "\n\n" + format_messages(t.messages) + details
