"""The pack: the unit that is built, checked, published and loaded.

A pack is a directory::

    pack.json     manifest (Manifest)
    tasks.jsonl   one Task per line
    env/          what the agent's sandbox gets: tools.py, state files, optional Dockerfile
    hidden/       what only the verifier sees (copied in after the agent's last action)
    README.md     the card, generated from the manifest

Loading validates everything and raises PackError with one line naming file, line and field.
Saving is atomic: the pack is written to a temporary sibling directory and renamed into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, Iterable, Literal

import jsonschema
from pydantic import (BaseModel, ConfigDict, Field, SerializationInfo, ValidationError, field_validator,
                      model_serializer, model_validator)

from ..errors import PackError
from ..paths import cache_dir

SCHEMA_VERSION = 1
MANIFEST, TASKS, ENV, HIDDEN, CARD = "pack.json", "tasks.jsonl", "env", "hidden", "README.md"
VERIFIER_KINDS = ("answer", "state", "program", "rubric", "tests", "said", "no_write", "composite", "confirmed",
                  "transferred", "identified")
"""Verifier kinds the kit in ``verifiers/`` implements; a task naming another kind does not load."""

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_INSTRUCTIONS = 65_536
"""Characters a pack's ``instructions`` may hold: room for a long domain policy (tau-bench's run 5-20 K)
that still leaves most of a model's context to the episode."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


EVERY_FIELD = {"every_field": True}
"""``model_dump(context=EVERY_FIELD)`` also dumps the ``_SparseModel`` fields left at their defaults."""


class _SparseModel(_Model):
    """A model whose fields added after packs were first written (``_sparse``) are dumped only when they differ
    from their defaults, so a pack that does not use them is written, and hashed, as before they existed."""

    _sparse: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _leave_out_defaults(self, handler, info: SerializationInfo) -> dict[str, Any]:
        out = handler(self)
        if not (info.context or {}).get("every_field"):
            fields = type(self).model_fields
            for k in self._sparse:
                if k in out and out[k] == fields[k].get_default(call_default_factory=True):
                    del out[k]
        return out


class ToolCall(_Model):
    """One tool call: the tool's name and its JSON arguments."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class ReferenceMessage(_Model):
    """A message the reference agent writes to the simulated user (no tool call), once ``after`` of the
    reference's calls are made (0: before the first)."""

    after: int = Field(0, ge=0)
    content: str


class Reference(_Model):
    """The known-good solution, never shown to the agent: tool calls to replay, then a final answer."""

    calls: list[ToolCall] = Field(default_factory=list)
    answer: str = ""
    patch: str | None = None
    """The gold patch of a code task (unified diff against the task's repository); None elsewhere."""
    messages: list[ReferenceMessage] | None = None
    """User tasks: what the reference agent says to the simulated user between its calls (the oracle plays
    them in order, one per turn, each placed before call ``after``); the final answer comes last."""
    forbidden: list[ToolCall] | None = None
    """Calls a plausible wrong trajectory makes and the task must not (the refund the policy forbids, the
    cancellation of a shipped order): the red-team gate adds each to the reference and requires reward 0
    whenever it changes the end state. None (not written) where there are none, so packs without them hash
    as before the field existed."""

    @model_validator(mode="after")
    def _messages_within_calls(self) -> Reference:
        if not self.messages:
            return self
        for i, m in enumerate(self.messages):
            if m.after > len(self.calls):
                raise ValueError(f"messages[{i}].after: {m.after} is past the {len(self.calls)} reference calls")
        if [m.after for m in self.messages] != sorted(m.after for m in self.messages):
            raise ValueError("messages: 'after' must not decrease (list them in the order they are said)")
        return self


def _finite(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and v == v and v not in (float("inf"), float("-inf"))


def _check_said(args: dict[str, Any]) -> None:
    facts = args.get("facts")
    if not isinstance(facts, list) or not facts:
        raise ValueError("args.facts: a said verifier needs a non-empty list of facts (values or {expected, aliases})")
    for i, f in enumerate(facts):
        where = f"args.facts[{i}]"
        if isinstance(f, dict):
            extra = set(f) - {"expected", "aliases", "mode", "candidates", "rel_tol", "abs_tol", "accents", "name"}
            if extra:
                raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(extra))}")
            if "expected" not in f:
                raise ValueError(f"{where}.expected: missing required field")
            value = f["expected"]
            if f.get("mode", "auto") not in ("auto", "exact", "numeric"):
                raise ValueError(f"{where}.mode: expected auto, exact or numeric, got {f['mode']!r}")
            for key in ("aliases", "candidates"):
                if key in f and not isinstance(f[key], list):
                    raise ValueError(f"{where}.{key}: must be a list")
            for key in ("rel_tol", "abs_tol"):
                if key in f and (not _finite(f[key]) or f[key] < 0):
                    raise ValueError(f"{where}.{key}: must be a number >= 0, got {f[key]!r}")
            if f.get("mode") == "numeric":
                for v in value if isinstance(value, list) else [value]:
                    if not _finite(v) and not (isinstance(v, str) and _NUMBER_TEXT.fullmatch(v.strip())):
                        raise ValueError(f"{where}.expected: mode numeric needs a number (or a string that is "
                                         f"one, e.g. \"$8,276.23\"), got {v!r}")
        else:
            value = f
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value:
            raise ValueError(f"{where}: a fact with several values lists at least one")
        for v in values:
            if not (isinstance(v, str) and v.strip()) and not _finite(v):
                raise ValueError(f"{where}: a fact is a non-empty string, a number or a list of them, got {v!r}")
    if "evidence" in args and not isinstance(args["evidence"], list):
        raise ValueError("args.evidence: must be a list of strings")


_NUMBER_TEXT = re.compile(r"[-+]?\s*[$\u20ac\u00a3\u00a5]?\s*\d[\d.,'\u00a0\u202f ]*\s*"
                          r"(?:[$\u20ac\u00a3\u00a5]|usd|eur|gbp)?", re.I)
"""A number written as text ("8276.23", "$8,276.23"): what ``said``'s numeric mode reads from a string."""


def _check_no_write(args: dict[str, Any]) -> None:
    dbs = args.get("dbs") if "dbs" in args else [args["db"]] if "db" in args else []
    jsons = args.get("jsons") if "jsons" in args else [args["json"]] if "json" in args else []
    if not isinstance(dbs, list) or not isinstance(jsons, list) or not (dbs or jsons) or \
            not all(isinstance(d, str) and d for d in dbs + jsons):
        raise ValueError("args.db: a no_write verifier needs db (a database path under env/) or dbs (a list of them), "
                         "or json / jsons (JSON state files under env/)")
    if "ignore" in args and not isinstance(args["ignore"], list):
        raise ValueError("args.ignore: must be a list of table.column patterns (JSON pointer patterns for json)")


def _names(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x for x in v)


def _check_confirmed(args: dict[str, Any]) -> None:
    extra = set(args) - {"writes", "verbs"}
    if extra:
        raise ValueError(f"args: unknown field(s) {', '.join(sorted(extra))} (a confirmed verifier has writes, verbs)")
    writes = args.get("writes")
    if not isinstance(writes, dict) or not writes:
        raise ValueError("args.writes: a confirmed verifier needs {tool: [argument names its description must name]}")
    for tool, keys in writes.items():
        if not _names(keys):
            raise ValueError(f"args.writes.{tool}: must be a list of argument names (may be empty), got {keys!r}")
    verbs = args.get("verbs", {})
    if not isinstance(verbs, dict):
        raise ValueError("args.verbs: must be {tool: [words naming its action]}")
    for tool, words in verbs.items():
        if tool not in writes:
            raise ValueError(f"args.verbs.{tool}: not a tool of args.writes")
        if not _names(words) or not words:
            raise ValueError(f"args.verbs.{tool}: must be a non-empty list of words, got {words!r}")


def _check_transferred(args: dict[str, Any]) -> None:
    extra = set(args) - {"tool", "args"}
    if extra:
        raise ValueError(f"args: unknown field(s) {', '.join(sorted(extra))} (a transferred verifier has tool, args)")
    if not isinstance(args.get("tool"), str) or not args["tool"]:
        raise ValueError("args.tool: a transferred verifier needs the name of the hand-off tool")
    if not isinstance(args.get("args", {}), dict):
        raise ValueError("args.args: must be an object of the argument values the hand-off call must have")


def _check_identified(args: dict[str, Any]) -> None:
    extra = set(args) - {"auth", "access", "customer", "id_key", "told"}
    if extra:
        raise ValueError(f"args: unknown field(s) {', '.join(sorted(extra))} "
                         "(an identified verifier has auth, access, customer, id_key, told)")
    if not _names(args.get("auth")) or not args["auth"]:
        raise ValueError("args.auth: an identified verifier needs a non-empty list of the tools that verify identity")
    if not _names(args.get("access")):
        raise ValueError("args.access: must be a list of the tools that reach the customer's records")
    if args.get("customer") is not None and not (isinstance(args["customer"], str) and args["customer"]):
        raise ValueError(f"args.customer: must be the customer's id (a string) or null, got {args['customer']!r}")
    if "id_key" in args and not (isinstance(args["id_key"], str) and args["id_key"]):
        raise ValueError("args.id_key: must be the name of the field of an auth result that holds the id")
    if not _names(args.get("told", [])):
        raise ValueError("args.told: must be a list of argument names whose values the user must have said")


_PROCEDURE_CHECKS = {"confirmed": _check_confirmed, "transferred": _check_transferred,
                     "identified": _check_identified}


def _check_composite(args: dict[str, Any]) -> None:
    mode = args.get("mode", "all")
    if mode not in ("all", "weighted"):
        raise ValueError(f"args.mode: a composite is 'all' or 'weighted', got {mode!r}")
    extra = set(args) - {"mode", "parts", "threshold"}
    if extra:
        raise ValueError(f"args: unknown field(s) {', '.join(sorted(extra))} (a composite has mode, parts, threshold)")
    parts = args.get("parts")
    if not isinstance(parts, list) or not parts:
        raise ValueError("args.parts: a composite needs a non-empty list of parts {kind, args, weight, name}")
    if "threshold" in args:
        thr = args["threshold"]
        if mode != "weighted":
            raise ValueError("args.threshold: only a weighted composite has a threshold")
        if not _finite(thr) or not 0 <= thr <= 1:
            raise ValueError(f"args.threshold: must be a number in [0, 1], got {thr!r}")
    names: set[str] = set()
    for i, p in enumerate(parts):
        where = f"args.parts[{i}]"
        if not isinstance(p, dict):
            raise ValueError(f"{where}: a part is an object {{kind, args, weight, name}}")
        extra = set(p) - {"kind", "args", "weight", "name"}
        if extra:
            raise ValueError(f"{where}: unknown field(s) {', '.join(sorted(extra))}")
        if p.get("kind") not in VERIFIER_KINDS:
            raise ValueError(f"{where}.kind: unknown kind {p.get('kind')!r} (expected one of {', '.join(VERIFIER_KINDS)})")
        if not isinstance(p.get("args", {}), dict):
            raise ValueError(f"{where}.args: must be an object")
        w = p.get("weight", 1)
        if not _finite(w) or w <= 0:
            raise ValueError(f"{where}.weight: must be a positive number, got {w!r}")
        name = str(p.get("name") or f"{p['kind']}#{i}")
        if name in names:
            raise ValueError(f"{where}.name: {name!r} repeats another part's")
        names.add(name)
        try:
            _check_args(p["kind"], p.get("args") or {})
        except ValueError as e:
            raise ValueError(f"{where}.{e}") from None


def _check_args(kind: str, args: dict[str, Any]) -> None:
    """Validate the arguments of the kinds whose shape the loader knows; ValueError names the field."""
    if kind == "said":
        _check_said(args)
    elif kind == "no_write":
        _check_no_write(args)
    elif kind == "composite":
        _check_composite(args)
    elif kind in _PROCEDURE_CHECKS:
        _PROCEDURE_CHECKS[kind](args)
    elif kind == "state" and "json" in args and not (isinstance(args["json"], str) and args["json"]):
        raise ValueError("args.json: the JSON state file's path under env/ (e.g. state/db.json)")
    elif kind in ("state", "program") and isinstance(args.get("changes"), dict):
        if not isinstance(args["changes"].get("replay", False), bool):
            raise ValueError("args.changes.replay: must be true or false")


class Verifier(_Model):
    """Which verifier of the kit judges the episode, and its task-specific arguments."""

    kind: Literal["answer", "state", "program", "rubric", "tests", "said", "no_write", "composite", "confirmed",
                  "transferred", "identified"]
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _args_shape(self) -> Verifier:
        _check_args(self.kind, self.args)
        return self


class Message(_Model):
    role: Literal["system", "user", "assistant", "tool"]
    content: str


def _regex(value: str, where: str) -> str:
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"{where}: {value!r} is not a valid regular expression ({e})") from None
    return value


class UserFact(_SparseModel):
    """Something the simulated user knows and tells only when asked."""

    _sparse: ClassVar[tuple[str, ...]] = ("asks", "withheld", "wrong")

    name: str = Field(min_length=1)
    value: str
    ask: str | None = None
    """Scripted user: a regex (searched case-insensitively) on the agent's message that asks for this fact;
    None: the scripted user never tells it (an LLM user still may, when asked)."""
    reply: str | None = None
    """Scripted user: what it says when asked (default ``My <name> is <value>.``)."""
    asks: int = Field(1, ge=1)
    """The fact is told only the ``asks``-th time the agent asks for it; before that the user says ``withheld``
    (tau2's "only give it if asked twice")."""
    withheld: str = "I'm not sure, let me check."
    """What the user says while it still holds the fact back (see ``asks``)."""
    wrong: str | None = None
    """A wrong value the user gives the first time it tells the fact (in ``reply``, ``value`` is replaced by it);
    the right one comes the next time the agent asks, or as soon as the agent says the value does not match."""

    @field_validator("ask")
    @classmethod
    def _ask(cls, v: str | None) -> str | None:
        return v if v is None else _regex(v, "ask")

    @model_validator(mode="after")
    def _wrong_differs(self) -> UserFact:
        if self.wrong is not None and self.wrong == self.value:
            raise ValueError(f"wrong: {self.wrong!r} is the right value; give the mistaken one the user says first")
        return self


class UserRule(_Model):
    """Scripted user: when the agent's message matches ``when`` (case-insensitive search), say ``reply``;
    ``stop`` ends the conversation after it."""

    when: str
    reply: str
    stop: bool = False

    @field_validator("when")
    @classmethod
    def _when(cls, v: str) -> str:
        return _regex(v, "when")


class UserConsent(_Model):
    """Scripted user: how it answers a consent question (one ``envgen_verifiers.dialogue.asks_agreement``
    recognises: "Shall I proceed?", "Is that OK with you?") whose message matches ``when``."""

    when: str
    """Regex (case-insensitive search) on the agent's message that asks, i.e. on its description of the action."""
    answer: Literal["yes", "no"] = "yes"
    reply: str | None = None
    """What the user says (default: ``AGREE`` for yes, ``DECLINE`` for no)."""
    regret: str | None = None
    """After a yes: the user's NEXT message is this text, taking the agreement back ("Actually, wait...")."""

    @field_validator("when")
    @classmethod
    def _when(cls, v: str) -> str:
        return _regex(v, "when")


class UserPreference(_Model):
    """Scripted user: a conditional answer, ``reply`` when the agent's message matches ``when`` (what the agent
    offered); each is used once, and preferences are checked before consent and facts."""

    when: str
    reply: str

    @field_validator("when")
    @classmethod
    def _when(cls, v: str) -> str:
        return _regex(v, "when")


class UserInsist(_Model):
    """Scripted user: when the agent's message matches ``when`` (a refusal), say ``reply``, at most ``times``
    times; after that the refusal is answered as any other message."""

    when: str
    reply: str
    times: int = Field(1, ge=1)

    @field_validator("when")
    @classmethod
    def _when(cls, v: str) -> str:
        return _regex(v, "when")


USER_STYLES = ("plain", "terse", "casual", "formal", "lowercase")
"""Writing styles the scripted user applies to what it says (``UserSpec.style``); fact values are kept as they
are. Any other text is a free-form style for an LLM user, which the scripted user writes as ``plain``."""

AGREE = "Yes, please go ahead."
DECLINE = "No, please don't do that."


def _one_or_many(v: Any) -> Any:
    return [v] if isinstance(v, dict) else v


class UserSpec(_SparseModel):
    """A task's simulated user (hidden: a task field the agent never sees, like ``reference``).

    ``goal``, ``persona``, ``facts``, ``consent``, ``preferences``, ``insist`` and ``style`` make an LLM user's
    system prompt; ``rules``, the facts' ``ask`` patterns, ``consent``, ``preferences``, ``insist``, ``style``,
    ``default``, ``stop``, ``closing`` and ``opening`` drive the scripted user (``envgen.episodes.users``, where
    the order in which they are tried is documented). A pack may hold defaults for all of these in
    ``Manifest.user``.
    """

    _sparse: ClassVar[tuple[str, ...]] = ("consent", "preferences", "insist", "style", "opening")
    goal: str = Field(min_length=1)
    """What the user wants from the conversation, in the user's terms."""
    persona: str = ""
    """How the user talks and behaves."""
    facts: list[UserFact] = Field(default_factory=list)
    rules: list[UserRule] = Field(default_factory=list)
    default: str = "Sorry, I don't follow. Could you ask me more specifically?"
    """Scripted user: the reply when no rule, fact or stop pattern matches."""
    stop: list[str] = Field(default_factory=list)
    """Regexes on the agent's message (case-insensitive search) after which the user says ``closing`` and ends
    the conversation (scripted user; an LLM user is told to end once its goal is met)."""
    closing: str = "Thank you, that's all I needed."
    max_replies: int | None = Field(None, ge=1)
    """The user ends the conversation with its reply number ``max_replies`` (any user kind)."""
    consent: list[UserConsent] = Field(default_factory=list)
    """Answers to consent questions, first match wins; a consent question no entry matches is answered
    ``AGREE`` (the user agrees to what it asked for)."""
    preferences: list[UserPreference] = Field(default_factory=list)
    """Conditional answers to what the agent offers (a single object is read as a list of one)."""
    insist: list[UserInsist] = Field(default_factory=list)
    """Repeated requests after a refusal (a single object is read as a list of one)."""
    style: str = "plain"
    """How the user writes: one of ``USER_STYLES`` (applied by the scripted user), or free text an LLM user
    is asked to follow."""
    opening: str | None = None
    """The user's first message in a pack whose agent speaks first (``Manifest.agent_first``): the scripted
    user says it, and TRL datasets show it; an LLM user writes its own opening from this spec instead. Unused
    when the task's prompt holds the opening."""

    @field_validator("stop")
    @classmethod
    def _stop(cls, v: list[str]) -> list[str]:
        return [_regex(x, f"stop[{i}]") for i, x in enumerate(v)]

    @field_validator("preferences", "insist", mode="before")
    @classmethod
    def _listed(cls, v: Any) -> Any:
        return _one_or_many(v)

    @field_validator("style")
    @classmethod
    def _style(cls, v: str) -> str:
        if not v.strip():
            raise ValueError(f"empty; use one of {', '.join(USER_STYLES)} or describe the style in words")
        return v

    @model_validator(mode="after")
    def _unique_facts(self) -> UserSpec:
        dup = [n for n, c in Counter(f.name for f in self.facts).items() if c > 1]
        if dup:
            raise ValueError(f"facts: names repeat: {dup}")
        return self


_USER_DEFAULTS = {k: f.get_default(call_default_factory=True) for k, f in UserSpec.model_fields.items()
                  if not f.is_required()}
"""What a UserSpec field holds when a spec leaves it out (every default is already JSON: str, list, int or None)."""


def merge_user(defaults: dict[str, Any] | None, user: dict[str, Any] | None) -> dict[str, Any] | None:
    """A task's ``user`` with the pack's defaults (``Manifest.user``) under it: field by field at the top level,
    the task's field replacing the pack's whole (a task's ``facts`` replace the pack's list, they are not
    appended). A task without ``user`` stays without one: the defaults never make a task conversational."""
    if user is None or not defaults:
        return user
    return {**defaults, **user}


class Task(_Model):
    """One task of a pack (one line of tasks.jsonl)."""

    id: str = Field(min_length=1)
    prompt: list[Message]
    """The task's opening messages: system messages (what this task adds to the pack's instructions), then at
    least one user message; in a pack whose agent speaks first (``Manifest.agent_first``) a user task's prompt
    holds only system messages (possibly none), since its user opens from its spec. Checked by ``check_prompt``."""
    tools: list[str] | None = None
    """Tool names the agent may use; None means every tool of the pack."""
    verifier: Verifier
    reference: Reference
    difficulty: int = Field(ge=0)
    """At least the number of tool calls the reference needs."""
    meta: dict[str, Any] = Field(default_factory=dict)
    stats: dict[str, Any] = Field(default_factory=dict)
    user: UserSpec | None = None
    """The simulated user of a conversational task (hidden from the agent, like ``reference``): a message
    without a tool call goes to this user, whose reply is the next observation. None: no user; such a
    message is the final answer. In tasks.jsonl it may give only what differs from the pack's ``Manifest.user``
    (``merge_user``); loaded, it is the whole spec."""

    @model_validator(mode="after")
    def _difficulty_covers_reference(self) -> Task:
        if self.difficulty < len(self.reference.calls):
            raise ValueError(
                f"difficulty {self.difficulty} is below the {len(self.reference.calls)} tool calls of the reference"
            )
        return self


class FunctionSpec(_Model):
    name: str
    description: str = ""
    parameters: dict[str, Any]
    strict: bool | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _TOOL_NAME.match(v):
            raise ValueError(f"tool name {v!r} must match {_TOOL_NAME.pattern}")
        return v

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, v: dict[str, Any]) -> dict[str, Any]:
        if v.get("type") != "object":
            raise ValueError("'type' must be 'object'")
        props = v.get("properties", {})
        if not isinstance(props, dict):
            raise ValueError("'properties' must be an object")
        missing = [r for r in v.get("required", []) if r not in props]
        if missing:
            raise ValueError(f"'required' names {missing} that are not in 'properties'")
        try:
            jsonschema.Draft202012Validator.check_schema(v)
        except jsonschema.SchemaError as e:
            raise ValueError(f"not a valid JSON Schema: {e.message}") from None
        return v


class ToolSchema(_Model):
    """An OpenAI function-tool schema."""

    type: Literal["function"] = "function"
    function: FunctionSpec

    @property
    def name(self) -> str:
        return self.function.name


class Image(_Model):
    base: str = "debian:bookworm"
    dockerfile: str | None = None
    """Path of the pack layer's Dockerfile inside the pack (env/Dockerfile), or None to generate one."""
    tag: str | None = None
    digest: str | None = None
    repo_digest: str | None = None
    """``HOST:PORT/REPO@sha256:...`` where the build pushed the image (``--registry``): a machine without the
    image pulls it by this digest instead of rebuilding it (``envgen.sandbox.registry``)."""


class Limits(_Model):
    max_turns: int = Field(32, ge=1)
    step_timeout_s: float = Field(10.0, gt=0)
    episode_timeout_s: float = Field(600.0, gt=0)
    memory_mb: int = Field(1024, ge=64)
    cpus: float = Field(1.0, gt=0)
    network: bool = False
    output_limit: int = Field(16_384, ge=256)
    """Tool results longer than this many characters are truncated with a marker."""


class Provenance(_Model):
    generator: str = ""
    models: list[str] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)
    seed: int | None = None
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))


class Manifest(_SparseModel):
    """pack.json."""

    _sparse: ClassVar[tuple[str, ...]] = ("user", "agent_first", "greeting")

    schema_version: int = SCHEMA_VERSION
    name: str = Field(min_length=1)
    version: str = ""
    """Content hash (see content_hash); written by save()."""
    family: str
    category: str = ""
    description: str = ""
    instructions: str | None = None
    """The pack's system prompt / policy document, stored once here and shown to the agent as the start of
    the system message of every task (a task's own system message follows it, envgen's episode rules end it;
    see envgen.episodes.prompt). None: the pack has none."""
    user_model: str | None = None
    """The default simulated user for the pack's user tasks: ``scripted`` (None means the same) or
    ``openai:MODEL[?base_url=..&temperature=..]`` (any OpenAI-compatible endpoint); a run may override it."""
    user: dict[str, Any] | None = None
    """Defaults for every user task's ``user`` spec (any ``UserSpec`` fields, e.g. ``stop``, ``closing``,
    ``consent``, ``style``), so tasks carry only what differs: ``merge_user`` puts them under each task's
    ``user`` field by field, the task's fields winning. Tasks without ``user`` are unaffected."""
    agent_first: bool = False
    """The agent speaks first in user tasks (tau2's convention): the episode starts with ``greeting`` as the
    agent's message and the user's opening from its spec (``UserSpec.opening``; an LLM user writes its own),
    so a user task's prompt holds no user message and the agent never sees the hidden spec."""
    greeting: str | None = None
    """The agent's first message when ``agent_first`` (None: ``DEFAULT_GREETING``)."""
    tools: list[ToolSchema]
    submit_tool: str | None = None
    """The tool that hands in the agent's result, if the family has one (the red-team drops it for 'empty')."""
    image: Image = Field(default_factory=Image)
    limits: Limits = Field(default_factory=Limits)
    provenance: Provenance = Field(default_factory=Provenance)
    stats: dict[str, Any] = Field(default_factory=dict)

    @field_validator("schema_version")
    @classmethod
    def _schema(cls, v: int) -> int:
        if v != SCHEMA_VERSION:
            raise ValueError(f"schema_version {v} is not supported (this envgen reads {SCHEMA_VERSION})")
        return v

    @field_validator("user_model")
    @classmethod
    def _user_model(cls, v: str | None) -> str | None:
        if v is not None and not (v == "scripted" or (v.startswith("openai:") and len(v) > len("openai:"))):
            raise ValueError(f"{v!r}: expected 'scripted' or 'openai:MODEL[?base_url=..]'")
        return v

    @field_validator("user")
    @classmethod
    def _user_defaults(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        unknown = sorted(set(v) - set(UserSpec.model_fields))
        if unknown:
            raise ValueError(f"unknown UserSpec field(s) {', '.join(unknown)} (known: "
                             f"{', '.join(UserSpec.model_fields)})")
        try:
            spec = UserSpec.model_validate({"goal": "(the task's)", **v})
        except ValidationError as e:
            raise ValueError(_first_error(e)) from None
        full = spec.model_dump(mode="json", context=EVERY_FIELD)
        return {k: full[k] for k in v}  # normalised: what a task's spec holds for the same value

    @field_validator("greeting")
    @classmethod
    def _greeting(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("empty; leave the field out for the default greeting")
        return v

    @field_validator("instructions")
    @classmethod
    def _instructions(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.strip():
            raise ValueError("empty; leave the field out if the pack has no instructions")
        if len(v) > MAX_INSTRUCTIONS:
            raise ValueError(f"{len(v)} characters, over the limit of {MAX_INSTRUCTIONS}; shorten the policy "
                             "document or move reference material into a tool the agent can call")
        return v

    @model_validator(mode="after")
    def _unique_tools(self) -> Manifest:
        dup = [n for n, c in Counter(t.name for t in self.tools).items() if c > 1]
        if dup:
            raise ValueError(f"tool names repeat: {dup}")
        if self.submit_tool is not None and self.submit_tool not in self.tool_names:
            raise ValueError(f"submit_tool {self.submit_tool!r} is not one of the pack's tools")
        return self

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]


DEFAULT_GREETING = "Hi! How can I help you today?"
"""The agent's first message in a pack whose agent speaks first, unless ``Manifest.greeting`` sets one."""


def agent_speaks_first(manifest: Manifest, task: Task) -> bool:
    """Whether ``task``'s episode opens with the agent's greeting (a user task of an ``agent_first`` pack)."""
    return manifest.agent_first and task.user is not None


def check_prompt(manifest: Manifest, task: Task) -> str | None:
    """Why ``task``'s prompt cannot start an episode of this pack (None: it can). The agent must get a user
    message to answer, unless it speaks first, and then the opening must come from the user spec alone."""
    roles = [m.role for m in task.prompt]
    if agent_speaks_first(manifest, task):
        if any(r != "system" for r in roles):
            return ("prompt: the pack's agent speaks first (agent_first), so a user task's prompt holds only "
                    "system messages; move the user's opening into user.opening")
        if task.user.opening is None or not task.user.opening.strip():
            return ("user.opening: missing; the pack's agent speaks first (agent_first) and the scripted user "
                    "needs its first message (write it in the task's user, or in pack.json's user)")
        return None
    if "user" not in roles:
        return ("prompt: no user message, so the agent has nothing to answer; add one"
                + (", or set agent_first in pack.json" if task.user is not None else ""))
    return None


class Pack:
    """A loaded (or to-be-saved) pack: manifest, tasks, and the directory holding env/ and hidden/."""

    def __init__(self, manifest: Manifest, tasks: list[Task], root: Path | None = None):
        self.manifest = manifest
        self.tasks = tasks
        self.root = root
        self._by_id = {t.id: t for t in tasks}

    def __repr__(self) -> str:
        return f"Pack({self.manifest.name!r}, {len(self.tasks)} tasks, root={str(self.root)!r})"

    @property
    def env_dir(self) -> Path:
        return self._dir(ENV)

    @property
    def hidden_dir(self) -> Path:
        return self._dir(HIDDEN)

    def _dir(self, name: str) -> Path:
        if self.root is None:
            raise PackError("this pack has no directory yet: save() it first")
        return self.root / name

    def task(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise PackError(f"{self.root}: no task with id {task_id!r}") from None

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        """The OpenAI tool schemas the agent gets for this task."""
        names = set(task.tools) if task.tools is not None else None
        return [t.model_dump(exclude_none=True) for t in self.manifest.tools if names is None or t.name in names]

    def with_tasks(self, tasks: Iterable[Task]) -> Pack:
        """A copy of this pack (same env/ and hidden/) holding other tasks, e.g. those a filter kept."""
        return Pack(self.manifest.model_copy(deep=True), list(tasks), self.root)


# ---------------------------------------------------------------- loading


def _field(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "literal_error" and err["loc"] and err["loc"][-1] == "kind":
        msg = f"unknown kind {err['input']!r} (expected one of {', '.join(VERIFIER_KINDS)})"
    elif err["type"] == "missing":
        msg = "missing required field"
    elif err["type"] == "extra_forbidden":
        msg = "unknown field"
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    where = f"{_field(err['loc'])}: " if err["loc"] else ""  # model-level checks name their fields themselves
    return f"{where}{msg}{more}"


def load(path: str | os.PathLike) -> Pack:
    """Load and fully validate the pack at ``path``; raise PackError naming file, line and field."""
    root = Path(path)
    if not (root / MANIFEST).is_file():
        raise PackError(f"{root}: not a pack (no {MANIFEST}); build one with `envgen build`")
    mpath = root / MANIFEST
    try:
        raw = json.loads(mpath.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise PackError(f"{mpath}:{e.lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(raw, dict):
        raise PackError(f"{mpath}:1: the manifest must be a JSON object")
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as e:
        raise PackError(f"{mpath}: {_first_error(e)}") from None

    tpath = root / TASKS
    if not tpath.is_file():
        raise PackError(f"{tpath}: missing (a pack needs a tasks file, even an empty one)")
    known = set(manifest.tool_names)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    with tpath.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as je:
                raise PackError(f"{tpath}:{lineno}: invalid JSON: {je.msg} (column {je.colno})") from None
            if manifest.user and isinstance(raw, dict) and isinstance(raw.get("user"), dict):
                raw["user"] = merge_user(manifest.user, raw["user"])
            try:
                task = Task.model_validate(raw)
            except ValidationError as e:
                raise PackError(f"{tpath}:{lineno}: {_first_error(e)}") from None
            problem = check_prompt(manifest, task)
            if problem is not None:
                raise PackError(f"{tpath}:{lineno}: {problem}")
            for i, name in enumerate(task.tools or []):
                if name not in known:
                    raise PackError(f"{tpath}:{lineno}: tools[{i}]: unknown tool {name!r} (the pack has {sorted(known)})")
            for i, call in enumerate(task.reference.calls):
                if call.tool not in known:
                    raise PackError(f"{tpath}:{lineno}: reference.calls[{i}].tool: unknown tool {call.tool!r}")
            if task.id in seen:
                raise PackError(f"{tpath}:{lineno}: id: {task.id!r} repeats line {seen[task.id]}")
            seen[task.id] = lineno
            tasks.append(task)
    if not (root / ENV).is_dir():
        raise PackError(f"{root / ENV}: missing (the sandbox's files live there)")
    return Pack(manifest, tasks, root)


# ---------------------------------------------------------------- hashing and saving


_BYTECODE = ("__pycache__", "*.pyc")
"""What importing a pack's Python writes beside it: never part of a pack (not hashed, copied or published)."""


def _is_bytecode(rel: Path) -> bool:
    return "__pycache__" in rel.parts or rel.suffix == ".pyc"


def _files(root: Path, names: Iterable[str]) -> Iterable[tuple[str, Path]]:
    for name in names:
        top = root / name
        if top.is_file():
            yield name, top
        elif top.is_dir():
            for p in sorted(top.rglob("*")):
                if p.is_file() and not _is_bytecode(p.relative_to(root)):
                    yield p.relative_to(root).as_posix(), p


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def content_hash(root: Path, manifest: Manifest) -> str:
    """sha256 over the manifest's content fields, the tasks without their stats, env/ and hidden/
    (without Python bytecode, which an import may write there).

    The manifest's ``instructions`` (the policy document) are content: editing them makes another pack.
    version, image (built artefacts), provenance and stats (manifest and per-task: measurements such
    as pass rates) are left out, so rebuilding an image or re-running a pass check does not change
    what the pack *is*, and rollouts recorded against a version stay valid.
    """
    h = hashlib.sha256()
    content = manifest.model_dump(mode="json", exclude={"version", "image", "provenance", "stats"})
    for optional in ("instructions", "user_model", "user", "greeting"):
        if content.get(optional) is None:
            content.pop(optional, None)  # a pack without them hashes as it did before the fields
    if not content.get("agent_first"):
        content.pop("agent_first", None)
    h.update(_canonical(content))
    tpath = root / TASKS
    if tpath.is_file():
        with tpath.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    task = json.loads(line)
                    task.pop("stats", None)
                    h.update(b"\0task\0" + _canonical(task))
    for rel, p in _files(root, (ENV, HIDDEN)):
        h.update(b"\0" + rel.encode() + b"\0")
        with p.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return "sha256:" + h.hexdigest()


def _task_line(task: Task, defaults: dict[str, Any] | None) -> str:
    """One tasks.jsonl line; a user spec is written without the fields equal to the pack's defaults, so that
    ``load`` (``merge_user``) gives back the same spec."""
    if not defaults or task.user is None:
        return task.model_dump_json(exclude_none=True)
    doc = json.loads(task.model_dump_json(exclude_none=True))
    full, sparse = task.user.model_dump(mode="json", context=EVERY_FIELD), doc["user"]
    doc["user"] = {k: sparse.get(k) for k, v in full.items() if v != defaults.get(k, _USER_DEFAULTS.get(k, ...))}
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"))


def _dump_tasks(tasks: list[Task], defaults: dict[str, Any] | None = None) -> str:
    return "".join(_task_line(t, defaults) + "\n" for t in tasks)


def save(pack: Pack, dest: str | os.PathLike, *, env_from: Path | None = None, hidden_from: Path | None = None) -> Pack:
    """Write ``pack`` to ``dest`` atomically and return it loaded from there.

    env/ and hidden/ are copied from ``env_from``/``hidden_from`` when given, else from the pack's own
    directory. ``dest`` may be the pack's own directory (rewriting tasks or stats in place).
    """
    dest = Path(dest).resolve()
    env_src = env_from or (pack.root / ENV if pack.root else None)
    hidden_src = hidden_from or (pack.root / HIDDEN if pack.root else None)
    if env_src is None or not Path(env_src).is_dir():
        raise PackError(f"cannot save {pack.manifest.name!r}: no env/ directory to copy (got {env_src})")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        skip = shutil.ignore_patterns(*_BYTECODE)
        shutil.copytree(env_src, tmp / ENV, symlinks=False, ignore=skip)
        if hidden_src is not None and Path(hidden_src).is_dir():
            shutil.copytree(hidden_src, tmp / HIDDEN, symlinks=False, ignore=skip)
        else:
            (tmp / HIDDEN).mkdir()
        (tmp / TASKS).write_text(_dump_tasks(pack.tasks, pack.manifest.user), encoding="utf-8")
        manifest = pack.manifest.model_copy(deep=True)
        manifest.stats = {**manifest.stats, **task_stats(pack.tasks)}
        manifest.version = content_hash(tmp, manifest)
        (tmp / MANIFEST).write_text(manifest.model_dump_json(indent=2, exclude_none=True) + "\n", encoding="utf-8")
        (tmp / CARD).write_text(card(manifest, pack.tasks), encoding="utf-8")
        _swap_into_place(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load(dest)


def _swap_into_place(tmp: Path, dest: Path) -> None:
    """rename() is atomic for a fresh destination; an existing one is moved aside first and removed after."""
    if not dest.exists():
        os.rename(tmp, dest)
        return
    old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
    os.rename(dest, old)
    try:
        os.rename(tmp, dest)
    except BaseException:
        os.rename(old, dest)
        raise
    shutil.rmtree(old, ignore_errors=True)


_RACY_S = 2.0
"""Files changed this recently are hashed but not cached: a later edit in the same mtime tick could hide."""


def _fingerprint(root: Path) -> tuple[str, bool]:
    """A digest of every hashed file's path, size and mtime, and whether all of them are old enough to trust."""
    h, fresh, now = hashlib.sha256(), True, time.time()
    for rel, p in _files(root, (MANIFEST, TASKS, ENV, HIDDEN)):
        st = p.stat()
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
        fresh = fresh and now - st.st_mtime > _RACY_S
    return h.hexdigest(), fresh


def cached_content_hash(root: Path, manifest: Manifest) -> str:
    """content_hash, remembered in the cache dir by every file's size and mtime so an unchanged pack is not re-read."""
    root = Path(root).resolve()
    entry = cache_dir() / "hashes" / (hashlib.sha256(str(root).encode()).hexdigest()[:32] + ".json")
    fingerprint, trusted = _fingerprint(root)
    try:
        saved = json.loads(entry.read_text(encoding="utf-8"))
        if saved.get("root") == str(root) and saved.get("fingerprint") == fingerprint:
            return saved["digest"]
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    digest = content_hash(root, manifest)
    if trusted:
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            tmp = entry.with_name(f".{entry.name}.{os.getpid()}")
            tmp.write_text(json.dumps({"root": str(root), "fingerprint": fingerprint, "digest": digest}),
                           encoding="utf-8")
            os.replace(tmp, entry)
        except OSError:
            pass  # a read-only cache only costs speed
    return digest


def verify_hash(pack: Pack) -> None:
    """Raise PackError if the files on disk do not hash to the manifest's version (a modified pack)."""
    actual = cached_content_hash(pack.root, pack.manifest)
    if actual != pack.manifest.version:
        raise PackError(
            f"{pack.root}: modified since it was saved (content {actual[:19]}, pack.json says "
            f"{pack.manifest.version[:19] or 'no version'}); rebuild it, or pass --allow-modified to re-hash it"
        )


def task_stats(tasks: list[Task]) -> dict[str, Any]:
    """Summary stats the manifest and the card carry: task count and difficulty histogram."""
    hist = Counter(t.difficulty for t in tasks)
    return {"tasks": len(tasks), "difficulty": {str(k): hist[k] for k in sorted(hist)}}


def card(manifest: Manifest, tasks: list[Task]) -> str:
    """The pack's README.md."""
    st = task_stats(tasks)
    hist = ", ".join(f"{k}: {v}" for k, v in st["difficulty"].items()) or "none"
    tools = "\n".join(f"- `{t.name}`: {t.function.description.splitlines()[0] if t.function.description else ''}"
                      for t in manifest.tools)
    return (
        f"# {manifest.name}\n\n{manifest.description}\n\n"
        f"- family: `{manifest.family}`" + (f", category `{manifest.category}`" if manifest.category else "") + "\n"
        f"- version: `{manifest.version}`\n- tasks: {st['tasks']} (difficulty histogram: {hist})\n"
        + (f"- instructions: {len(manifest.instructions)} characters in `{MANIFEST}`, the start of the agent's "
           "system message in every task\n" if manifest.instructions else "") +
        f"- generator: {manifest.provenance.generator or 'unknown'}\n\n## Tools\n\n{tools}\n\n"
        "## Use\n\n```python\nimport gymnasium as gym, envgen\n"
        f'env = gym.make("envgen/Pack-v0", pack="PATH_TO_THIS_PACK")\n```\n'
    )
