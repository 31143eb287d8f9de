"""envgen verifier kit (stdlib only; math-verify or sympy used when installed).

Runs inside the sandbox after the agent's last action, in a fresh process that never imported tool
code (``envs/runtime/verifier.py``). ``verify(spec, ...)`` dispatches on ``spec["kind"]`` and returns
``{"reward": float in [0, 1], "details": {...}}``. Every kind's ``check`` receives the same keywords:

    answer      the agent's final message
    calls       the episode's tool calls: [{"tool", "args", "ok", "content"}]
    work_dir    the state the agent left (the runtime's work dir)
    hidden_dir  the pack's hidden/ (None when the pack has none); visible to this process alone
    env_dir     the pristine env/ (read-only): the state before the episode, e.g. the untouched database
    prompt      the task's prompt messages [{"role", "content"}] (what the agent was asked)
"""

from __future__ import annotations

import math

from . import answer as _answer
from . import program as _program
from . import rubric as _rubric
from . import state as _state
from . import tests as _tests

KINDS = {"answer": _answer.check, "state": _state.check, "program": _program.check, "rubric": _rubric.check,
         "tests": _tests.check}


def verify(spec: dict, *, answer: str, calls: list, work_dir: str, hidden_dir: str | None,
           env_dir: str | None = None, prompt: list | None = None) -> dict:
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown verifier kind {kind!r}; the kit has {sorted(KINDS)}")
    out = KINDS[kind](spec.get("args") or {}, answer=answer, calls=calls, work_dir=work_dir, hidden_dir=hidden_dir,
                      env_dir=env_dir, prompt=list(prompt or []))
    reward = float(out["reward"])
    if not math.isfinite(reward):
        raise ValueError(f"verifier returned a non-finite reward {reward!r}")
    return {"reward": min(1.0, max(0.0, reward)), "details": out.get("details", {})}
