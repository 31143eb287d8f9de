"""Rubric verifiers: the sandbox half of generative-reward-model (GRM) grading.

A rubric task is judged by an LLM on the host after the episode (``envgen.llm.judge``): the sandbox has no
network and no model. What runs here is the task's deterministic part, so a rubric task still has an
exact, offline reward (oracle replays, red-team probes, RL without a judge): the short-answer check in
``args.answer`` (the ``answer`` verifier's arguments). ``details.judge`` says the rubric itself is still
to be applied, and the rubric is checked for shape so a malformed one fails here, not in the judge.

args::

    question: str                 what the agent was asked (the judge sees it)
    reference_answer: str         the ground truth in words
    criteria: [{id, text, weight > 0}]
    pitfalls: [{id, text, penalty in (0, 1]}]     (optional)
    answer: {expected, aliases, mode, rel_tol, abs_tol, extract, accents, candidates, evidence}
                                  the deterministic check: the ``answer`` verifier's arguments, graded with
                                  the episode's calls, hidden/ and prompt (one answer only; see answer.py)
"""

from __future__ import annotations

import math

from . import answer as _answer


def validate(args: dict) -> None:
    """Raise ValueError naming the first problem with a rubric's arguments."""
    criteria = args.get("criteria")
    if not isinstance(criteria, list) or not criteria:
        raise ValueError("rubric verifier needs args.criteria: a non-empty list of {id, text, weight}")
    seen = set()
    for i, c in enumerate(criteria):
        if not isinstance(c, dict) or not str(c.get("id", "")).strip() or not str(c.get("text", "")).strip():
            raise ValueError(f"criteria[{i}] needs an id and a text")
        w = c.get("weight", 1)
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0:
            raise ValueError(f"criteria[{i}].weight must be a positive number, got {w!r}")
        if c["id"] in seen:
            raise ValueError(f"criteria[{i}].id {c['id']!r} repeats")
        seen.add(c["id"])
    for i, p in enumerate(args.get("pitfalls") or []):
        if not isinstance(p, dict) or not str(p.get("id", "")).strip() or not str(p.get("text", "")).strip():
            raise ValueError(f"pitfalls[{i}] needs an id and a text")
        pen = p.get("penalty", 1)
        if isinstance(pen, bool) or not isinstance(pen, (int, float)) or not 0 < pen <= 1:
            raise ValueError(f"pitfalls[{i}].penalty must be in (0, 1], got {pen!r}")
        if p["id"] in seen:
            raise ValueError(f"pitfalls[{i}].id {p['id']!r} repeats a criterion or pitfall id")
        seen.add(p["id"])


def check(args: dict, *, answer: str, **kw) -> dict:
    validate(args)
    if not isinstance(args.get("answer"), dict):
        raise ValueError("rubric verifier has no deterministic part (args.answer); it can only be graded by the "
                         "host's judge (envgen.llm.judge)")
    out = _answer.check(args["answer"], answer=answer, **kw)
    details = dict(out.get("details", {}))
    details.update({"judge": "pending: grade on the host with envgen.llm.judge for the rubric score",
                    "criteria": len(args["criteria"]), "pitfalls": len(args.get("pitfalls") or [])})
    return {"reward": out["reward"], "details": details}
