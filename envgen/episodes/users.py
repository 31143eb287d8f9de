"""Simulated users: who answers when the agent of a user task writes a message without a tool call.

A task's ``user`` (``envgen.pack.format.UserSpec``, merged over the pack's ``Manifest.user`` defaults) is hidden
from the agent like its ``reference``. One interface, ``User.reply(conversation) -> (text, done)``:
``conversation`` is what the user has seen, in the agent's roles (``user``: the user's own messages, the
opening first; ``assistant``: the agent's messages without tool calls); ``done`` ends the conversation. When the
pack's agent speaks first (``Manifest.agent_first``), ``User.opening(conversation)`` writes the user's first
message after the agent's greeting. Two kinds:

- ``ScriptedUser`` (stdlib ``re``; offline builds and tests), on the agent's latest message, first match wins:

  1. a pending regret (the message after a consent ``yes`` whose entry has ``regret``) is said;
  2. a ``stop`` pattern: ``closing``, and the conversation ends;
  3. the first matching ``rule`` (``stop: true`` ends);
  4. ``insist``: a refusal matching ``when`` is answered ``reply``, up to ``times`` times;
  5. ``preferences``: the first not yet used whose ``when`` matches (each once);
  6. otherwise the parts of an answer, joined: a correction of a ``wrong`` value told earlier (when the
     agent asks again or says it does not match), each fact whose ``ask`` matches (``withheld`` until the
     ``asks``-th ask; then the ``wrong`` value first if set, else the value; a consent question, which
     restates what was told, does not make the user repeat a fact), and, when the message asks
     the user's consent (``envgen_verifiers.dialogue.asks_agreement``, any wording: "Is that OK with you?",
     not "Should I look at order W1?"), the first ``consent`` entry whose ``when`` matches it (after its
     regret was said, that entry answers no), else ``AGREE``;
  7. nothing of the above: ``default``.

  Patterns are searched case-insensitively; every text it says is written in ``style`` (fact values untouched).
- ``LLMUser``: any OpenAI-compatible endpoint through the ``openai`` client; its system prompt is built from
  the spec alone (goal, persona, style, facts to tell only when asked, how many asks a withheld fact needs,
  the wrong value to give first, consent decisions and regrets, preferences, insistence, how to end); it ends
  the conversation by writing ``STOP_MARKER``, which is removed from what the agent sees. It never sees the
  pack's files (``hidden/`` included), the reference, the tools or the tool results: only the spec and the
  conversation.

Both end with their reply number ``max_replies`` when the spec sets one. ``make_user(spec, model)`` builds
one for an episode from the model spelling ``scripted`` or ``openai:MODEL?base_url=..&temperature=..``.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from typing import Any

from ..errors import InputError, LLMError, LLMUnavailable
from ..llm.client import response_data
from ..pack.format import AGREE, DECLINE, UserFact, UserSpec
from ..paths import bundled

try:
    from envgen_verifiers import dialogue
except ImportError:  # the kit is bundled beside envgen, not installed: the host reads consent as verifiers do
    sys.path.append(str(bundled("verifiers")))
    from envgen_verifiers import dialogue

STOP_MARKER = "###STOP###"
"""What an LLM user writes to end the conversation (tau-bench's convention)."""

SCRIPTED = "scripted"

Conversation = list[dict[str, str]]


class User(ABC):
    """A simulated user for one episode (it may keep per-episode state: make one per episode)."""

    def __init__(self, spec: UserSpec):
        self.spec = spec
        self.replies = 0

    def reply(self, conversation: Conversation) -> tuple[str, bool]:
        """The user's answer to the conversation so far (its last message is the agent's), and whether the
        user ends the conversation with it."""
        text, done = self._reply(conversation)
        self.replies += 1
        if self.spec.max_replies is not None and self.replies >= self.spec.max_replies:
            done = True
        return text, done

    @abstractmethod
    def _reply(self, conversation: Conversation) -> tuple[str, bool]:
        ...

    @abstractmethod
    def opening(self, conversation: Conversation) -> str:
        """The user's first message when the agent spoke first (``conversation``: the agent's greeting); it
        neither counts as a reply nor ends the conversation."""


def _last_agent_message(conversation: Conversation) -> str:
    for m in reversed(conversation):
        if m.get("role") == "assistant":
            return m.get("content") or ""
    return ""


def _search(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.IGNORECASE) is not None


MISMATCH = re.compile(
    r"\b(?:(?:does|do|did)\s*(?:n['\u2019]?t|\s+not)\s+match|mismatch|(?:could|can|did)\s*(?:n['\u2019]?t|not)\s+"
    r"(?:find|locate|verify|match)|not\s+(?:found|match(?:ing)?|valid|correct|right|recogni[sz]ed)|no\s+(?:record|match|"
    r"account|user|customer|order)s?\s+(?:with|for|under|matching)|incorrect|invalid|wrong|unable\s+to\s+(?:find|"
    r"locate|verify))\b", re.I)
"""The agent saying a value the user gave does not check out: a ``wrong`` fact is corrected on it."""

_CONTRACTIONS = [("I am", "I'm"), ("do not", "don't"), ("does not", "doesn't"), ("did not", "didn't"),
                 ("is not", "isn't"), ("are not", "aren't"), ("cannot", "can't"), ("will not", "won't"),
                 ("it is", "it's"), ("that is", "that's"), ("I would", "I'd"), ("I have", "I've"),
                 ("I will", "I'll"), ("let us", "let's"), ("what is", "what's")]
_CASUAL = [*_CONTRACTIONS, ("Thank you", "Thanks"), ("Hello", "Hey")]
_FORMAL = [(b, a) for a, b in _CONTRACTIONS] + [("Thanks", "Thank you"), ("Hey", "Hello"), ("Hi", "Hello"),
                                                ("yeah", "yes"), ("yep", "yes"), ("nope", "no")]
_FILLER = re.compile(r"\b(?:please|kindly|thank\s+you(?:\s+so\s+much)?|thanks|sorry|just|really)\b,?", re.I)
_INTERJECTION = re.compile(r"(^|[.!?]\s+)(?:well|oh|hi|hello|hey)\b[,!]?\s*", re.I)
"""Words a terse user leaves out: courtesies anywhere, interjections where a sentence starts ("as well" stays)."""


def _swap(text: str, pairs: list[tuple[str, str]]) -> str:
    """Whole-word replacements, each keeping the case of the replaced word's first letter."""
    for old, new in pairs:
        def repl(m: re.Match, new: str = new) -> str:
            return new[:1].upper() + new[1:] if m.group()[:1].isupper() else new[:1].lower() + new[1:]
        text = re.sub(rf"\b{re.escape(old)}\b", repl, text, flags=re.I)
    return text


def _terse(text: str) -> str:
    while (shorter := _INTERJECTION.sub(r"\1", text)) != text:
        text = shorter
    text = _FILLER.sub("", text)
    text = re.sub(r"\s+([,.!?:;])", r"\1", re.sub(r"\s{2,}", " ", text)).strip()
    text = re.sub(r"(^|[.!?:;])[\s,]*,", r"\1", text)  # a comma left at a sentence's start
    text = re.sub(r"([.!?])(?:\s*[.!?])+", r"\1", re.sub(r",\s*([.!?])", r"\1", text))  # nothing left between
    text = re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), text.strip())
    return text


def styled(text: str, style: str, keep: list[str] = ()) -> str:
    """``text`` written in ``style`` (``envgen.pack.format.USER_STYLES``; anything else is ``plain``), the
    strings of ``keep`` (fact values) left exactly as they are, so a styled answer still gives the right id."""
    if style not in ("terse", "casual", "formal", "lowercase") or not text:
        return text
    kept = sorted({k for k in keep if k}, key=len, reverse=True)
    if kept:  # values stand aside as placeholders no rewrite touches
        text = re.sub("|".join(map(re.escape, kept)), lambda m: f"\0{kept.index(m.group())}\0", text)
    if style == "lowercase":
        out = text.lower()
    elif style == "casual":
        out = _swap(text, _CASUAL)
        out = out[:-1] if out.endswith(".") and not out.endswith("..") else out
    elif style == "formal":
        out = _swap(text, _FORMAL)
    else:
        out = _terse(text)
        out = out if re.search(r"\w", out) else text  # nothing but courtesy: said as it is
    return re.sub(r"\0(\d+)\0", lambda m: kept[int(m.group(1))], out)


class ScriptedUser(User):
    """Rules on the agent's latest message (see the module docstring); deterministic, no network."""

    def __init__(self, spec: UserSpec):
        super().__init__(spec)
        self._asked: Counter[str] = Counter()
        self._told: set[str] = set()
        self._wrong_told: set[str] = set()
        self._corrected: set[str] = set()
        self._regret: str | None = None
        self._regretted: set[int] = set()
        self._preferred: set[int] = set()
        self._insisted: Counter[int] = Counter()
        self._keep = [v for f in spec.facts for v in (f.value, f.wrong) if v]

    def _say(self, text: str) -> str:
        return styled(text, self.spec.style, self._keep)

    def opening(self, conversation: Conversation) -> str:
        if not self.spec.opening:
            raise InputError("the user spec has no 'opening', and the agent spoke first; write the user's first "
                             "message in its 'opening' field")
        return self._say(self.spec.opening)

    def _reply(self, conversation: Conversation) -> tuple[str, bool]:
        text, done = self._answer(_last_agent_message(conversation))
        return self._say(text), done

    def _answer(self, said: str) -> tuple[str, bool]:
        spec = self.spec
        if self._regret is not None:
            text, self._regret = self._regret, None
            return text, False
        if any(_search(p, said) for p in spec.stop):
            return spec.closing, True
        for rule in spec.rules:
            if _search(rule.when, said):
                return rule.reply, rule.stop
        for i, ins in enumerate(spec.insist):
            if self._insisted[i] < ins.times and _search(ins.when, said):
                self._insisted[i] += 1
                return ins.reply, False
        for i, pref in enumerate(spec.preferences):
            if i not in self._preferred and _search(pref.when, said):
                self._preferred.add(i)
                return pref.reply, False
        consent = dialogue.asks_agreement(said)
        parts = [self._fact(f, said) for f in spec.facts if not (consent and f.name in self._told)]
        parts = [p for p in parts if p]
        if consent:
            parts.append(self._consent(said))
        return (" ".join(dict.fromkeys(parts)), False) if parts else (spec.default, False)

    def _fact(self, fact: UserFact, said: str) -> str | None:
        """What the user says about ``fact`` on ``said`` (None: nothing)."""
        asked = fact.ask is not None and _search(fact.ask, said)
        if fact.name in self._wrong_told and fact.name not in self._corrected and (asked or MISMATCH.search(said)):
            self._corrected.add(fact.name)
            self._told.add(fact.name)
            return "Sorry, my mistake. " + _tell(fact, fact.value)
        if not asked:
            return None
        self._asked[fact.name] += 1
        if self._asked[fact.name] < fact.asks:
            return fact.withheld
        if fact.wrong is not None and fact.name not in self._wrong_told:
            self._wrong_told.add(fact.name)
            return _tell(fact, fact.wrong)
        self._told.add(fact.name)
        return _tell(fact, fact.value)

    def _consent(self, said: str) -> str:
        for i, c in enumerate(self.spec.consent):
            if _search(c.when, said):
                if c.answer == "no" or i in self._regretted:
                    return c.reply if c.answer == "no" and c.reply else DECLINE
                if c.regret:
                    self._regret = c.regret
                    self._regretted.add(i)
                return c.reply or AGREE
        return AGREE


def _tell(fact: UserFact, value: str) -> str:
    """The fact told with ``value`` (its ``reply`` with the right value swapped for ``value`` when they differ)."""
    if fact.reply is not None:
        return fact.reply if value == fact.value else fact.reply.replace(fact.value, value)
    return f"My {fact.name.replace('_', ' ')} is {value}."


def user_system_prompt(spec: UserSpec) -> str:
    """The LLM user's instructions, from the spec alone (the same behaviours the scripted user plays)."""
    parts = [
        "You are playing a customer (the user) talking to a support agent. Stay in character: write only what "
        "the user would say, one message at a time, in plain text. Never act as the agent and never invent "
        "facts you were not given.",
        f"Your goal:\n{spec.goal.strip()}",
    ]
    if spec.persona.strip():
        parts.append(f"Your persona:\n{spec.persona.strip()}")
    if spec.style != "plain":
        parts.append(f"Your writing style: {spec.style.strip()}.")
    if spec.opening:
        parts.append(f"If the agent greets you first, open the conversation in your own words along these "
                     f"lines:\n{spec.opening.strip()}")
    if spec.facts:
        lines = []
        for f in spec.facts:
            line = f"- {f.name.replace('_', ' ')}: {f.value}"
            if f.asks > 1:
                line += (f" (give it only the {_ordinal(f.asks)} time the agent asks for it; before that, say you "
                         f"are not sure, e.g. \"{f.withheld}\")")
            if f.wrong is not None:
                line += (f" (the first time you give it, say {f.wrong} by mistake; give the right value, {f.value}, "
                         "when the agent asks again or says it does not match)")
            lines.append(line)
        parts.append("What you know. Tell each fact only when the agent asks for it (or for something that "
                     "clearly needs it); never volunteer them all at once:\n" + "\n".join(lines))
    consent = ["When the agent asks for your agreement before doing something, agree if it is what you asked "
               "for, unless a rule below says otherwise:"] if spec.consent else []
    for c in spec.consent:
        rule = f"- an action matching the pattern /{c.when}/: answer {c.answer}"
        if c.reply:
            rule += f" (e.g. \"{c.reply}\")"
        if c.answer == "yes" and c.regret:
            rule += f"; then, in your very next message, take it back: \"{c.regret}\""
        consent.append(rule)
    if consent:
        parts.append("\n".join(consent))
    if spec.preferences:
        parts.append("Your preferences, when the agent offers something:\n" + "\n".join(
            f"- an offer matching the pattern /{p.when}/: answer along the lines of \"{p.reply}\"" for p in spec.preferences))
    if spec.insist:
        parts.append("If the agent refuses, insist:\n" + "\n".join(
            f"- a refusal matching the pattern /{i.when}/: insist up to {i.times} time(s), e.g. \"{i.reply}\""
            for i in spec.insist))
    parts.append(f"When your goal is met, or the agent cannot help any further, reply with a short closing "
                 f"message that ends with {STOP_MARKER} to end the conversation. Do not write {STOP_MARKER} "
                 "otherwise.")
    return "\n\n".join(parts)


def _ordinal(n: int) -> str:
    return {2: "second", 3: "third"}.get(n, f"{n}th")


class LLMUser(User):
    """A user played by a chat model at an OpenAI-compatible endpoint.

    The roles are mirrored for the model: the user's own messages are its ``assistant`` turns, the agent's
    are ``user`` turns. Thinking is not retained (only message text goes back).
    """

    def __init__(self, spec: UserSpec, model: str, client: Any, temperature: float | None = None,
                 max_tokens: int | None = None):
        super().__init__(spec)
        self.model, self.client, self.temperature, self.max_tokens = model, client, temperature, max_tokens

    def request(self, conversation: Conversation) -> dict[str, Any]:
        """The chat request this user sends for ``conversation``."""
        messages = [{"role": "system", "content": user_system_prompt(self.spec)}]
        for m in conversation:
            role = {"user": "assistant", "assistant": "user"}.get(m.get("role", ""))
            if role is not None:
                messages.append({"role": role, "content": m.get("content") or ""})
        if len(messages) > 1 and messages[1]["role"] == "assistant":
            # chat templates want the first turn after the system message to be the other side's
            messages.insert(1, {"role": "user", "content": "(The agent is listening. Start the conversation.)"})
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        return kwargs

    def opening(self, conversation: Conversation) -> str:
        return self._complete(conversation)[0]

    def _reply(self, conversation: Conversation) -> tuple[str, bool]:
        return self._complete(conversation)

    def _complete(self, conversation: Conversation) -> tuple[str, bool]:
        import openai

        for attempt in range(BAD_RESPONSE_TRIES):
            try:
                resp = self.client.chat.completions.create(**self.request(conversation))
            except openai.APIError as e:
                raise LLMError(f"simulated user openai:{self.model}: {type(e).__name__}: {e}") from None
            data, why = response_data(resp)  # a 200 whose body is a proxy's HTML page: retried, then an error
            if data is not None:
                break
            if attempt == BAD_RESPONSE_TRIES - 1:
                raise LLMUnavailable(f"simulated user openai:{self.model}: gave up after {attempt + 1} attempts: {why}")
            time.sleep(min(8.0, 0.5 * 2 ** attempt))
        text = data["choices"][0]["message"].get("content") or ""
        done = STOP_MARKER in text
        return text.replace(STOP_MARKER, "").strip(), done


BAD_RESPONSE_TRIES = 3
"""Requests a simulated user makes when the endpoint answers 200 with something that is no completion."""

_CLIENTS: dict[tuple[str | None, str, float, int], Any] = {}
_CLIENTS_LOCK = threading.Lock()
_FLOATS, _INTS = {"temperature", "timeout"}, {"max_tokens", "max_retries"}


def parse_user_model(model: str | None) -> dict[str, Any]:
    """``scripted`` / ``openai:MODEL?base_url=..&api_key_env=..&temperature=..&max_tokens=..&timeout=..``
    as a dict (``kind`` plus options); an InputError names a bad spelling."""
    from urllib.parse import parse_qsl

    if model is None or model == SCRIPTED:
        return {"kind": SCRIPTED}
    kind, _, rest = model.partition(":")
    name, _, query = rest.partition("?")
    if kind != "openai" or not name:
        raise InputError(f"unknown user model {model!r}; use 'scripted' or 'openai:MODEL[?base_url=URL&temperature=T]'")
    out: dict[str, Any] = {"kind": "openai", "model": name}
    known = {"base_url", "api_key_env", *_FLOATS, *_INTS}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in known:
            raise InputError(f"user model {model!r}: unknown option {key!r} (known: {', '.join(sorted(known))})")
        try:
            out[key] = float(value) if key in _FLOATS else int(value) if key in _INTS else value
        except ValueError:
            raise InputError(f"user model {model!r}: {key}={value!r} is not a number") from None
    return out


def _client(base_url: str | None, api_key: str, timeout: float, max_retries: int) -> Any:
    from openai import OpenAI

    key = (base_url, api_key, timeout, max_retries)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        return _CLIENTS[key]


def make_user(spec: UserSpec, model: str | None = None) -> User:
    """A fresh user for one episode of a task with ``spec``; ``model`` as in ``parse_user_model``. The endpoint's
    base URL and key default to ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (``api_key_env`` names another variable)."""
    opts = parse_user_model(model)
    if opts["kind"] == SCRIPTED:
        return ScriptedUser(spec)
    base_url = opts.get("base_url") or os.environ.get("OPENAI_BASE_URL")
    api_key = os.environ.get(opts.get("api_key_env", "OPENAI_API_KEY")) or "EMPTY"
    client = _client(base_url, api_key, float(opts.get("timeout", 120.0)), int(opts.get("max_retries", 3)))
    return LLMUser(spec, opts["model"], client, temperature=opts.get("temperature"), max_tokens=opts.get("max_tokens"))
