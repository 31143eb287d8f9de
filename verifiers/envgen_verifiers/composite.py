"""``composite``: one verdict from several verifiers of any kinds, so "the database ends right AND the agent
told the user X AND a judged rubric" is one task's check.

args::

    mode: all | weighted        all (default): the reward is the lowest part's (every part must pass);
                                weighted: sum(weight * reward) / sum(weight), then 1 if that reaches
                                ``threshold`` else 0 (without a threshold: the weighted score itself)
    parts: [{kind, args, weight=1, name=kind#i}, ...]     any kinds, composites included
    threshold: number in [0, 1] (weighted only)

Every part runs on the same episode with the same keywords; ``details.parts`` reports each one (name,
kind, reward, weight, its own details) and ``details.failed`` names the parts below 1. A ``rubric``
part is graded by the host's judge (``envgen.llm.judge.JudgedSandbox``), which replaces its reward and
recombines with ``combine`` below; here it has its deterministic answer check, or, without one, reward 0
and ``judge: "pending"`` (a composite with an ungraded rubric never passes by default).
"""

from __future__ import annotations

import math

from . import rubric as _rubric

MODES = ("all", "weighted")


def _number(v) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def validate(args: dict, kinds) -> None:
    """Raise ValueError naming the first problem of a composite's arguments (parts checked recursively)."""
    mode = args.get("mode", "all")
    if mode not in MODES:
        raise ValueError(f"composite mode must be one of {', '.join(MODES)}, got {mode!r}")
    parts = args.get("parts")
    if not isinstance(parts, list) or not parts:
        raise ValueError("composite verifier needs args.parts: a non-empty list of {kind, args}")
    thr = args.get("threshold")
    if thr is not None and (mode != "weighted" or not _number(thr) or not 0 <= thr <= 1):
        raise ValueError("composite threshold must be a number in [0, 1], and only with mode weighted")
    names = set()
    for i, p in enumerate(parts):
        if not isinstance(p, dict):
            raise ValueError(f"composite parts[{i}] must be an object {{kind, args}}")
        extra = set(p) - {"kind", "args", "weight", "name"}
        if extra:
            raise ValueError(f"composite parts[{i}]: unknown field(s) {', '.join(sorted(extra))}")
        if p.get("kind") not in kinds:
            raise ValueError(f"composite parts[{i}].kind: unknown kind {p.get('kind')!r} "
                             f"(expected one of {', '.join(kinds)})")
        if not isinstance(p.get("args", {}), dict):
            raise ValueError(f"composite parts[{i}].args must be an object")
        w = p.get("weight", 1)
        if not _number(w) or w <= 0:
            raise ValueError(f"composite parts[{i}].weight must be a positive number, got {w!r}")
        name = part_name(p, i)
        if name in names:
            raise ValueError(f"composite parts[{i}].name {name!r} repeats")
        names.add(name)
        if p["kind"] == "composite":
            validate(p.get("args") or {}, kinds)


def part_name(part: dict, i: int) -> str:
    return str(part.get("name") or f"{part.get('kind')}#{i}")


def combine(mode: str, rewards: list, weights: list, threshold=None) -> tuple[float, float]:
    """(reward, score) of parts with these rewards and weights (the host's judge recombines with it too)."""
    if mode == "all":
        r = float(min(rewards))
        return r, r
    score = sum(w * r for w, r in zip(weights, rewards)) / sum(weights)
    score = round(score, 9)
    return (score if threshold is None else float(score >= threshold)), score


def clamp(reward) -> float:
    """A part's reward as a float in [0, 1]; a non-finite one is a verifier bug."""
    reward = float(reward)
    if not math.isfinite(reward):
        raise ValueError(f"verifier returned a non-finite reward {reward!r}")
    return min(1.0, max(0.0, reward))


def check(args: dict, *, kinds: dict, **kw) -> dict:
    """``kinds``: the kit's dispatch table (``envgen_verifiers.KINDS``), passed in so this module need
    not import the package that imports it."""
    validate(args, tuple(kinds))
    mode, threshold = args.get("mode", "all"), args.get("threshold")
    parts = []
    for i, p in enumerate(args["parts"]):
        kind, pargs = p["kind"], p.get("args") or {}
        row = {"name": part_name(p, i), "kind": kind, "weight": p.get("weight", 1)}
        if kind == "rubric" and not isinstance(pargs.get("answer"), dict):
            _rubric.validate(pargs)
            row.update(reward=0.0, judge="pending", details={"judge": "pending: no deterministic part; the host's "
                                                             "judge grades it (envgen.llm.judge)"})
        else:
            try:
                out = kinds[kind](pargs, **kw)
            except Exception as e:
                raise RuntimeError(f"composite part {row['name']!r} ({kind}): {type(e).__name__}: {e}") from e
            row.update(reward=clamp(out["reward"]), details=out.get("details", {}))
            if kind == "rubric":
                row["judge"] = "pending"
        parts.append(row)
    reward, score = combine(mode, [p["reward"] for p in parts], [p["weight"] for p in parts], threshold)
    failed = [p["name"] for p in parts if p["reward"] < 1]
    details = {"mode": mode, "score": score, "parts": parts, "failed": failed}
    if threshold is not None:
        details["threshold"] = threshold
    if reward < 1 and failed:
        first = next(p for p in parts if p["reward"] < 1)
        why = first["details"].get("reason") or first["details"].get("error") or first.get("judge") or "failed"
        details["reason"] = f"part {first['name']!r} ({first['kind']}) scored {first['reward']:g}: {why}"
    changes = [p["details"].get("changes") for p in parts if isinstance(p["details"].get("changes"), dict)]
    if len(changes) == 1:
        details["changes"] = changes[0]  # what the episode wrote, where the red-team gate reads it
    return {"reward": reward, "details": details}
