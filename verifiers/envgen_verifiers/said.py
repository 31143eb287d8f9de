"""``said``: the agent conveyed these facts to the user at some point of the conversation.

A fact is checked against every assistant message of the episode (``messages``, with their turns; the
final answer too), not only the last one: "your refund of $54.20 is on its way" in turn 3 counts even
when the conversation then goes on. Matching is the answer kit's (``answer.py``): names as whole folded
words (aliases accepted, "Lima-x" is not "Lima"), numbers by value within a tolerance, with en/de/fr
thousands separators read either way.

A statement only counts when it commits to the fact. Within the sentence (a bulleted list counts as one
sentence with the line that introduces it) that holds the fact, these score nothing:

- a disjunction or a listing phrase ("or", "either", "oder", "one of", ...), a "/" between alternatives,
  or an uncertainty word ("maybe", "perhaps", "probably", "possibly", ...);
- another known value of the same type (``candidates`` of the fact, e.g. the other refund amounts);
- an enumeration: the value next to another of its type, separated only by a comma, "and", "&", a
  slash or a new list item ("54.20, 99.00", "Lisbon and Porto", "- 12.50\\n- 54.20");
- another sentence of the same message that hedges with a value of the fact's type ("Or maybe $99."), or
  says the same thing with another value ("Refunded: $12.50." then "Refunded: $54.20.": two answers);
- a negation in the clause that holds the value ("The refund is not $54.20", "I can't confirm 54.20",
  "54.20 isn't right"); a clause ends at a comma, semicolon, colon, dash, bracket or line break, so
  "No, your refund is $54.20" and "- refunded $54.20\n- not touched" still count.

args::

    facts: [FACT, ...]     each a value (str or number) or {expected, aliases=[], mode=auto|exact|numeric,
                           candidates=[...], rel_tol=1e-6, abs_tol=1e-9, accents=true, name=...}
    evidence: [str]        optional: strings each found in a successful tool result (as in ``answer``)
    partial: false         true: reward = fraction of facts said (else all or nothing)
"""

from __future__ import annotations

import re

from . import answer as _answer

HEDGES = frozenset({"maybe", "perhaps", "possibly", "probably", "likely", "unsure", "guess", "roughly", "approximately",
                    "vielleicht", "wahrscheinlich", "peutetre", "quizas", "quizá", "quiza", "forse"})
"""Uncertainty words: a fact stated with one of them is not conveyed (beside answer.py's disjunctions)."""
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,3}[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[!?])\s+|(?<=[^\d\s.][.])\s+|(?<=\d[.])\s+(?=[A-Z])")
_SEP = r"(?:\s*(?:[,;/&+]|\band\b|\bund\b|\bet\b|\bor\b)\s*|\s*\n\s*(?:[-*\u2022]|\d{1,3}[.)])\s+)"
_CURRENCY = r"[$\u20ac\u00a3\u00a5#]?"
_NEGATION = re.compile(r"\b(?:not|never|neither|nor|cannot|none|nothing|nicht|kein\w*|nie|niemals|pas|jamais|nunca|"
                       r"no(?![.#\s]*\d)|(?:ca|do|wo|is|are|was|were|does|did|has|have|had|could|should|would|"
                       r"must|need|ai)n['\u2019]?t)\b|\w+n['\u2019]t\b", re.I)
"""Negations ("no" but not "no. 12" / "No 4512", an order number); contractions with or without their
apostrophe (exact matching reads text without apostrophes), never a word that merely ends in "nt"."""
_CLAUSE_END = re.compile(r"[,;:()\[\]\n\u2013\u2014]|\s-\s|\bbut\b|\baber\b|\bmais\b|\bpero\b", re.I)


def _fact(raw, i: int) -> dict:
    if isinstance(raw, dict):
        if "expected" not in raw:
            raise ValueError(f"said args.facts[{i}] needs expected")
        f = dict(raw)
    else:
        f = {"expected": raw}
    if isinstance(f["expected"], bool) or not isinstance(f["expected"], (str, int, float)):
        raise ValueError(f"said args.facts[{i}].expected must be a string or a number")
    mode = f.get("mode", "auto")
    if mode == "auto":
        mode = "exact" if isinstance(f["expected"], str) else "numeric"
    if mode not in ("exact", "numeric"):
        raise ValueError(f"said args.facts[{i}].mode must be auto, exact or numeric, got {mode!r}")
    f["mode"] = mode
    f.setdefault("name", str(f["expected"]))
    return f


def units(text: str) -> list[str]:
    """A message cut into sentences; consecutive list items, and the line that introduces them, are one."""
    lines, out, block = str(text).split("\n"), [], []
    for line in lines:
        if _BULLET.match(line) and (block or out):
            if not block:  # the line before the list introduces it ("Possible amounts:")
                block = [out.pop()] if out and out[-1].rstrip().endswith(":") else []
            block.append(line)
            continue
        if _BULLET.match(line):
            block.append(line)
            continue
        if block:
            out.append("\n".join(block))
            block = []
        out += [s for s in _SENTENCE_END.split(line) if s.strip()]
    if block:
        out.append("\n".join(block))
    return [u for u in out if u.strip()]


def _hedged(text: str, skip: list[tuple[int, int]]) -> str:
    """The hedge words of ``text`` outside the character spans ``skip`` ("" when none)."""
    words = _answer._Words(text, True)
    t = words.text

    def standalone(a: int, b: int) -> bool:  # "o" of "O-1" is part of an id, not Spanish "or"
        return t[b:b + 1] != "-" and t[a - 1:a] != "-" if a else t[b:b + 1] != "-"

    rest = [w for w, a, b in words.items if not any(s <= a < e for s, e in skip) and standalone(a, b)]
    found = sorted({w for w in rest if w in _answer._DISJUNCTIONS or w in HEDGES} |
                   {f"{a} {b}" for a, b in zip(rest, rest[1:]) if (a, b) in _answer._LISTING})
    outside = "".join(ch for k, ch in enumerate(words.text) if not any(s <= k < e for s, e in skip))
    if re.search(r"[^\s\d]\s*[/|]\s*[^\s\d]", outside):
        found.append("/")
    return ", ".join(found)


def _negated(text: str, span: tuple[int, int]) -> bool:
    """Whether the clause around the value at ``span`` holds a negation."""
    a, b = span
    starts = [m.end() for m in _CLAUSE_END.finditer(text, 0, a)]
    end = _CLAUSE_END.search(text, b)
    clause = text[starts[-1] if starts else 0:a] + " " + text[b:end.start() if end else len(text)]
    return _NEGATION.search(clause) is not None


# ------------------------------------------------------------------ locating a value


def _number_spans(text: str) -> list[tuple[int, int, tuple]]:
    t = _answer.canon(text)
    return [(m.start(), m.end(), _answer._readings(m)) for m in _answer._NUMBER.finditer(t)]


def _find(fact: dict, text: str) -> tuple[list[tuple[int, int]], list[str]]:
    """(spans of the fact's value in ``text``, other values of its type found there: its candidates, or
    any other number for a numeric fact)."""
    golds = [fact["expected"], *fact.get("aliases", [])]
    if fact["mode"] == "numeric":
        rel, abs_ = float(fact.get("rel_tol", 1e-6)), float(fact.get("abs_tol", 1e-9))
        gold_v = [float(g) for g in golds]
        cands = [float(c) for c in fact.get("candidates") or []]
        spans, others = [], []
        for a, b, readings in _number_spans(text):
            if any(_answer._close(v, g, rel, abs_) for v in readings for g in gold_v):
                spans.append((a, b))
            elif not cands or any(_answer._close(v, c, rel, abs_) for v in readings for c in cands):
                others.append(f"{readings[0]:g}")
        return spans, others
    accents = fact.get("accents", True)
    words = _answer._Words(text, accents)
    gold_keys = {k for k in (_answer.name_key(str(g), accents) for g in golds) if k}
    cands = _answer.Names(str(c) for c in fact.get("candidates") or [])
    keyed, longest = _answer._keyed(cands, accents)
    longest = max([longest, *map(len, gold_keys)])

    def lookup(key):
        return "\0gold" if key in gold_keys else keyed.get(key)

    spans, others = [], []
    for s, e, hit in _answer._scan(words.words, lookup, longest):
        if hit == "\0gold" and not _answer._glued(words, s, e):
            spans.append((words.items[s][1], words.items[e - 1][2]))
        elif hit != "\0gold" and _answer.name_key(hit, accents) not in gold_keys:
            others.append(hit)
    return spans, others  # spans index words.text: the caller passes text through _prep, so it is the same


def _enumerated(fact: dict, text: str, span: tuple[int, int]) -> bool:
    """The value at ``span`` is one item of a list of values of its type."""
    after, before = text[span[1]:], text[:span[0]]
    if fact["mode"] == "numeric":
        item = _CURRENCY + r"\s*[-+]?\d"
        return bool(re.match(_SEP + item, after) or re.search(r"\d%?" + _SEP + _CURRENCY + r"\s*$", before))
    cands = fact.get("candidates")
    if cands:
        return False  # the other names are known: naming one is caught as such, not guessed from capitals
    item = r"(?!(?:the|a|an|der|die|das|le|la|les|el|los|las)\b)[A-Z0-9]"
    return bool(re.match(_SEP + item, after) or re.search(r"[A-Za-z0-9]" + _SEP + r"$", before))


def _prep(fact: dict, text: str) -> str:
    """The text as matching reads it (spans found in it index it directly)."""
    t = _answer.canon(text)
    return _answer._APOSTROPHES.sub("", t) if fact["mode"] == "exact" else t


_BLANK = "qqvalueqq"


def _frame(fact: dict, canon: str, spans: list[tuple[int, int]], others: list[str]) -> str:
    """The sentence with every value of the fact's type blanked out, as words."""
    if fact["mode"] == "numeric":
        t = _answer._NUMBER.sub(f" {_BLANK} ", canon)
    else:
        t = canon
        for a, b in sorted(spans, reverse=True):
            t = t[:a] + f" {_BLANK} " + t[b:]
        for o in others:
            t = re.sub(re.escape(o), f" {_BLANK} ", t, flags=re.I)
    return re.sub(r"\W+", " ", t).strip().casefold()


def _restates(fact: dict, frame: str, canon: str, spans: list[tuple[int, int]], others: list[str]) -> bool:
    """Another sentence of the message says the same thing with another value: "Refunded: $12.50 ..." then
    "Refunded: $54.20 ...", or "It ships from Porto." then "It ships from Lisbon." (two answers)."""
    if spans or _BLANK not in frame:
        return False
    other = _frame(fact, canon, spans, others)
    if fact["mode"] == "numeric" or others:
        return other == frame and _BLANK in other
    # a name without known candidates: any short phrase where the fact stands
    pattern = re.escape(frame).replace(_BLANK, r"(\w+(?: \w+){0,3})")
    return re.fullmatch(pattern, other) is not None


def conveyed(fact: dict, text: str) -> tuple[bool, str]:
    """Does the message ``text`` convey ``fact`` without hedging or enumerating? (ok, why not)."""
    parts = units(text)
    hit_reason = ""
    for k, unit in enumerate(parts):
        canon = _prep(fact, unit)
        spans, others = _find(fact, canon)
        if not spans:
            continue
        if others:
            hit_reason = f"stated beside {', '.join(sorted(set(others))[:4])}: one value is asked for"
            if fact["mode"] == "exact" or fact.get("candidates"):
                continue
        hedge = _hedged(canon, spans)
        if hedge:
            hit_reason = f"stated with a hedge ({hedge})"
            continue
        if any(_enumerated(fact, canon, s) for s in spans):
            hit_reason = "stated as one item of a list of values"
            continue
        if all(_negated(canon, s) for s in spans):
            hit_reason = "stated with a negation"
            continue
        # the rest of the message must not take it back ("Or maybe $99.") or say it again with another value
        taken_back = ""
        frame = _frame(fact, canon, spans, others)
        for j, other in enumerate(parts):
            if j == k:
                continue
            oc = _prep(fact, other)
            o_spans, o_others = _find(fact, oc)
            if (o_others and _hedged(oc, o_spans)) or _restates(fact, frame, oc, o_spans, o_others):
                taken_back = other.strip()
                break
        if taken_back:
            hit_reason = f"hedged elsewhere in the message ({taken_back[:80]!r})"
            continue
        return True, ""
    return False, hit_reason or "not stated"


def _texts(messages, answer) -> list[tuple[object, str]]:
    """(turn, text) of what the agent said to the user: its assistant messages, then the final answer."""
    out = [(m.get("turn"), str(m.get("content") or "")) for m in messages or []
           if isinstance(m, dict) and m.get("role") == "assistant" and str(m.get("content") or "").strip()]
    if str(answer or "").strip() and (not out or out[-1][1].strip() != str(answer).strip()):
        out.append((None, str(answer)))
    return out


def check(args: dict, *, answer: str = "", messages: list | None = None, calls: list | None = None, **_) -> dict:
    facts = args.get("facts")
    if not isinstance(facts, list) or not facts:
        raise ValueError("said verifier needs args.facts: a non-empty list of values or {expected, aliases}")
    facts = [_fact(f, i) for i, f in enumerate(facts)]
    said = _texts(messages, answer)
    results = []
    for f in facts:
        row = {"fact": f["name"], "ok": False}
        for turn, text in said:
            ok, why = conveyed(f, text)
            if ok:
                row.update(ok=True, turn=turn)
                break
            if why != "not stated":
                row["reason"] = why
        row.setdefault("reason", "not stated in any message to the user" if not row["ok"] else None)
        if row["reason"] is None:
            del row["reason"]
        results.append(row)
    passed = sum(r["ok"] for r in results)
    reward = passed / len(results) if args.get("partial") else float(passed == len(results))
    details = {"facts": results, "passed": passed, "messages": len(said)}
    missing = _answer.grounded(args.get("evidence") or [], calls or [])
    if missing:
        reward = 0.0
        details["reason"] = f"{missing[0]!r} appeared in no tool result of the episode: the fact is not grounded"
    elif passed < len(results):
        bad = next(r for r in results if not r["ok"])
        details["reason"] = f"fact {bad['fact']!r}: {bad['reason']}"
    return {"reward": reward, "details": details}
