"""One episode on a sandbox: the host's record of every tool call, ended by the verifier.

PackEnv, the red-team gate, the oracle replay and the pass check all drive episodes through this one
class, so "what happened in an episode" is recorded in exactly one way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..pack.format import DEFAULT_GREETING, Pack, ReferenceMessage, Task, ToolCall, agent_speaks_first
from ..sandbox import Sandbox, ToolResult, Verdict
from .arguments import ArgumentChecker
from .users import ScriptedUser, User, make_user


def argument_checker(pack: Pack) -> ArgumentChecker:
    """The pack's compiled argument validators (one per pack object; its manifest's tools do not change)."""
    checker = pack.__dict__.get("_argument_checker")
    if checker is None:
        checker = pack.__dict__["_argument_checker"] = ArgumentChecker(
            t.model_dump(exclude_none=True) for t in pack.manifest.tools)
    return checker


def allowed_tools(pack: Pack, task: Task) -> set[str] | None:
    """The tools `task` may call: its own list, else the pack's schemas (None: no list, the runtime decides)."""
    if task.tools is not None:
        return set(task.tools)
    return {t.name for t in pack.manifest.tools} if pack.manifest.tools else None


def refusal(pack: Pack, allowed: set[str] | None, tool: str, args: dict[str, Any]) -> ToolResult | None:
    """The failure a call gets without running (a tool outside `allowed`, arguments that do not fit its JSON
    schema), or None when it may run. One rule for every driver, and for a server re-checking a client's record."""
    if allowed is not None and tool not in allowed:
        return ToolResult.failure("unknown_tool", f"no tool named {tool!r} in this task; "
                                  f"available: {', '.join(sorted(allowed))}")
    wrong = argument_checker(pack).check(tool, args)
    return ToolResult.failure("bad_arguments", wrong) if wrong is not None else None


def call_record(tool: str, args: dict[str, Any], result: ToolResult, turn: int | None) -> dict[str, Any]:
    """One entry of ``Episode.calls`` (the verifier's view of a call)."""
    return {"tool": tool, "args": args, "ok": result.ok, "content": result.content,
            "error": None if result.ok else dict(result.error or {"type": "error", "message": ""}),
            "seconds": round(result.seconds, 6), "turn": turn}


@dataclass
class Episode:
    sandbox: Sandbox
    task: Task
    calls: list[dict[str, Any]] = field(default_factory=list)
    """[{tool, args, ok, content, error, seconds, turn}] in order; what the verifier receives. `turn` is the
    assistant message that made the call, counted from 1 (None where the driver does not know it); `error`
    is the failure's {type, message} when not ok, else None."""
    verdict: Verdict | None = None
    started: float = field(default_factory=time.monotonic)
    messages: list[dict[str, Any]] = field(default_factory=list)
    """[{role, content, turn}] in order: the conversation (``user``: the task's opening messages, turn 0, and a
    simulated user's replies, with the turn they answer; ``assistant``: the agent's messages); what the
    verifier receives as ``messages``."""

    def __post_init__(self) -> None:
        self.sandbox.reset()
        self.allowed = allowed_tools(self.sandbox.pack, self.task)

    def call(self, tool: str, args: dict[str, Any], turn: int | None = None) -> ToolResult:
        """Run one tool call and record it. A tool outside the task's list (or the pack's schemas) is refused
        like an unknown one; arguments that do not fit the tool's JSON schema are refused as
        ``bad_arguments`` naming each wrong field, and the tool does not run."""
        if self.verdict is not None:
            raise RuntimeError("the episode is over")
        result = refusal(self.sandbox.pack, self.allowed, tool, args) or self.sandbox.call(tool, args)
        self.calls.append(call_record(tool, args, result, turn))
        return result

    def record_message(self, role: str, content: str, turn: int | None) -> None:
        """Record one message of the conversation (see ``messages``)."""
        self.messages.append({"role": role, "content": content, "turn": turn})

    def finish(self, answer: str) -> Verdict:
        """End the episode with the agent's final answer; run the verifier once. The answer is recorded as
        the last assistant message unless the driver recorded it already."""
        if self.verdict is None:
            last = next((m for m in reversed(self.messages) if m["role"] == "assistant"), None)
            if answer and (last is None or last["content"] != answer):
                self.record_message("assistant", answer, None)
            self.verdict = self.sandbox.verify(self.task, answer, self.calls, self.messages)
        return self.verdict

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


def opening(pack: Pack, task: Task, user: User | None = None) -> list[dict[str, str]]:
    """The conversation before the agent's first turn, as ``{role, content}`` messages: the task's user messages;
    or, in a user task of a pack whose agent speaks first (``Manifest.agent_first``), the pack's greeting as the
    agent's message and the user's opening (``user.opening``: the spec's ``opening``, or an LLM user's own;
    without ``user``, the spec's). Every path that starts a conversation (PackEnv, the TRL environment, the
    reference replay) starts it here, so they agree on who speaks first."""
    if not agent_speaks_first(pack.manifest, task):
        return [{"role": "user", "content": m.content} for m in task.prompt if m.role == "user"]
    convo = [{"role": "assistant", "content": pack.manifest.greeting or DEFAULT_GREETING}]
    user = user if user is not None else ScriptedUser(task.user)
    return convo + [{"role": "user", "content": user.opening(list(convo))}]


def reference_plan(calls: list[ToolCall], messages: list[ReferenceMessage] | None = None) -> list[ToolCall | str]:
    """The reference as one step per turn: each of ``messages`` (text to the user) before the call its ``after``
    names, the calls in order; the final answer is not included."""
    plan: list[ToolCall | str] = []
    pending = list(messages or [])
    for k, call in enumerate([*calls, None]):
        while pending and pending[0].after <= k:
            plan.append(pending.pop(0).content)
        if call is not None:
            plan.append(call)
    return plan + [m.content for m in pending]


def replay(sandbox: Sandbox, task: Task, calls: list[ToolCall], answer: str,
           messages: list[ReferenceMessage] | None = None, user_model: str | None = None) -> Episode:
    """Play a fixed trajectory (tool calls, then a final answer) and verify it: one call per turn, as the
    oracle policy plays it through PackEnv. For a task with a simulated user, ``messages`` (the reference's
    text to the user) are played between the calls and answered by the user (``user_model``, default
    scripted), as is the final answer; the conversation is recorded in ``Episode.messages``."""
    ep = Episode(sandbox, task)
    user = None
    if task.user is not None:
        user = make_user(task.user, user_model)
    conversation = opening(sandbox.pack, task, user)
    for m in conversation:
        ep.record_message(m["role"], m["content"], 0)

    def say(text: str, turn: int) -> None:
        ep.record_message("assistant", text, turn)
        if user is not None:
            conversation.append({"role": "assistant", "content": text})
            reply, _ = user.reply(conversation)
            conversation.append({"role": "user", "content": reply})
            ep.record_message("user", reply, turn)

    turn = 0
    for step in reference_plan(calls, messages if task.user is not None else None):
        turn += 1
        if isinstance(step, str):
            say(step, turn)
        else:
            ep.call(step.tool, dict(step.args), turn=turn)
    say(answer, turn + 1)
    ep.finish(answer)
    return ep
