"""envgen verifier kit (stdlib only; math-verify or sympy used when installed).

Runs inside the sandbox after the agent's last action, in a fresh process that never imported tool
code (``envs/runtime/verifier.py``). ``verify(spec, ...)`` dispatches on ``spec["kind"]`` and returns
``{"reward": float in [0, 1], "details": {...}}``. Every kind's ``check`` receives the whole episode as
the same keywords:

    answer      the agent's final message
    calls       the episode's tool calls: [{"tool", "args", "ok", "content", "error", "seconds", "turn"}]
                (``error``: {"type", "message"} when not ok, else None; ``turn``: the assistant message
                that made the call, from 1)
    messages    the conversation after the prompt: [{"role", "content", "turn"}] (the agent's messages,
                and a simulated user's replies where the task has one)
    reference   the task's reference {"calls", "answer", "patch"}: the verifier's side only, never the agent's
    work_dir    the state the agent left (the runtime's work dir): the final state
    hidden_dir  the pack's hidden/ (None when the pack has none); visible to this process alone
    env_dir     the pristine env/ (read-only): the state before the episode, e.g. the untouched database
    prompt      the task's prompt messages [{"role", "content"}] (what the agent was asked)
"""

from __future__ import annotations

from . import answer as _answer
from . import composite as _composite
from . import procedure as _procedure
from . import program as _program
from . import rubric as _rubric
from . import said as _said
from . import state as _state
from . import tests as _tests

KINDS = {"answer": _answer.check, "state": _state.check, "program": _program.check, "rubric": _rubric.check,
         "tests": _tests.check, "said": _said.check, "no_write": _state.check_no_write,
         "confirmed": _procedure.check_confirmed, "transferred": _procedure.check_transferred,
         "identified": _procedure.check_identified}
KINDS["composite"] = lambda args, **kw: _composite.check(args, kinds=KINDS, **kw)
"""Verifier kind -> check function; a composite's parts dispatch through the same table."""
_clamp = _composite.clamp


WARMUPS = {"math": _answer.warm_math}
"""What a verifier process can load ahead of its first verdict (``--warm NAME``): the supervisor forks every
verifier from a process that ran these once, so math-verify's ~0.6 s import is paid per sandbox, not per verdict."""


def warm(names) -> None:
    for name in names or ():
        if name in WARMUPS:
            WARMUPS[name]()


def verify(spec: dict, *, answer: str, calls: list, work_dir: str, hidden_dir: str | None,
           env_dir: str | None = None, prompt: list | None = None, messages: list | None = None,
           reference: dict | None = None) -> dict:
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown verifier kind {kind!r}; the kit has {sorted(KINDS)}")
    out = KINDS[kind](spec.get("args") or {}, answer=answer, calls=calls, work_dir=work_dir, hidden_dir=hidden_dir,
                      env_dir=env_dir, prompt=list(prompt or []), messages=list(messages or []),
                      reference=dict(reference or {}))
    return {"reward": _clamp(out["reward"]), "details": out.get("details", {})}
