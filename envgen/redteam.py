"""The red-team gate every task passes before it enters a pack.

The reference must score 1 twice (the verifier is deterministic), and four trajectories that did not
do the task must each score 0:

- ``empty``: the reference's work without its answer (calls to the pack's submit tool dropped, final
  answer ""): the verifier must need an answer;
- ``noop``: no tool calls, the reference's final text: the verifier must need the work, not just the
  words. Skipped for ``answer`` and ``rubric`` verifiers, whose whole contract is the final text;
- ``claim``: no tool calls, "I have completed the task.";
- ``mutated``: the reference with one value of its answer (the submit call's arguments, else the last
  call's, else the final text) changed; for final-text verifiers, the final text (its last number, if any).
"""

from __future__ import annotations

import copy
import random
import re
from dataclasses import dataclass, field
from typing import Any

from .episode import replay
from .pack import Pack, Task, ToolCall
from .sandbox import Sandbox

CLAIM = "I have completed the task."
FINAL_TEXT_KINDS = ("answer", "rubric")
"""Verifiers whose contract is the final text: the noop probe is skipped and ``mutated`` changes the answer."""
_LAST_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?!.*\d)", re.S)


@dataclass
class GateResult:
    task_id: str
    passed: bool
    reason: str = ""
    """The first probe that failed and why; empty when the task passed."""
    probes: dict[str, float] = field(default_factory=dict)


def _mutate_value(v: Any, rng: random.Random) -> Any:
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + rng.choice([1, 2, 7, 100])
    if isinstance(v, float):
        return v * 1.5 + 1.0
    if isinstance(v, str):
        return (v + "-x") if not v.strip() or rng.random() < 0.5 else v[::-1] + "z"
    if isinstance(v, list):
        return v[:-1] if v else ["x"]
    return "mutated"


def _leaves(obj: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(obj, dict) and obj:
        return [p for k, v in obj.items() for p in _leaves(v, path + (k,))]
    if isinstance(obj, list) and obj and all(isinstance(x, (dict, list)) for x in obj):
        return [p for i, v in enumerate(obj) for p in _leaves(v, path + (i,))]
    return [path] if path else []


def _mutate_answer(text: str, rng: random.Random) -> str:
    """A wrong final text: the last number of its last line changed (a number with junk appended still reads
    as that number), else the string mutation."""
    head, _, last = text.rstrip().rpartition("\n")
    m = _LAST_NUMBER.search(last)
    if m:
        value = float(m.group().replace(",", ""))
        wrong = value * 2 + 1 if value >= 0 else value * 2 - 1
        last = last[:m.start()] + (f"{wrong:g}" if "." in m.group() else str(int(wrong))) + last[m.end():]
        return (head + "\n" if head else "") + last
    return _mutate_value(text or "0", rng)


def mutate(task: Task, submit_tool: str | None, seed: int = 0) -> tuple[list[ToolCall], str]:
    """The reference with one value of its answer changed (seeded, so a rejection is reproducible)."""
    rng = random.Random(f"{task.id}:{seed}")
    calls = [c.model_copy(deep=True) for c in task.reference.calls]
    if task.verifier.kind in FINAL_TEXT_KINDS:
        return calls, _mutate_answer(task.reference.answer, rng)
    targets = [c for c in calls if c.tool == submit_tool] or [c for c in calls if c.args]
    if targets:
        call = targets[-1]
        leaves = _leaves(call.args)
        if leaves:
            path = rng.choice(leaves)
            args = copy.deepcopy(call.args)
            node = args
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = _mutate_value(node[path[-1]], rng)
            call.args = args
            return calls, task.reference.answer
    return calls, _mutate_value(task.reference.answer or "0", rng)


def probes(task: Task, submit_tool: str | None) -> dict[str, tuple[list[ToolCall], str, float]]:
    """name -> (calls, answer, required reward)."""
    ref = task.reference
    out = {
        "reference": (ref.calls, ref.answer, 1.0),
        "reference-again": (ref.calls, ref.answer, 1.0),
        "empty": ([c for c in ref.calls if c.tool != submit_tool], "", 0.0),
        "claim": ([], CLAIM, 0.0),
        "mutated": (*mutate(task, submit_tool), 0.0),
    }
    if task.verifier.kind not in FINAL_TEXT_KINDS:
        out["noop"] = ([], ref.answer, 0.0)
    return out


def gate(sandbox: Sandbox, pack: Pack, task: Task) -> GateResult:
    """Run every probe of `task` on `sandbox`; the first one that scores wrong rejects the task."""
    scores: dict[str, float] = {}
    for name, (calls, answer, want) in probes(task, pack.manifest.submit_tool).items():
        ep = replay(sandbox, task, calls, answer)
        scores[name] = ep.verdict.reward
        if ep.verdict.reward != want:
            failed = [c for c in ep.calls if not c["ok"]]
            why = f"{name} scored {ep.verdict.reward:g}, expected {want:g}"
            if failed:
                why += f"; tool error in {failed[0]['tool']}: {failed[0]['content'][:200]}"
            elif ep.verdict.details.get("error") or ep.verdict.details.get("reason"):
                why += f"; {str(ep.verdict.details.get('error') or ep.verdict.details['reason'])[:200]}"
            return GateResult(task.id, False, why, scores)
    return GateResult(task.id, True, "", scores)
