"""The red-team gate every task passes before it enters a pack.

The reference must score 1 twice (the verifier is deterministic), and trajectories that did not do the
task must each score 0:

- ``empty``: the reference's work without its answer (calls to the pack's submit tool dropped, final
  answer ""): the verifier must need an answer;
- ``noop``: no tool calls, the reference's final text: the verifier must need the work, not just the
  words. Skipped for ``answer`` and ``rubric`` verifiers, whose whole contract is the final text;
- ``claim``: no tool calls, "I have completed the task.";
- ``mutated``: the reference with one value of its answer (the submit call's arguments, else the last
  call's, else the final text) changed; for final-text verifiers, the final text (its last number, if any);
- ``collateral``: the reference plus one call from another task's reference that changes the database
  beyond what the reference does (tasks whose verifier checks a database; not applicable, and recorded
  so, when no such call exists).
"""

from __future__ import annotations

import copy
import json
import random
import re
from dataclasses import dataclass, field
from itertools import zip_longest
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
    not_applicable: dict[str, str] = field(default_factory=dict)
    """Probes that could not apply to this task, and why (e.g. collateral: no other reference writes)."""


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
    ref_details: dict[str, Any] = {}
    for name, (calls, answer, want) in probes(task, pack.manifest.submit_tool).items():
        ep = replay(sandbox, task, calls, answer)
        scores[name] = ep.verdict.reward
        if name == "reference":
            ref_details = ep.verdict.details
        if ep.verdict.reward != want:
            failed = [c for c in ep.calls if not c["ok"]]
            why = f"{name} scored {ep.verdict.reward:g}, expected {want:g}"
            if failed:
                why += f"; tool error in {failed[0]['tool']}: {failed[0]['content'][:200]}"
            elif ep.verdict.details.get("error") or ep.verdict.details.get("reason"):
                why += f"; {str(ep.verdict.details.get('error') or ep.verdict.details['reason'])[:200]}"
            return GateResult(task.id, False, why, scores)
    score, what = collateral(sandbox, pack, task, ref_details)
    if score is None:
        return GateResult(task.id, True, "", scores, {"collateral": what})
    scores["collateral"] = score
    if score != 0.0:
        return GateResult(task.id, False, f"collateral scored {score:g}, expected 0; {what}", scores)
    return GateResult(task.id, True, "", scores)


# ------------------------------------------------------------------ collateral: the reference plus one more write

COLLATERAL_TRIES = 8
"""Calls from other references tried, one replay each, to find one that changes this task's database."""
_SQLITE_HEADER = b"SQLite format 3\x00"


def _pack_dbs(pack: Pack) -> list[str]:
    """The SQLite databases in the pack's env/ (by file header), relative paths, sorted."""
    if pack.root is None:
        return []
    root = pack.env_dir
    out = []
    for p in sorted(root.rglob("*")) if root.is_dir() else []:
        if p.is_file() and not p.is_symlink():
            with open(p, "rb") as f:
                if f.read(16) == _SQLITE_HEADER:
                    out.append(p.relative_to(root).as_posix())
    return out


def collateral_task(pack: Pack, task: Task) -> Task | None:
    """The task as the collateral probe judges it, or None when its verifier checks no database.

    A ``state`` verifier, or one that declares ``changes``, reports its change set itself. A ``program``
    verifier over a pack whose env/ holds a SQLite database (e.g. one built before whole-database checks) runs
    with a report-only ``changes`` added: the reward is its own, the change set shows what was written.
    """
    v = task.verifier
    if v.kind == "state" or (isinstance(v.args.get("changes"), dict) and v.args["changes"].get("db")):
        return task
    if v.kind != "program":
        return None
    dbs = _pack_dbs(pack)
    if not dbs:
        return None
    probe = task.model_copy(deep=True)
    probe.verifier.args["changes"] = {"db": dbs[0], "report": True}
    return probe


def collateral_calls(pack: Pack, task: Task, submit_tool: str | None, seed: int = 0) -> list[ToolCall]:
    """Up to COLLATERAL_TRIES calls from the other tasks' references (not the submit tool, not calls this
    reference makes), seeded, taking one call per tool in turn so that several tools are tried."""
    def key(c: ToolCall) -> tuple[str, str]:
        return c.tool, json.dumps(c.args, sort_keys=True)

    own = {key(c) for c in task.reference.calls}
    seen: dict[tuple[str, str], ToolCall] = {}
    for other in pack.tasks:
        if other.id == task.id:
            continue
        for c in other.reference.calls:
            k = key(c)
            if c.tool != submit_tool and k not in own and k not in seen:
                seen[k] = c
    rng = random.Random(f"{task.id}:collateral:{seed}")
    calls = [seen[k] for k in sorted(seen)]
    rng.shuffle(calls)
    by_tool: dict[str, list[ToolCall]] = {}
    for c in calls:
        by_tool.setdefault(c.tool, []).append(c)
    turns = [c for group in zip_longest(*by_tool.values()) for c in group if c is not None]
    return [c.model_copy(deep=True) for c in turns[:COLLATERAL_TRIES]]


def _with_extra(calls: list[ToolCall], extra: list[ToolCall], submit_tool: str | None) -> list[ToolCall]:
    """The reference with ``extra`` inserted before its last submit call (appended when it has none)."""
    at = max((i for i, c in enumerate(calls) if c.tool == submit_tool), default=len(calls))
    return [*calls[:at], *extra, *calls[at:]]


def collateral(sandbox: Sandbox, pack: Pack, task: Task, ref_details: dict[str, Any] | None = None,
               seed: int = 0) -> tuple[float | None, str]:
    """The reference plus one call, from another task's reference, that changes the database beyond what the
    reference does (established by the change sets the verifier reports): it must score 0.

    Returns (score, which call) or (None, why the probe does not apply). All candidates are first replayed
    together: when even that changes nothing beyond the reference (read-only tools), one replay settles it.
    """
    probe = collateral_task(pack, task)
    if probe is None:
        return None, "the verifier checks no database"
    submit = pack.manifest.submit_tool
    candidates = collateral_calls(pack, task, submit, seed)
    if not candidates:
        return None, "no other task's reference has a call to add"
    ref = task.reference

    def digest(extra: list[ToolCall]) -> tuple[str | None, float]:
        ep = replay(sandbox, probe, _with_extra(list(ref.calls), extra, submit), ref.answer)
        return (ep.verdict.details.get("changes") or {}).get("digest"), ep.verdict.reward

    base = ((ref_details or {}).get("changes") or {}).get("digest") if probe is task else None
    if base is None:
        base, _ = digest([])
        if base is None:
            return None, "the verifier reported no change set for the reference"
    together, _ = digest(candidates)
    if together == base:
        return None, "no call of the other references changes this task's database beyond its reference"
    for c in candidates:
        d, reward = digest([c])
        if d is not None and d != base:
            return reward, (f"the reference plus {c.tool}({json.dumps(c.args, ensure_ascii=False)[:200]}), which "
                            "changes the database beyond what the task asks")
    return None, "no single call of the other references changes this task's database beyond its reference"
