"""The red-team gate every task passes before it enters a pack.

The reference must score 1 twice (the verifier is deterministic), and trajectories that did not do the
task must each score 0. Which ones apply follows what the verifier grades (its kind, a composite's parts)
and the task's shape, read from the reference's own run:

- *text* tasks: some part grades what the agent says (``answer``, ``rubric``, ``said``, ``program``: a
  hand-written part may grade words, so it is probed as if it did; the built-in procedure kinds
  ``confirmed``, ``transferred`` and ``identified`` grade the calls and the consent, not what is said, so a
  silent but correct hand-off to a human is not a text task);
- *end-state* tasks: some part checks the database (``state``, ``no_write``, declared ``changes``); a
  *no-change* task is one whose reference leaves the database as it was (refuse, transfer to nobody,
  answer a question);
- *conversational* tasks: the task has a simulated user (``Task.user``); every probe replays the
  reference's messages to the user unless it says otherwise, and the user answers them.

Probes (each must score 0):

- ``empty``: the reference's work, nothing said (no messages, calls to the pack's submit tool dropped, final
  answer ""): the verifier must need an answer. Text tasks and tasks with a submit call only: a task graded
  on its end state alone needs no words;
- ``claim``: no tool calls, "I have completed the task.". Not for no-change tasks that grade no text: doing
  nothing is their right outcome, and ``forbidden``/``collateral`` probe them instead;
- ``noop``: no tool calls, the reference's messages and final text: the verifier must need the work, not
  just the words. Only where some part needs work: ``program``/``tests``/``transferred`` verifiers, an
  ``identified`` part with a customer to verify, a ``state`` part of a task that changes the database, a
  final-text part that asks for evidence (facts that must come back from the episode's tool calls);
- ``mutated``: end-state tasks that change the database: one argument of one write call changed (within its
  schema: another enum value, a neighbouring id or number), the first such change that alters the end
  state (a change that leaves it as the reference's is the same trajectory); other tasks: one value of
  the answer changed: for final-text verifiers the final text (its last number, if any), for tasks with
  ``said`` facts one fact's value wherever the messages and final text state it (what such a task grades
  is the words: a read with another argument may return the same facts), else the submit call's
  arguments, else the last call's, else the final text;
- ``dropped:K``: end-state tasks that change the database: the reference without its call K, for each of
  its last calls whose absence alters the end state (one write dropped);
- ``forbidden:K``: the reference plus its K-th ``forbidden`` call (the write a plausible wrong trajectory
  makes, e.g. the refund the policy forbids), when that call alters the end state;
- ``never-asked``: conversational tasks: the values of the user's hidden facts replaced by wrong ones of the
  same shape in the calls and the answer, and no message to the user (the agent never asked, it guessed);
  only for facts that reach a call or the answer and that the opening prompt does not state;
- ``blanket-consent``: tasks with a ``confirmed`` part: every question of the reference's messages in one
  opening message that ends with a blanket "Shall I proceed with whatever is needed once I have these?",
  then the reference's calls with no description of them and no consent question (the pre-emptive yes of
  issue 29); not applicable when the reference makes none of the writes the part lists;
- ``collateral``: the reference plus one call from another task's reference that changes the database
  beyond what the reference does (tasks whose verifier checks a database; not applicable, and recorded
  so, when no such call exists).

Where the verifier grades the final text, the text probes (``text_probes``) then restate the reference's
answer as a hedge or a list, each of which must score 0: ``hedge-first`` ("W or V", the wrong value
first), ``hedge-last`` ("V or W"), ``enumeration`` (a list of plausible values holding V) and
``answer-lines`` (a wrong answer, then the reference's, so a last-line-wins grader pays). The answer's
place in the text (a slot) is the expected value for ``answer``/``rubric`` verifiers and each fact of a
``said`` part (its other mentions in the reference's messages then say the wrong value, so only the
answer's hedge is judged); for ``program`` verifiers, the last id ("A-0075") and the last number of the
final line (else the value of a final "Answer:" line), each probed only when the verifier grades it: the
reference with that value changed wherever the text says it must score below 1, else the text is not what
is graded there (a plan graded on its submission). Final-text verifiers that ask for evidence also meet
``noop``. Each ``said`` fact also meets ``restated`` (the reference's final text plus "The system also
shows W for this."), ``corrected`` ("Correction: it is W.") and ``retracted`` ("Sorry, it is not V."):
the user is left with another value, or none. ``restated`` applies only where a second value of the
fact's kind can be told apart (a number, a name with digits or a capital, a known candidate).

For ``tests`` verifiers (code tasks), submissions that take the test run over instead of fixing the
code (``code_probes``): ``plugin-addopts`` (a new module that reports every test as passed, named
with ``-p`` in the addopts of every pytest configuration file, setup.cfg always), ``plugin-conftest``
(the same hook in a conftest.py beside the run files and at the root) and ``config-only`` (only the
test configuration edited: every task test deselected) and ``forgery`` (a library-only edit, no test
file touched, that forges the task's runner: every test reported passing but the canary; the payload is
the framework's ``envs/code/forgeries/<framework>.txt``, planted in a source file the reference patch
changes). A task whose verdict such an edit buys is rejected: its tests cannot tell a forged run from a
fixed one (no twin checks).

A probe that the task's shape calls for but that cannot apply to this task (no call alters the end
state, no hidden fact reaches a call) is recorded in ``GateResult.not_applicable`` with the reason.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import itertools
import json
import random
import re
import shlex
import subprocess
import threading
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any, Iterator

from ..episodes.episode import Episode, replay
from ..pack.format import Pack, ReferenceMessage, Task, ToolCall
from ..paths import bundled
from ..sandbox import Sandbox
from .sdk import load_module

CLAIM = "I have completed the task."
FINAL_TEXT_KINDS = ("answer", "rubric")
"""Verifiers whose contract is the final text: ``mutated`` changes the answer."""
TEXT_KINDS = ("answer", "rubric", "said", "program")
"""Verifier kinds that (may) grade what the agent says."""
DROP_TRIES = 4
"""The reference's last calls tried one at a time by ``dropped`` (one replay each)."""
MUTATE_TRIES = 6
"""Argument changes tried by an end-state ``mutated`` until one alters the end state (one replay each)."""
_LAST_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?!.*\d)", re.S)


@dataclass
class GateResult:
    task_id: str
    passed: bool
    reason: str = ""
    """The first probe that failed and why; empty when the task passed."""
    probes: dict[str, float] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)
    """Probes the task's shape calls for that could not apply to this task, and why (e.g. collateral: no
    other reference writes)."""


@dataclass
class Probe:
    """A trajectory to replay and the reward it must earn."""

    calls: list[ToolCall]
    answer: str
    want: float
    messages: list[ReferenceMessage] | None = None
    """What the agent says to a simulated user between its calls (None: nothing before the answer)."""
    changes: bool = False
    """Judged only when it alters the end state (its change set's digest differs from the reference's)."""


@dataclass(frozen=True)
class Shape:
    """What a task's verifier grades: the probes that apply follow from it."""

    parts: tuple[tuple[str, dict], ...]
    """(kind, args) of the verifier, or of each part of a composite (nested composites flattened)."""
    conversational: bool

    @property
    def text(self) -> bool:
        return any(k in TEXT_KINDS for k, _ in self.parts)

    @property
    def end_state(self) -> bool:
        return any(k in ("state", "no_write") or (isinstance(a.get("changes"), dict) and (
            a["changes"].get("db") or a["changes"].get("replay"))) for k, a in self.parts)

    def needs_work(self, changes: bool) -> bool:
        """Whether some part can only pass when the agent made calls (``changes``: the reference writes)."""
        for kind, args in self.parts:
            if kind in ("program", "tests", "transferred") or (kind == "state" and changes):
                return True
            if kind == "identified" and args.get("customer") is not None:
                return True
            answer = args.get("answer") if kind == "rubric" else args
            if kind in ("answer", "rubric", "said") and isinstance(answer, dict) and answer.get("evidence"):
                return True
        return False


def _parts(kind: str, args: dict) -> list[tuple[str, dict]]:
    if kind != "composite":
        return [(kind, args)]
    return [p for part in args.get("parts") or [] if isinstance(part, dict)
            for p in _parts(str(part.get("kind", "")), part.get("args") or {})]


def shape(task: Task) -> Shape:
    return Shape(tuple(_parts(task.verifier.kind, task.verifier.args)), task.user is not None)


def _digest(ep: Episode) -> str | None:
    """The digest of the change set the verifier reported (None: it reported none)."""
    changes = (ep.verdict.details or {}).get("changes")
    return changes.get("digest") if isinstance(changes, dict) else None


def _changed(details: dict) -> bool | None:
    """Whether the reported change set is non-empty (None: no change set reported)."""
    changes = details.get("changes")
    summary = changes.get("summary") if isinstance(changes, dict) else None
    if not isinstance(summary, dict):
        return None
    return bool(summary.get("schema") or summary.get("tables"))


# ------------------------------------------------------------------ wrong values of the right shape

_ID_VALUE = re.compile(r"([A-Za-z]{1,4}[-_]?)(\d{2,})")


def _mutate_value(v: Any, rng: random.Random, schema: dict | None = None) -> Any:
    """A different value of the same shape: another of the schema's enum values, a neighbouring id
    ("O-1042" -> "O-1043"), a changed number or string."""
    enum = [e for e in (schema or {}).get("enum") or [] if e != v]
    if enum:
        return rng.choice(enum)
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + rng.choice([1, 2, 7, 100])
    if isinstance(v, float):
        return v * 1.5 + 1.0
    if isinstance(v, str):
        m = _ID_VALUE.fullmatch(v)
        if m:
            n = int(m.group(2)) + rng.choice([1, 2, 3])
            return m.group(1) + f"{n:0{len(m.group(2))}d}"
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


def _schema_at(pack: Pack | None, tool: str, path: tuple) -> dict:
    """The JSON schema of argument ``path`` of ``tool`` in the pack's manifest ({} where unknown)."""
    node: Any = next((t.function.parameters for t in (pack.manifest.tools if pack else [])
                      if t.function.name == tool), {})
    for key in path:
        node = (node.get("items") if isinstance(key, int) else (node.get("properties") or {}).get(key)) or {}
    return node if isinstance(node, dict) else {}


def _with_leaf(call: ToolCall, path: tuple, value: Any) -> ToolCall:
    args = copy.deepcopy(call.args)
    node = args
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return ToolCall(tool=call.tool, args=args)


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
    targets = [i for i, c in enumerate(calls) if c.tool == submit_tool] or [i for i, c in enumerate(calls) if c.args]
    if targets:
        leaves = _leaves(calls[targets[-1]].args)
        if leaves:
            path = rng.choice(leaves)
            call = calls[targets[-1]]
            node: Any = call.args
            for key in path:
                node = node[key]
            calls[targets[-1]] = _with_leaf(call, path, _mutate_value(node, rng))
            return calls, task.reference.answer
    return calls, _mutate_value(task.reference.answer or "0", rng)


def said_mutation(task: Task) -> Probe | None:
    """For a task graded on what it tells the user (``said`` parts, no final-text verifier): the reference
    with one fact's value changed wherever its messages and final text state it, calls untouched (what
    ``said`` grades in a task that writes nothing is the words, not a read's argument). None when the task
    has no such fact stated in its text."""
    if task.verifier.kind in FINAL_TEXT_KINDS:
        return None
    ref = task.reference
    for fact in _said_facts(task):
        texts = [ref.answer or ""] + [m.content for m in ref.messages or []]
        value = _said_number(fact)
        if value is not None:
            def sub(t: str, value: float = value) -> str:
                return _NUM.sub(lambda m: _wrong_numbers(value, len(m.group().partition(".")[2]))[0]
                                if abs(float(m.group().replace(",", "")) - value) < 1e-9 else m.group(), t)
        else:
            forms = sorted({str(fact["expected"]), *map(str, fact.get("aliases") or [])}, key=len, reverse=True)
            wrong = (_same_shape(str(fact["expected"])) or _garbled(str(fact["expected"])) or ["x"])[0]

            def sub(t: str, forms: list[str] = forms, wrong: str = wrong) -> str:
                for f in forms:
                    t = _mention(f).sub(wrong, t)
                return t
        if all(sub(t) == t for t in texts):
            continue
        messages = None if ref.messages is None else [ReferenceMessage(after=m.after, content=sub(m.content))
                                                      for m in ref.messages]
        return Probe([c.model_copy(deep=True) for c in ref.calls], sub(ref.answer or ""), 0.0, messages)
    return None


def write_mutations(pack: Pack | None, task: Task, writes: list[int], seed: int = 0) -> Iterator[list[ToolCall]]:
    """The reference with one argument of one write call (indexes ``writes``, the last first) changed within
    its schema, seeded; at most MUTATE_TRIES of them."""
    rng = random.Random(f"{task.id}:write:{seed}")
    calls = task.reference.calls
    tried = 0
    for i in writes:
        leaves = _leaves(calls[i].args)
        rng.shuffle(leaves)
        for path in leaves:
            if tried >= MUTATE_TRIES:
                return
            node: Any = calls[i].args
            for key in path:
                node = node[key]
            wrong = _mutate_value(node, rng, _schema_at(pack, calls[i].tool, path))
            tried += 1
            yield [*calls[:i], _with_leaf(calls[i], path, wrong), *calls[i + 1:]]


# ------------------------------------------------------------------ the probes a task's shape calls for


def shaped_probes(pack: Pack | None, task: Task, changes: bool | None) -> Iterator[tuple[str, Probe | str]]:
    """(name, probe) for the probes that ``task``'s shape calls for, given whether its reference changed the
    database (``changes``; None: the verifier reports no change set); (name, reason) for one that cannot
    apply. ``dropped`` probes are judged only when they alter the end state (``Probe.changes``)."""
    ref, sh = task.reference, shape(task)
    submit = pack.manifest.submit_tool if pack is not None else None
    writes = sh.end_state and changes is True
    if sh.text or any(c.tool == submit for c in ref.calls if submit):
        yield "empty", Probe([c for c in ref.calls if c.tool != submit], "", 0.0)
    if sh.text or not (sh.end_state and changes is False):
        yield "claim", Probe([], CLAIM, 0.0)
    if sh.needs_work(changes is not False):
        yield "noop", Probe([], ref.answer, 0.0, ref.messages)
    if not writes and (sh.text or not sh.end_state):  # a no-change task's reads may take any argument
        yield "mutated", said_mutation(task) or Probe(*mutate(task, submit), 0.0, ref.messages)
    if writes:
        tried = [i for i, c in enumerate(ref.calls) if c.tool != submit][::-1][:DROP_TRIES]
        for i in tried:
            yield f"dropped:{i}", Probe([c for k, c in enumerate(ref.calls) if k != i], ref.answer, 0.0,
                                        _shift(ref.messages, i), changes=True)
    for k, call in enumerate(ref.forbidden or []):
        yield f"forbidden:{k}", Probe(_with_extra(list(ref.calls), [call], submit), ref.answer, 0.0,
                                      _shift(ref.messages, _insert_at(ref.calls, submit), +1), changes=True)
    if any(kind == "confirmed" for kind, _ in sh.parts):
        yield "blanket-consent", blanket_consent(task)
    if sh.conversational:
        yield from never_asked(task)


BLANKET = "Shall I proceed with whatever is needed once I have these?"
"""The one consent question of ``blanket-consent``, asked before anything is described."""


_KIT_LOCK = threading.Lock()


def _kit() -> Any:
    """The verifier kit (stdlib only), loaded from the bundled copy the sandboxes run: the gate reads consent
    and names actions exactly as the ``confirmed`` verifier does. Loaded under a lock: gates run in threads, and
    two half-loaded copies of the package would each miss the submodules the other imported."""
    with _KIT_LOCK:
        return load_module(bundled("verifiers") / "envgen_verifiers" / "__init__.py", "envgen_kit")


def blanket_consent(task: Task) -> Probe | str:
    """The issue-29 attack on ``confirmed``: every question of the reference in one opening message, ending
    with one blanket consent question (``BLANKET``), then the reference's calls with no description of them
    (messages that ask for consent, or state an action of a write the ``confirmed`` part lists, dropped)."""
    kit = _kit()
    writes, verbs = {}, {}
    for kind, args in shape(task).parts:
        if kind == "confirmed":
            writes.update(args.get("writes") or {})
            verbs.update(args.get("verbs") or {})
    ref = task.reference
    listed = {c.tool for c in ref.calls if c.tool in writes}
    if not listed:
        return "the reference makes no change the confirmed part lists"
    actions = {t: kit.procedure.action_pattern(kit.procedure.verbs_for(t, verbs.get(t))) for t in sorted(listed)}
    calls = [c for c in ref.calls if c.tool in listed]

    def describes(text: str) -> bool:
        """Asks for consent, states a listed action, or names one with its call's values (even as a question)."""
        if kit.dialogue.asks_agreement(text):
            return True
        statements = [s for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip() and not s.rstrip().endswith("?")]
        if any(a.search(s) for a in actions.values() for s in statements):
            return True
        return any(not kit.procedure.describes(text, c.model_dump(), writes[c.tool] or [],
                                               kit.procedure.verbs_for(c.tool, verbs.get(c.tool)), [])
                   for c in calls)

    asked = [m.content for m in ref.messages or [] if not describes(m.content)]
    return Probe(list(ref.calls), ref.answer, 0.0, [ReferenceMessage(after=0, content=" ".join([*asked, BLANKET]))])


def _shift(messages: list[ReferenceMessage] | None, at: int, by: int = -1) -> list[ReferenceMessage] | None:
    """Reference messages kept in place around a call removed at index ``at`` (``by`` -1) or ``by`` calls
    inserted there."""
    if messages is None:
        return None
    return [ReferenceMessage(after=max(0, m.after + by) if m.after > at else m.after, content=m.content)
            for m in messages]


def never_asked(task: Task) -> Iterator[tuple[str, Probe | str]]:
    """The reference with every hidden fact of the user replaced by a wrong value where it reaches a call or
    the answer, and no message to the user."""
    assert task.user is not None
    opening = " ".join([*(m.content for m in task.prompt), task.user.opening or ""])  # what the agent is told
    ref = task.reference
    text = json.dumps([c.model_dump() for c in ref.calls], ensure_ascii=False) + "\n" + ref.answer
    rng = random.Random(f"{task.id}:never-asked")
    swaps = {}
    for fact in task.user.facts:
        value = fact.value.strip()
        if value and value not in opening and _mention(value).search(text):
            swaps[value] = str(_mutate_value(value, rng))
    if not swaps:
        yield "never-asked", "no hidden fact of the user reaches a call or the answer"
        return

    def swapped(s: str) -> str:
        for value, wrong in swaps.items():
            s = _mention(value).sub(wrong, s)
        return s

    calls = [ToolCall.model_validate(_walk(c.model_dump(), swapped)) for c in ref.calls]
    yield "never-asked", Probe(calls, swapped(ref.answer), 0.0)


def _mention(value: str) -> re.Pattern:
    return re.compile(r"(?<![\w])" + re.escape(value) + r"(?![\w])", re.I)


def _walk(obj: Any, fn) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: (_walk(v, fn) if k != "tool" else v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_walk(v, fn) for v in obj]
    return obj


def _answer_args(task: Task) -> dict | None:
    """The answer check of a final-text verifier (a rubric's deterministic part), else None."""
    args = task.verifier.args or {}
    if task.verifier.kind == "rubric":
        args = args.get("answer")
    return args if task.verifier.kind in FINAL_TEXT_KINDS and isinstance(args, dict) else None


_ANSWER_LINE = re.compile(r"^\W*(?:final answer|answer)\W*[:：]\s*(\S(?:.*\S)?)\s*$", re.I)
_ID = re.compile(r"\b([A-Z]{1,3})-(\d{2,})\b")
_NUM = re.compile(r"(?<![\w.,:-])\d[\d,]*(?:\.\d+)?(?![\w:])")


def _slots(task: Task, hidden: Path | None) -> list[tuple[str, int, int, list[str]]]:
    """Where the reference's final text states its answer, and wrong values of the same type:
    (kind, start, end, wrong values). For final-text verifiers the expected value (or an alias); for
    ``said`` parts each fact."""
    text = task.reference.answer or ""
    rng = random.Random(f"{task.id}:slots")
    args = _answer_args(task)
    said = _said_facts(task)
    if said:  # one slot per fact (a fact with several values: its first value the text states)
        slots: dict[int, list] = {}
        for f in said:
            found = [] if f["group"] in slots else _fact_slot(text, f, rng)
            if found:
                slots[f["group"]] = found
        return [s for group in slots.values() for s in group]
    if args is not None:
        exp = args.get("expected")
        numeric = args.get("mode") == "numeric" or (args.get("mode", "auto") == "auto" and isinstance(
            exp, (int, float)) and not isinstance(exp, bool))
        forms = ([f"{float(exp):,.{_decimals(exp)}f}", f"{float(exp):.{_decimals(exp)}f}"] if numeric else
                 [str(exp), *map(str, args.get("aliases") or [])])
        at = max(((text.rfind(f), f) for f in forms if f), default=(-1, ""))
        if at[0] < 0:
            return []
        start, end = at[0], at[0] + len(at[1])
        if numeric:
            return [("number", start, end, _wrong_numbers(float(exp), _decimals(exp)))]
        return [("name", start, end, _wrong_names(task, args, hidden, rng))]
    if task.verifier.kind != "program":
        return []
    line0 = text.rstrip().rfind("\n") + 1
    line = text[line0:]
    out = []
    ids = list(_ID.finditer(line))
    if ids:
        m = ids[-1]
        n, width = int(m.group(2)), len(m.group(2))
        # written as an agent might: lower case, a non-breaking hyphen (U+2011); the same id to a careful reader
        wrong = [f"{m.group(1).lower()}\u2011{k:0{width}d}" for k in range(max(1, n - 3), n + 4) if k != n]
        out.append(("id", line0 + m.start(), line0 + m.end(), wrong))
    nums = [m for m in _NUM.finditer(line) if not any(i.start() <= m.start() < i.end() for i in ids)]
    if nums:
        m = nums[-1]
        dec = len(m.group().partition(".")[2])
        out.append(("number", line0 + m.start(), line0 + m.end(),
                    _wrong_numbers(float(m.group().replace(",", "")), dec)))
    marked = _ANSWER_LINE.match(line)
    if not out and marked:  # "Answer: <a name>": the value after the marker
        value = marked.group(1)
        out.append(("name", line0 + marked.start(1), line0 + marked.end(1), _garbled(value)))
    return out


def _said_number(fact: dict) -> float | None:
    """The value of a ``said`` fact graded as a number (as the kit reads it: a number, or in mode auto a
    string that is one amount, "8276.23", "$8,276.23", but not a long or zero-led digit string: an id)."""
    exp, mode = fact.get("expected"), fact.get("mode", "auto")
    if isinstance(exp, bool) or mode == "exact":
        return None
    if isinstance(exp, (int, float)):
        return float(exp)
    text = str(exp).strip()
    digits = text.isdigit() and (len(text) >= 7 or (len(text) > 1 and text[0] == "0"))
    m = re.fullmatch(r"[-+]?\s*[$\u20ac\u00a3\u00a5]?\s*(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?\s*"
                     r"(?:[$\u20ac\u00a3\u00a5]|usd|eur|gbp)?", text, re.I)
    if m is None or (digits and mode == "auto"):
        return None
    return float(m.group(1).replace(",", "") + (m.group(2) or "")) * (-1 if text.startswith("-") else 1)


def _said_facts(task: Task) -> list[dict]:
    """The facts of the task's ``said`` parts as dicts; a fact with several values gives each value (its
    candidates kept), ``group`` saying which fact it came from."""
    facts = [dict(f) if isinstance(f, dict) else {"expected": f}
             for kind, a in shape(task).parts if kind == "said" for f in a.get("facts") or []]
    out = []
    for group, f in enumerate(facts):
        values = f["expected"] if isinstance(f.get("expected"), list) else [f.get("expected")]
        out += [{**f, "expected": v, "aliases": [] if len(values) > 1 else f.get("aliases") or [], "group": group}
                for v in values]
    return out


def _fact_slot(text: str, fact: dict, rng: random.Random) -> list[tuple[str, int, int, list[str]]]:
    """The last mention of a ``said`` fact in ``text`` (numbers by value, names as written or an alias) and
    wrong values of its type: the fact's other known values (``candidates``) first; for a name with digits
    (a tracking number, a date), neighbours of the same shape."""
    exp = fact.get("expected")
    others = [str(c) for c in fact.get("candidates") or [] if str(c).casefold() != str(exp).casefold()]
    value = _said_number(fact)
    if value is not None:
        hits = [m for m in _NUM.finditer(text) if abs(float(m.group().replace(",", "")) - value) < 1e-9]
        if not hits:
            return []
        m = hits[-1]
        dec = len(m.group().partition(".")[2])
        wrong = _wrong_numbers(value, dec)
        return [("number", m.start(), m.end(), others[:1] + wrong if others else wrong)]
    forms = [str(exp), *map(str, fact.get("aliases") or [])]
    hits = [m for f in forms if f for m in _mention(f).finditer(text)]
    if not hits:
        return []
    m = max(hits, key=lambda h: h.start())
    shaped = _same_shape(str(exp))
    wrong = others + [w for w in shaped + _garbled(str(exp)) if w not in others]
    rng.shuffle(wrong[len(others) + len(shaped):])
    return [("name", m.start(), m.end(), wrong)]


def _same_shape(value: str) -> list[str]:
    """``value`` with its last run of digits moved by one to three ("1Z98062167" -> "1Z98062168",
    "2025-05-03" -> "2025-05-04"): wrong values a reader cannot tell from the right one by their form."""
    runs = list(re.finditer(r"\d+", value))
    if not runs:
        return []
    r = runs[-1]
    n, width = int(r.group()), len(r.group())
    return [value[:r.start()] + f"{n + k:0{width}d}" + value[r.end():] for k in (1, 2, 3, -1) if n + k >= 0
            and len(f"{n + k:0{width}d}") == width]


def _garbled(name: str) -> list[str]:
    """Values of the same shape that are not ``name``, for verifiers that know no other names ("505" gives
    numbers, "Lima" names)."""
    word = re.sub(r"\W", "", name) or "x"
    if word.isdigit():
        return [str(int(word) * 2 + 1)] + [str(int(word) + k) for k in (-3, -2, -1, 1, 2, 3) if int(word) + k >= 0]
    out = [w.capitalize() for w in (word[::-1], word[1:] + word[0], word[::-1] + "a", word + "ia", "Nova " + word)]
    return [w for w in dict.fromkeys(out) if w.casefold() != name.casefold()]


def _decimals(v: Any) -> int:
    return 0 if float(v).is_integer() else len(repr(float(v)).partition(".")[2])


def _wrong_numbers(v: float, dec: int) -> list[str]:
    """Plausible neighbours of v, the first one far off (2v + 1, as ``mutated`` uses)."""
    fmt = (lambda x: f"{x:.{dec}f}") if dec else (lambda x: str(int(round(x))))
    step = 10 ** -dec if dec else 1
    near = [v + k * step for k in range(-5, 6) if k and (v < 0 or v + k * step >= 0)]
    return [fmt(v * 2 + 1 if v >= 0 else v * 2 - 1)] + [fmt(x) for x in near]


def _wrong_names(task: Task, args: dict, hidden: Path | None, rng: random.Random) -> list[str]:
    """Other names of the answer's type (the verifier's candidates), none of them the expected one or named in
    the prompt; a garbled name when the verifier knows no candidates."""
    cands = args.get("candidates")
    if isinstance(cands, str) and hidden is not None and (hidden / cands).is_file():
        cands = (hidden / cands).read_text(encoding="utf-8").splitlines()
    golds = {str(g).casefold() for g in [args.get("expected"), *(args.get("aliases") or [])]}
    asked = " ".join(str(m.content) for m in task.prompt).casefold()
    pool = sorted({c.strip() for c in cands or [] if isinstance(c, str) and c.strip()
                   and c.strip().casefold() not in golds and c.strip().casefold() not in asked})
    if not pool:
        return _garbled(str(args.get("expected", "x")))
    return rng.sample(pool, min(3, len(pool)))


def text_probes(sandbox: Sandbox, pack: Pack, task: Task) -> Iterator[tuple[str, Probe | str]]:
    """The hedge, enumeration and several-answer probes for each graded slot; for a ``program`` verifier a
    slot is graded when the reference with its value changed (every mention of it) scores below 1. The
    reference's messages to a user say the wrong value wherever they state the right one."""
    hidden = pack.hidden_dir if pack.root is not None else None
    slots = _slots(task, hidden)
    said_slots = bool(_said_facts(task)) and task.verifier.kind != "program"
    ref = task.reference
    text, calls = ref.answer or "", ref.calls
    for kind, a, b, wrong in slots:
        def said(value: str) -> str:
            return text[:a] + value + text[b:]

        right = text[a:b]
        mention = re.compile(r"(?<![\w.,-])" + re.escape(right) + r"(?![\w])")
        if task.verifier.kind == "program":  # graded here? the text with every mention of the value changed
            elsewhere = mention.sub(lambda _: wrong[0], text)
            if replay(sandbox, task, calls, elsewhere, ref.messages).verdict.reward >= 1.0:
                continue
        messages = None if ref.messages is None else [
            ReferenceMessage(after=m.after, content=mention.sub(lambda _: wrong[0], m.content)) for m in ref.messages]
        items = wrong[1:4] + [right] + wrong[4:6] if kind != "name" else wrong[:1] + [right] + wrong[1:]
        suffix = f":{kind}" if len(slots) > 1 else ""
        for name, answer in (("hedge-first", said(f"{wrong[0]} or {right}")),
                             ("hedge-last", said(f"{right} or {wrong[0]}")),
                             ("enumeration", said("one of: " + ", ".join(items))),
                             ("answer-lines", said(wrong[0]) + "\n" + text)):
            yield name + suffix, Probe(calls, answer, 0.0, messages)
        if said_slots:
            yield from _said_probes(task, text, a, b, kind, wrong, suffix)


def _said_probes(task: Task, text: str, a: int, b: int, kind: str, wrong: list[str],
                 suffix: str) -> Iterator[tuple[str, Probe | str]]:
    """The reference (messages and all) with a sentence added to its final text that leaves the user with
    another value: ``restated`` (a second value beside it: "The system also shows W for this."),
    ``corrected`` ("Correction: it is W.") and ``retracted`` ("Sorry, it is not V."), each of which must
    score 0 for a ``said`` fact. A name the grader cannot tell another value of (a lowercase phrase such
    as "shipped", with no candidates) does not meet ``restated``."""
    ref = task.reference
    unit = text[a - 1] if a and text[a - 1] in "$\u20ac\u00a3#" else ""
    after = re.match(r"\s*(?:[\u20ac$\u00a3]|(?:euros?|dollars?|usd|eur|gbp|%)(?!\w))", text[b:], re.I)
    tail = after.group() if kind == "number" and after else ""
    right, other = unit + text[a:b] + tail, unit + wrong[0] + tail
    known = kind == "number" or right[:1].isupper() or re.search(r"\d", right) or wrong[0] in [
        str(c) for f in _said_facts(task) for c in f.get("candidates") or []]
    end = text.rstrip() + "\n"
    for name, added in (("restated", f"The system also shows {other} for this."),
                        ("corrected", f"Correction: it is {other}."),
                        ("retracted", f"Sorry, it is not {right}.")):
        if name == "restated" and not known:
            yield name + suffix, "the fact is a phrase with no other value of its kind to tell apart"
            continue
        yield name + suffix, Probe(ref.calls, end + added, 0.0, ref.messages)


def _run(sandbox: Sandbox, task: Task, probe: Probe) -> Episode:
    return replay(sandbox, task, probe.calls, probe.answer, probe.messages)


def _failure(name: str, ep: Episode, want: float) -> str:
    failed = [c for c in ep.calls if not c["ok"]]
    why = f"{name} scored {ep.verdict.reward:g}, expected {want:g}"
    if failed and want == 1.0:
        why += f"; tool error in {failed[0]['tool']}: {failed[0]['content'][:200]}"
    elif ep.verdict.details.get("error") or ep.verdict.details.get("reason"):
        why += f"; {str(ep.verdict.details.get('error') or ep.verdict.details['reason'])[:200]}"
    return why


def gate(sandbox: Sandbox, pack: Pack, task: Task) -> GateResult:
    """Run every probe of `task` on `sandbox`; the first one that scores wrong rejects the task."""
    result = GateResult(task.id, False)
    scores, skipped = result.probes, result.not_applicable
    ref_ep: Episode | None = None
    ref = task.reference
    for name in ("reference", "reference-again"):
        probe = Probe(ref.calls, ref.answer, 1.0, ref.messages)
        ep = _run(sandbox, task, probe)
        scores[name] = ep.verdict.reward
        ref_ep = ref_ep or ep
        if ep.verdict.reward != probe.want:
            result.reason = _failure(name, ep, probe.want)
            return result
    assert ref_ep is not None
    base = _digest(ref_ep)
    changes = _changed(ref_ep.verdict.details or {})
    sh = shape(task)
    writes: list[int] = []
    for name, probe in itertools.chain(shaped_probes(pack, task, changes), code_probes(pack, task).items(),
                                       text_probes(sandbox, pack, task)):
        if isinstance(probe, str):
            skipped[name] = probe
            continue
        ep = _run(sandbox, task, probe)
        if probe.changes and (base is None or _digest(ep) == base):
            if name.startswith("forbidden:"):  # e.g. the tool itself refuses it
                skipped[name] = "the call alters nothing beyond what the reference does"
            continue  # the same end state as the reference: not a wrong trajectory
        if name.startswith("dropped:"):
            writes.append(int(name.split(":")[1]))
        scores[name] = ep.verdict.reward
        if ep.verdict.reward != probe.want:
            result.reason = _failure(name, ep, probe.want)
            return result
    if sh.end_state and changes is True:
        if not writes:
            skipped["dropped"] = "no call of the reference alters the end state when dropped"
        for calls in write_mutations(pack, task, writes or list(range(len(ref.calls)))[::-1]):
            ep = _run(sandbox, task, Probe(calls, ref.answer, 0.0, ref.messages))
            if _digest(ep) == base:
                continue
            scores["mutated"] = ep.verdict.reward
            if ep.verdict.reward != 0.0:
                result.reason = _failure("mutated", ep, 0.0)
                return result
            break
        else:
            skipped["mutated"] = "no argument change of a write call alters the end state"
    score, what = collateral(sandbox, pack, task, ref_ep.verdict.details)
    if score is None:
        skipped["collateral"] = what
    else:
        scores["collateral"] = score
        if score != 0.0:
            result.reason = f"collateral scored {score:g}, expected 0; {what}"
            return result
    result.passed = True
    return result


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

    A ``state`` or ``no_write`` verifier, one that declares ``changes``, or a composite with one such part,
    reports its change set itself. A ``program``
    verifier over a pack whose env/ holds a SQLite database (e.g. one built before whole-database checks) runs
    with a report-only ``changes`` added: the reward is its own, the change set shows what was written.
    """
    v = task.verifier
    if v.kind in ("state", "no_write") or (isinstance(v.args.get("changes"), dict) and v.args["changes"].get("db")):
        return task
    if v.kind == "composite" and sum(p.get("kind") in ("state", "no_write") or isinstance(
            (p.get("args") or {}).get("changes"), dict) for p in v.args.get("parts") or []) == 1:
        return task  # its one database-checking part's change set is the composite's details["changes"]
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


def _insert_at(calls: list[ToolCall], submit_tool: str | None) -> int:
    """Where an extra call goes: before the reference's last submit call (at the end when it has none)."""
    return max((i for i, c in enumerate(calls) if submit_tool and c.tool == submit_tool), default=len(calls))


def _with_extra(calls: list[ToolCall], extra: list[ToolCall], submit_tool: str | None) -> list[ToolCall]:
    """The reference with ``extra`` inserted before its last submit call (appended when it has none)."""
    at = _insert_at(calls, submit_tool)
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
        ep = replay(sandbox, probe, _with_extra(list(ref.calls), extra, submit), ref.answer,
                    _shift(ref.messages, _insert_at(ref.calls, submit), len(extra)))
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

# ---------------------------------------------------------------- code tasks: taking the test run over

FORCE_PASS = '''"""Reports every test as passed (an envgen red-team probe: no verifier may reward it)."""
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    report.outcome = "passed"
    report.longrepr = None
'''


def file_diff(path: str, old: str | None, new: str) -> str:
    """A git-style diff turning ``old`` (None: no file) into ``new``."""
    a, b = (old or "").splitlines(keepends=True), new.splitlines(keepends=True)
    head = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if old is None else "")
    body = difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{path}", f"b/{path}")
    return head + "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in body)


def ini_addopts(text: str | None, section: str, opts: str) -> str:
    """``text`` with ``opts`` put first in ``[section]``'s addopts (section and key added when missing)."""
    lines = (text or "").splitlines(keepends=True)
    head = next((i for i, ln in enumerate(lines) if ln.strip() == f"[{section}]"), None)
    if head is None:
        sep = "" if not lines or lines[-1].endswith("\n") else "\n"
        return (text or "") + sep + ("\n" if lines else "") + f"[{section}]\naddopts = {opts}\n"
    for i in range(head + 1, len(lines)):
        if lines[i].startswith("["):
            break
        m = re.match(r"^addopts\s*[=:]", lines[i])
        if m:
            lines[i] = lines[i][:m.end()] + f" {opts}" + lines[i][m.end():]
            return "".join(lines)
    lines.insert(head + 1, f"addopts = {opts}\n")
    return "".join(lines)


def toml_addopts(text: str, opts: list[str]) -> str:
    """pyproject.toml with ``opts`` first in [tool.pytest.ini_options] addopts (string or array form)."""
    lines = text.splitlines(keepends=True)
    head = next((i for i, ln in enumerate(lines) if ln.strip() == "[tool.pytest.ini_options]"), None)
    if head is None:
        sep = "" if not lines or lines[-1].endswith("\n") else "\n"
        return text + sep + f"\n[tool.pytest.ini_options]\naddopts = {_toml_str(' '.join(opts))}\n"
    for i in range(head + 1, len(lines)):
        if lines[i].lstrip().startswith("["):
            break
        m = re.match(r"^(\s*addopts\s*=\s*)(\[|\"\"\"|\'\'\'|\"|\')", lines[i])
        if m:
            opener = m.group(2)
            add = "".join(f"{_toml_str(o)}, " for o in opts) if opener == "[" else " ".join(opts) + " "
            lines[i] = lines[i][:m.end()] + add + lines[i][m.end():]
            return "".join(lines)
    lines.insert(head + 1, f"addopts = {_toml_str(' '.join(opts))}\n")
    return "".join(lines)


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def config_patch(read, opts: list[str]) -> str:
    """Edits of every pytest configuration file at the task's base putting ``opts`` first in addopts;
    setup.cfg is edited (or created) always, pyproject.toml whenever it exists."""
    joined = " ".join(shlex.quote(o) for o in opts)
    out = ""
    for path, section in (("pytest.ini", "pytest"), ("tox.ini", "pytest")):
        old = read(path)
        if old is not None and (path == "pytest.ini" or "[pytest]" in old):
            out += file_diff(path, old, ini_addopts(old, section, joined))
    old = read("setup.cfg")
    out += file_diff("setup.cfg", old, ini_addopts(old, "tool:pytest", joined))
    old = read("pyproject.toml")
    if old is not None:
        out += file_diff("pyproject.toml", old, toml_addopts(old, opts))
    return out


FORGERY_PLACEMENTS = ("append", "go-file", "java-static")


def forgery_patch(read, framework: str, reference_patch: str, tok: str) -> str | None:
    """A library-only patch that plants ``framework``'s forgery payload (``envs/code/forgeries``) in the
    first source file the reference patch changes that is not a test (``read(path)``: its text at the
    task's base); None when the framework has no payload or the reference changes no such file.

    Payload files start with ``placement: append`` (the payload appended to that file),
    ``placement: go-file`` (a new file in its directory, in its package) or ``placement: java-static``
    (a static initializer with the payload as its body, first in its first class)."""
    path = bundled("envs") / "code" / "forgeries" / f"{framework}.txt"
    if not path.is_file():
        return None
    head, _, payload = path.read_text(encoding="utf-8").partition("\n")
    placement = head.removeprefix("placement:").strip()
    if placement not in FORGERY_PLACEMENTS:
        raise ValueError(f"{path}: first line must be 'placement: ' + one of {FORGERY_PLACEMENTS}, got {head!r}")
    payload = payload.replace("{tok}", tok)
    test_like = re.compile(r"(^|/)(tests?|testing|__tests__|spec|testdata)/|(^|/)test_[^/]*$|_test\.\w+$|"
                           r"\.(test|spec)\.\w+$|Test\.(java|php|kt)$|Tests?\.\w+$")
    exts = {"append": (".py", ".js", ".cjs", ".mjs", ".ts", ".tsx", ".jsx", ".php", ".c", ".cc", ".cpp", ".cxx"),
            "go-file": (".go",), "java-static": (".java",)}[placement]
    for code_file in _patch_paths(reference_patch):
        old = read(code_file)
        if old is None or test_like.search(code_file) or not code_file.endswith(exts):
            continue
        if placement == "append":
            lead = "" if old.endswith("\n") else "\n"
            if code_file.endswith(".php") and old.rfind("?>") > old.rfind("<?php"):
                lead += "<?php\n"  # the file ends outside PHP code: the payload would be printed, not run
            return file_diff(code_file, old, old + lead + "\n" + payload)
        if placement == "go-file":
            pkg = re.search(r"^package\s+(\w+)", old, re.M)
            if not pkg:
                continue
            folder = code_file.rpartition("/")[0]
            new_file = f"{folder + '/' if folder else ''}zz_{tok}.go"
            return file_diff(new_file, None, f"package {pkg.group(1)}\n\n{payload}")
        cls = re.search(r"^[^\n/*]*\b(?:class|enum)\s+\w+[^{;]*\{", old, re.M)
        if cls:
            at = cls.end()
            body = "\n".join("        " + ln if ln.strip() else ln for ln in payload.rstrip().splitlines())
            return file_diff(code_file, old, old[:at] + "\n    static {\n" + body + "\n    }\n" + old[at:])
    return None


def _patch_paths(patch: str) -> list[str]:
    """The new-side paths of a patch's file diffs, in order."""
    out = []
    for line in patch.splitlines():
        if line.startswith("+++ ") and not line.startswith("+++ /dev/null"):
            p = line[4:].split("\t")[0].strip()
            p = p[2:] if p[:2] == "b/" else p
            if p not in out:
                out.append(p)
    return out


def code_probes(pack: Pack, task: Task) -> dict[str, Probe | str]:
    """Submissions that take a code task's test run over instead of fixing anything (``tests`` verifiers);
    a probe that cannot apply is the reason why (``GateResult.not_applicable``)."""
    submit = pack.manifest.submit_tool
    if task.verifier.kind != "tests" or not submit:
        return {}
    args = task.verifier.args
    git_dir = str(pack.env_dir / args.get("git_dir", "repo.git"))

    def read(path: str) -> str | None:
        out = subprocess.run(["git", "--git-dir", git_dir, "show", f"{args['base']}:{path}"], capture_output=True)
        return out.stdout.decode("utf-8", errors="surrogateescape") if out.returncode == 0 else None

    module = "envgen_probe_" + hashlib.sha256(task.id.encode()).hexdigest()[:8]
    files = list(args.get("files") or [])
    conftests = ["conftest.py"] + [f"{d}/conftest.py" for d in {f.rsplit("/", 1)[0] for f in files if "/" in f}]
    hook = "\n\n" + FORCE_PASS.split("\n", 1)[1]
    in_conftest = "".join(file_diff(c, read(c), (read(c) or "") + hook) for c in sorted(conftests))
    tests = list(args.get("FAIL_TO_PASS") or []) + list(args.get("PASS_TO_PASS") or [])
    deselect = [a for t in tests for a in ("--deselect", t)]
    patches = {"plugin-addopts": file_diff(f"{module}.py", None, FORCE_PASS) + config_patch(read, ["-p", module]),
               "plugin-conftest": in_conftest,
               "config-only": config_patch(read, deselect)}
    framework = args.get("framework", "pytest")
    forged = forgery_patch(read, framework, task.reference.patch or "", hashlib.sha256(task.id.encode()).hexdigest()[:12])
    if forged:
        patches["forgery"] = forged
    out: dict[str, Probe | str] = {name: Probe([ToolCall(tool=submit, args={"patch": patch})], "Done.", 0.0)
                                   for name, patch in patches.items()}
    if not forged:
        out["forgery"] = (f"no forgery payload for {framework}" if not (bundled("envs") / "code" / "forgeries" /
                                                                         f"{framework}.txt").is_file()
                          else "the reference patch changes no source file that exists at the base")
    return out
