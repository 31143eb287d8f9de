"""One episode on a sandbox: the host's record of every tool call, ended by the verifier.

PackEnv, the red-team gate, the oracle replay and the pass check all drive episodes through this one
class, so "what happened in an episode" is recorded in exactly one way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..pack.format import Task, ToolCall
from ..sandbox import Sandbox, ToolResult, Verdict


@dataclass
class Episode:
    sandbox: Sandbox
    task: Task
    calls: list[dict[str, Any]] = field(default_factory=list)
    """[{tool, args, ok, content, seconds}] in order; what the verifier receives."""
    verdict: Verdict | None = None
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.sandbox.reset()
        self.allowed = set(self.task.tools) if self.task.tools is not None else None

    def call(self, tool: str, args: dict[str, Any]) -> ToolResult:
        """Run one tool call (a tool outside the task's list is refused like an unknown one) and record it."""
        if self.verdict is not None:
            raise RuntimeError("the episode is over")
        if self.allowed is not None and tool not in self.allowed:
            result = ToolResult.failure("unknown_tool", f"no tool named {tool!r} in this task; "
                                        f"available: {', '.join(sorted(self.allowed))}")
        else:
            result = self.sandbox.call(tool, args)
        self.calls.append({"tool": tool, "args": args, "ok": result.ok, "content": result.content,
                           "seconds": round(result.seconds, 6)})
        return result

    def finish(self, answer: str) -> Verdict:
        """End the episode with the agent's final answer; run the verifier once."""
        if self.verdict is None:
            self.verdict = self.sandbox.verify(self.task, answer, self.calls)
        return self.verdict

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


def replay(sandbox: Sandbox, task: Task, calls: list[ToolCall], answer: str) -> Episode:
    """Play a fixed trajectory (tool calls, then a final answer) and verify it."""
    ep = Episode(sandbox, task)
    for c in calls:
        ep.call(c.tool, dict(c.args))
    ep.finish(answer)
    return ep
