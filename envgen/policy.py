"""Policies that drive a PackEnv, and the episode runner behind ``envgen run``.

A Policy maps (observation, info) to an action. It reads the episode's state from ``info`` (the turn
counter, the messages, the task id), not from private memory, so one policy object can drive many
envs at once (a vector env hands each sub-env's info slice to it).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any

from .actions import RENDER_FORMATS, render_action
from .errors import EnvgenError
from .gym import format_messages


class Policy(ABC):
    """Chooses the assistant's next message."""

    name = "policy"

    def bind(self, env: Any) -> None:
        """Called by ``rollout`` before an episode with the env it will act in (unwrapped inside)."""

    @abstractmethod
    def act(self, observation: str, info: dict[str, Any]) -> str | dict[str, Any]:
        """The next assistant message: OpenAI JSON (a dict) or raw model text."""

    def act_batch(self, observations: Any, infos: dict[str, Any]) -> tuple[Any, ...]:
        """Actions for a vector env's batch: each sub-env's info is sliced out of the batched ``infos``."""
        return tuple(self.act(obs, unbatch_info(infos, i)) for i, obs in enumerate(observations))


def unbatch_info(infos: dict[str, Any], i: int) -> dict[str, Any]:
    """Sub-env ``i``'s info from a Gymnasium vector env's batched info (keys whose ``_key`` mask is set)."""
    out = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get("_" + key)
        if mask is not None and not mask[i]:
            continue
        out[key] = unbatch_info(value, i) if isinstance(value, dict) else value[i]
    return out


class OraclePolicy(Policy):
    """Replays the task's reference: one reference call per turn, then the reference answer.

    The reference is never in ``info`` (it must not leak to agents or trainer logs); the oracle finds
    it in the pack, given here or taken from the env by ``bind``. ``tool_format`` picks how the calls
    are written, so the oracle also exercises PackEnv's text parsers.
    """

    name = "oracle"

    def __init__(self, pack: Any = None, tool_format: str = "openai"):
        if tool_format not in RENDER_FORMATS:
            raise EnvgenError(f"unknown tool_format {tool_format!r} for the oracle; use one of {', '.join(RENDER_FORMATS)}")
        self.tool_format = tool_format
        self.pack = None
        if pack is not None:
            from .pack import open_pack

            self.pack = open_pack(pack)

    def bind(self, env: Any) -> None:
        if self.pack is None:
            self.pack = env.unwrapped.pack

    def act(self, observation: str, info: dict[str, Any]) -> str | dict[str, Any]:
        if self.pack is None:
            raise EnvgenError("the oracle policy has no pack: pass OraclePolicy(pack) or run it with rollout(env, policy)")
        ref = self.pack.task(info["task_id"]).reference
        k = int(info["turns"])
        if k < len(ref.calls):
            call = ref.calls[k]
            return render_action("", [{"name": call.tool, "arguments": call.args, "id": f"oracle_{k}"}],
                                 self.tool_format)
        return render_action(ref.answer, (), self.tool_format)


class NullPolicy(Policy):
    """Answers nothing at once: one empty final message (the baseline every verifier must score 0)."""

    name = "null"

    def act(self, observation: str, info: dict[str, Any]) -> str:
        return ""


def make_policy(spec: str) -> Policy:
    """A policy from its CLI spelling: ``oracle``, ``oracle:FORMAT`` (calls written in FORMAT), ``null``."""
    kind, _, arg = spec.partition(":")
    if kind == "oracle":
        return OraclePolicy(tool_format=arg or "openai")
    if kind == "null" and not arg:
        return NullPolicy()
    raise EnvgenError(f"unknown policy {spec!r}; known: oracle, oracle:FORMAT (FORMAT one of "
                      f"{', '.join(RENDER_FORMATS)}), null")


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
    reward_details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (for ``--json``)."""
        return asdict(self)


def rollout(env: Any, policy: Policy, task_id: str | None = None, seed: int | None = None) -> Transcript:
    """Run one episode of ``policy`` in ``env`` (a PackEnv, wrapped or not) and return its transcript.

    The loop always ends: PackEnv truncates at max_turns and at the episode timeout.
    """
    t0 = time.perf_counter()
    policy.bind(env)
    obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id is not None else None)
    reward, terminated, truncated = 0.0, False, False
    while not (terminated or truncated):
        obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
    return Transcript(task_id=info["task_id"], messages=info["messages"], reward=float(reward),
                      turns=info["turns"], terminated=bool(terminated), truncated=bool(truncated),
                      tool_calls=info["tool_calls"], invalid_actions=info["invalid_actions"],
                      tool_errors=info["tool_errors"], reward_details=info.get("reward_details", {}),
                      seconds=round(time.perf_counter() - t0, 4))


def format_transcript(t: Transcript) -> str:
    """The transcript as text for ``envgen run``: a one-line summary, then every message."""
    end = "terminated" if t.terminated else ("truncated" if t.truncated else "running")
    head = (f"task {t.task_id} · reward {t.reward:g} · {t.turns} turns · {t.tool_calls} tool calls · "
            f"{t.invalid_actions} invalid actions · {t.tool_errors} tool errors · {end} · {t.seconds:.2f} s")
    details = ""
    if t.reward_details:
        import json

        details = "\n[reward details] " + json.dumps(t.reward_details, ensure_ascii=False, default=str) + "\n"
    return head + "\n\n" + format_messages(t.messages) + details
