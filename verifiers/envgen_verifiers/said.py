"""``said``: the agent left the user with these facts, read as a careful grader reads a conversation.

Every assistant message of the episode counts (``messages``, with their turns; the final answer too), in
order: "your refund of $54.20 is on its way" in turn 3 counts even when the conversation then goes on,
unless something later takes it back. Matching is the answer kit's (``answer.py``): names as whole folded
words (aliases accepted, "Lima-x" is not "Lima"), numbers by value within a tolerance whatever their JSON
type or formatting ("8276.23", 8276.23 and "$8,276.23" are one value; en/de/fr thousands separators are
read either way).

The rules, per fact:

1. **Statements.** A message is cut into sentences (a bulleted list is one sentence with the line that
   introduces it; "St." and the like end no sentence). A mention of the value commits to it unless, in its
   sentence, it is hedged (a disjunction or listing phrase: "or", "either", "one of", "/"; an uncertainty
   word: "maybe", "perhaps", "probably", "possibly" ...; or, in its clause, "may", "might", "could be"),
   enumerated (next to another value of its type, separated by a comma, "and", "&", "/" or a new list
   item; the values of the task's other facts are no such value: an address said in parts is one
   address), stated beside another known candidate, or negated in its clause ("The refund is not $54.20",
   "I can't confirm 54.20", "your refund isn't 54.20"). A clause ends at a comma, semicolon, colon, dash,
   bracket, line break, "but", "because", "since", "so", "as": "Unfortunately I can't cancel it because
   your order has already shipped" conveys "shipped" (the negation governs the action, not the fact), and
   "No, your refund is $54.20" counts.
2. **Other values of the fact's kind** ("rivals"): the fact's ``candidates``; for a number, another number
   of its class (money beside money: a currency sign or word, or two decimals; a count beside the same unit;
   never an order id, "#1234", a card's "ending 1234", a date or a time); for a name with digits (a tracking
   number, a date), another token of its shape; for a capitalised name, another capitalised name. A rival is
   *about the fact* when its own words (from the previous value of its sentence to the end of its clause)
   say nothing the fact's own statements do not say (their words, the fact's ``name``, and filler such as
   "it", "this", "the amount", "after review", "the system shows", "I am checking"): "It may also have been $60.", "The
   system also shows $60 for this.", "Correction: the amount is $67.20." are; "You paid $120.00 for it",
   "a $5.00 restocking fee" are not (they name something else).
3. **A second candidate scores 0, anywhere.** A rival of the fact's own class (or about the fact) offered
   as an alternative ("or", "either", "alternatively", "also", "another" in its clause), or a rival about
   the fact stated with uncertainty ("may", "possibly", "I am checking" ... in its sentence), in any
   message, before or after the right statement: the user was given two values.
4. **The last statement wins.** The statements of a fact are its committed mentions, its hedged or negated
   mentions, the rivals about it that commit to another value (of its class, or a bare number in a
   correction; unless negated: "not $60" is no claim), a name's sentence said again with another phrase in
   its place ("It ships from Porto." after "It ships from Lisbon."), and bare retractions ("Sorry, I was
   wrong.", "Correction:", "scratch that") with no value of their own.
   The last one must be a committed mention of the right value: "it is not $54.20" or "Correction: the
   amount is $67.20" after it takes it back; a right statement after a wrong one in a *later* message, or
   in the same message marked as a correction ("sorry", "actually", "correction", "I meant", "rather"),
   passes. Two unmarked statements with different values in one message are two answers (0).
5. **Facts with several values** (``expected`` a list: the materials, the items): every value must be
   conveyed, in any order, each by the rules above; listing them together is no enumeration, but a value
   outside the list named in that listing (a candidate, another number of the class) is an extra one (0).
   A value with commas (an address, "123 Main St, Springfield, IL 62704") is one value matched as a whole,
   its punctuation and spacing free.

args::

    facts: [FACT, ...]     each a value (str, number, or a list of them: all conveyed) or {expected,
                           aliases=[], mode=auto|exact|numeric, candidates=[...], rel_tol=1e-6, abs_tol=1e-9,
                           accents=true, name=...}; mode auto is numeric for numbers and for strings that
                           read as one (an amount: "8276.23", "$1,093.34"; "10" too, compared exactly; a
                           digit string of 7 or more digits, or with a leading zero, is an id: exact),
                           else exact
    evidence: [str]        optional: strings each found in a successful tool result (as in ``answer``)
    partial: false         true: reward = fraction of facts said (else all or nothing)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import answer as _answer

HEDGES = frozenset({"maybe", "perhaps", "possibly", "probably", "likely", "unsure", "guess", "roughly", "approximately",
                    "vielleicht", "wahrscheinlich", "peutetre", "quizas", "quizá", "quiza", "forse"})
"""Uncertainty words: a fact stated with one of them in its sentence is not conveyed (beside answer.py's
disjunctions)."""
_MODAL = re.compile(r"\b(?:may|might|could(?:\s+also)?\s+(?:be|have\s+been))\b", re.I)
"""Uncertain modals: they hedge the clause they stand in ("it may be $54.20"), not the whole sentence
("Your order has shipped; you may track it ...")."""
_ALTERNATIVE = re.compile(r"\b(?:or|either|alternative(?:ly)?|otherwise|also|another|possible|potential|oder|ou|"
                          r"bzw)\b", re.I)
"""Words that offer a value as one more candidate: a rival of the fact's class beside one is a second value."""
_UNSURE = re.compile(r"\b(?:may|might|could|maybe|perhaps|possibly|probably|likely|unsure|not\s+sure|"
                     r"i\s+(?:think|believe|guess)|checking|double-?check\w*|verifying|looking\s+into)\b", re.I)
_CORRECTION = re.compile(r"\b(?:correction|corrected|correcting|actually|sorry|apologi[sz]e|apologies|wrong|"
                         r"mistake|my\s+bad|i\s+meant|misspoke|misread|mistyped|rather|instead|to\s+clarify|"
                         r"update|updated)\b", re.I)
"""Marks a statement as correcting an earlier one of the same message (which it then supersedes)."""
_RETRACTION = re.compile(r"\b(?:correction|i\s+was\s+wrong|(?:that|this)(?:\s+is|\s+was|s)?\s+(?:wrong|incorrect|"
                         r"not\s+(?:right|correct))|my\s+mistake|i\s+made\s+a\s+mistake|disregard|ignore\s+(?:that|"
                         r"what\s+i\s+said|my\s+last)|scratch\s+that|i\s+misspoke|i\s+stand\s+corrected)\b", re.I)
"""A sentence that takes back what was said; with no value of its own, it takes back the last statement."""
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d{1,3}[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[!?])\s+|(?<=[^\d\s.][.])\s+|(?<=\d[.])\s+(?=[A-Z])")
_ABBREVIATION = re.compile(r"\b(?:St|Ave|Rd|Dr|Blvd|Ln|Ct|Hwy|Mt|Ste|Apt|No|Nr|Mr|Mrs|Ms|Jr|Sr|Inc|Ltd|Co|Corp|"
                           r"etc|approx|vs|e\.g|i\.e)\.$", re.I)
"""A sentence piece ending with one of these ("123 Main St.") goes on in the next piece."""
_SEP = r"(?:\s*(?:[,;/&+]|\band\b|\bund\b|\bet\b|\bor\b)\s*|\s*\n\s*(?:[-*\u2022]|\d{1,3}[.)])\s+)"
_CURRENCY = r"[$\u20ac\u00a3\u00a5#]?"
_NEGATION = re.compile(r"\b(?:not|never|neither|nor|cannot|none|nothing|nicht|kein\w*|nie|niemals|pas|jamais|nunca|"
                       r"no(?![.#\s]*\d)|(?:ca|do|wo|is|are|was|were|does|did|has|have|had|could|should|would|"
                       r"must|need|ai)n['\u2019]?t)\b|\w+n['\u2019]t\b", re.I)
"""Negations ("no" but not "no. 12" / "No 4512", an order number); contractions with or without their
apostrophe (exact matching reads text without apostrophes), never a word that merely ends in "nt"."""
_CLAUSE_END = re.compile(r"[,;:()\[\]\n\u2013\u2014]|\s-\s|\b(?:but|because|since|so|as|therefore|aber|weil|mais|"
                         r"car|pero|porque)\b", re.I)
_DATE_TIME = re.compile(r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b|"
                        r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?"
                        r"(?:,?\s+\d{4})?\b|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:jan|feb|mar|apr|may|jun|jul|aug|"
                        r"sep|sept|oct|nov|dec)[a-z]*\.?(?:,?\s+\d{4})?\b|(?<![\d,.])\b(?:19|20)\d{2}\b(?![.,]\d)", re.I)
"""Numbers inside a date or a time: no amount, count or rival (a year alone, but not the 1939 of "1939.05")."""
_ID_BEFORE = re.compile(r"(?:#|\b(?:no|nr|number|order|id|ticket|item|tracking|account|zip|postal|code|phone|suite|"
                        r"apt|room|flight|ref|reference|invoice|step|line|version|ending|ends\s+in|last\s+four|digits|"
                        r"card|sku|variant|product|reservation|confirmation|customer|user|page)\.?\s*[:#]?\s*)$", re.I)
"""Words right before a number that make it an identifier, not an amount."""
_MONEY_BEFORE = re.compile(r"(?:[$\u20ac\u00a3\u00a5]|\b(?:usd|eur|gbp|chf))\s*[-+]?$", re.I)
_MONEY_AFTER = re.compile(r"\s*(?:[$\u20ac\u00a3\u00a5]|(?:usd|eur|gbp|chf|dollars?|euros?|pounds?|cents?)\b)", re.I)
_FILLER = frozenset("""
a an the it its this that these those there here which what who whom whose one ones i me my we us our you your
he she they them their his her is are was were be been being am has have had having do does did will would shall
should can could may might must also still again just only now then so too very well oh ok okay yes no hmm wait
of for to in on at by with from as about into onto per than like around roughly approximately exactly some any
or either and but however though plus alternatively otherwise another other else instead rather actually sorry
apologies apologize
correction corrected wrong mistake meant update updated clarify system systems record records data file files
shows show showing shown says say said lists listed list displays displayed see seeing appears appear seems seem
looks look amount amounts value values figure figures number numbers sum dollars dollar usd
eur euros euro pounds cents let check checking double verifying verify looking into sure unsure think believe
guess possibly perhaps maybe probably likely may might correct right im ive ill id youre thats whats theres heres
isnt wasnt arent werent dont doesnt didnt cant couldnt wont wouldnt shouldnt hasnt havent hadnt fine please note
after before review reviewed reviewing recheck rechecked second look further final new actual real true indeed
""".split())
"""Words that say nothing about which thing a value is: a rival framed only by these is about the fact."""


def _as_number(value) -> float | None:
    """The value of a number, or of a string that is one amount ("8276.23", "$8,276.23", "10"), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = _answer.canon(str(value)).strip()
    if not re.fullmatch(r"[-+]?\s*[$\u20ac\u00a3\u00a5]?\s*[\d.,'\u00a0\u202f ]*\d[\d.,'\u00a0\u202f ]*\s*"
                        r"(?:[$\u20ac\u00a3\u00a5]|usd|eur|gbp|dollars?|euros?)?", text, re.I):
        return None
    found = _answer.number_readings(text)
    return found[0][0] if len(found) == 1 else None


def _is_id(text: str) -> bool:
    """A digit string that names something (a tracking number, "0042"): matched as text, not by value."""
    digits = text.strip()
    return digits.isdigit() and (len(digits) >= 7 or (len(digits) > 1 and digits[0] == "0"))


def _fact(raw, i: int) -> dict:
    if isinstance(raw, dict):
        if "expected" not in raw:
            raise ValueError(f"said args.facts[{i}] needs expected")
        f = dict(raw)
    else:
        f = {"expected": raw}
    exp = f["expected"]
    if isinstance(exp, list):
        if not exp or any(isinstance(v, (bool, list, dict)) or not isinstance(v, (str, int, float)) for v in exp):
            raise ValueError(f"said args.facts[{i}].expected: a list of values must hold strings or numbers")
        f.setdefault("name", ", ".join(map(str, exp)))
        shared = {k: v for k, v in f.items() if k not in ("expected", "aliases", "name")}
        f["items"] = [_fact({**shared, "expected": v}, i) for v in exp]
        for item in f["items"]:
            item["siblings"] = [o for o in f["items"] if o is not item]
        return f
    if isinstance(exp, bool) or not isinstance(exp, (str, int, float)):
        raise ValueError(f"said args.facts[{i}].expected must be a string, a number or a list of them")
    mode = f.get("mode", "auto")
    if mode == "auto":
        mode = "numeric" if _as_number(exp) is not None and not (isinstance(exp, str) and _is_id(exp)) else "exact"
    if mode not in ("exact", "numeric"):
        raise ValueError(f"said args.facts[{i}].mode must be auto, exact or numeric, got {mode!r}")
    f["mode"] = mode
    if mode == "numeric":
        golds = [_as_number(g) for g in [exp, *f.get("aliases", [])]]
        if golds[0] is None:
            raise ValueError(f"said args.facts[{i}].expected {exp!r} is not a number (mode numeric)")
        f["values"] = [g for g in golds if g is not None]
        f["cand_values"] = [v for v in (_as_number(c) for c in f.get("candidates") or []) if v is not None]
        if isinstance(exp, str) and re.fullmatch(r"\s*\d+\s*", exp) and "rel_tol" not in f:
            f["rel_tol"] = 0.0  # a count or a small id given as text: its exact value
    f.setdefault("name", str(exp))
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
        pieces: list[str] = []
        for s in _SENTENCE_END.split(line):
            if pieces and _ABBREVIATION.search(pieces[-1].rstrip()):
                pieces[-1] = pieces[-1] + " " + s
            else:
                pieces.append(s)
        out += [s for s in pieces if s.strip()]
    if block:
        out.append("\n".join(block))
    return [u for u in out if u.strip()]


_UNITS: dict[str, list[str]] = {}
"""The sentences of the messages being graded (every fact reads the same messages)."""


def _units(message: str) -> list[str]:
    if message not in _UNITS:
        if len(_UNITS) > 4096:
            _UNITS.clear()
        _UNITS[message] = units(message)
    return _UNITS[message]


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


def _clause(text: str, span: tuple[int, int]) -> tuple[int, int]:
    a, b = span
    starts = [m.end() for m in _CLAUSE_END.finditer(text, 0, a)]
    end = _CLAUSE_END.search(text, b)
    return (starts[-1] if starts else 0), (end.start() if end else len(text))


def _negated(text: str, span: tuple[int, int]) -> bool:
    """Whether the clause around the value at ``span`` holds a negation."""
    s, e = _clause(text, span)
    return _NEGATION.search(text[s:span[0]] + " " + text[span[1]:e]) is not None


def _modal(text: str, span: tuple[int, int]) -> str:
    s, e = _clause(text, span)
    m = _MODAL.search(text[s:span[0]] + " " + text[span[1]:e])
    return m.group().lower() if m else ""


# ------------------------------------------------------------------ locating values


@dataclass
class _Mention:
    span: tuple[int, int]
    gold: bool
    value: str
    """How the mention reads (a rival's value, for the reason)."""
    cls: str = ""
    """Its class: "money", "percent", "n:<unit>" (a number), "cand" (a known candidate), "shape", "name"."""
    segment: str = ""
    """A rival's own words (``_segment``)."""


def _num_class(t: str, a: int, b: int) -> str | None:
    """What kind of number sits at t[a:b]: money, a percentage, a count of its unit ("n:item", "n:" bare),
    or None for an identifier."""
    before, after = t[max(0, a - 30):a], t[b:b + 20]
    if a >= 2 and t[a - 1] in "-_/" and t[a - 2].isalnum():
        return None  # O-1042
    if _MONEY_BEFORE.search(before) or _MONEY_AFTER.match(after):
        return "money"
    if re.match(r"\s*(?:%|percent\b)", after, re.I):
        return "percent"
    if _ID_BEFORE.search(before):
        return None
    if re.fullmatch(r"\d+[.,]\d{2}", t[a:b].lstrip("+-")):
        return "money"
    unit = re.match(r"\s*([A-Za-z]+)", after)
    word = unit.group(1).lower() if unit else ""
    word = "" if word in _FILLER else (word[:-1] if word.endswith("s") and len(word) > 3 else word)
    return "n:" + word


def _numeric_mentions(fact: dict, text: str) -> list[_Mention]:
    t = text
    dates = [m.span() for m in _DATE_TIME.finditer(t)]
    rel, abs_ = float(fact.get("rel_tol", 1e-6)), float(fact.get("abs_tol", 1e-9))
    out = []
    for m in _answer._NUMBER.finditer(t):
        a, b = m.span()
        if any(s <= a < e for s, e in dates):
            continue
        readings = _answer._readings(m)
        if any(_answer._close(v, g, rel, abs_) for v in readings for g in fact["values"]):
            out.append(_Mention((a, b), True, t[a:b], _num_class(t, a, b) or "id"))
            continue
        if any(_answer._close(v, g, rel, abs_) for v in readings for g in _known_values(fact)):
            continue  # a value the agent is to say as well (its list's, another fact's): graded there
        cls = _num_class(t, a, b)
        if any(_answer._close(v, c, rel, abs_) for v in readings for c in fact.get("cand_values") or []):
            cls = "cand"
        if cls is not None:
            out.append(_Mention((a, b), False, f"{readings[0]:g}", cls))
    return out


def _known_values(fact: dict) -> list[float]:
    """The numbers the agent is to say besides this fact's (its list's other values, the other facts')."""
    if "_known" not in fact:
        known = [v for s in fact.get("siblings") or [] for v in s.get("values") or []]
        known += [v for v in (_as_number(p) for p in fact.get("peers") or []) if v is not None]
        fact["_known"] = [v for v in known if not any(_answer._close(v, g, 1e-9, 1e-12) for g in fact["values"])]
    return fact["_known"]


def _shape(value: str) -> re.Pattern | None:
    """Tokens written like ``value`` (a tracking number, a date): its digits and letters as classes."""
    if not re.search(r"\d", value) or len(value) < 4 or " " in value.strip():
        return None
    pat = ""
    for run in re.finditer(r"\d+|[A-Za-z]+|.", value):
        g = run.group()
        pat += rf"\d{{{len(g)}}}" if g.isdigit() else (rf"[A-Za-z]{{{len(g)}}}" if g.isalpha() else re.escape(g))
    return re.compile(r"(?<![\w-])" + pat + r"(?![\w-])")


def _exact_keys(fact: dict) -> tuple:
    """(value keys, keys of values that are no rival, candidate keys, longest key, words of the value and its
    peers) of an exact fact, built once per fact."""
    if "_keys" not in fact:
        accents = fact.get("accents", True)

        def key(v) -> tuple[str, ...]:
            return _digit_split(_answer.name_key(str(v), accents))

        gold_keys = {k for k in map(key, [fact["expected"], *fact.get("aliases", [])]) if k}
        sib_keys = {k for s in fact.get("siblings") or [] for k in map(key, [s["expected"], *s.get("aliases", [])])
                    if k}
        sib_keys |= {k for k in map(key, fact.get("peers") or [])
                     if k and not any(set(gk) <= set(k) for gk in gold_keys)}  # a peer holding the value is no rival
        cands = _answer.Names(str(c) for c in fact.get("candidates") or [])
        keyed, longest = _split_keyed(cands, accents)
        longest = max([longest, *map(len, gold_keys | sib_keys)])
        words = {w for k in gold_keys | sib_keys for w in k} | set(_answer.name_key(fact.get("name", ""), accents))
        words |= {w for p in fact.get("peers") or [] for w in _answer.name_key(str(p), accents)}
        fact["_keys"] = (gold_keys, sib_keys, keyed, longest, words, bool(cands))
    return fact["_keys"]


def _exact_mentions(fact: dict, text: str) -> list[_Mention]:
    accents = fact.get("accents", True)
    words = _answer._Words(text, accents)
    gold_keys, sib_keys, keyed, longest, gold_words, cands = _exact_keys(fact)
    split = _split_words(words)

    def lookup(key):
        return "\0gold" if key in gold_keys else "\0sib" if key in sib_keys else keyed.get(key)

    out, taken = [], []
    for s, e, hit in _answer._scan([w for w, _, _ in split], lookup, longest):
        a, b = split[s][1], split[e - 1][2]
        taken.append((a, b))
        if hit == "\0gold":
            if not _glued(words.text, a, b):
                out.append(_Mention((a, b), True, text[a:b], "gold"))
        elif hit != "\0sib" and _answer.name_key(hit, accents) not in gold_keys:
            out.append(_Mention((a, b), False, hit, "cand"))
    if "_shape" not in fact:
        fact["_shape"] = _shape(str(fact["expected"]))
    shape = fact["_shape"]
    if shape is not None:
        for m in shape.finditer(words.text):
            if not any(s < m.end() and m.start() < e for s, e in taken):
                out.append(_Mention(m.span(), False, m.group(), "shape"))
    exp = str(fact["expected"]).strip()
    if exp[:1].isupper() and not re.search(r"\d", exp) and not cands:
        for m in re.finditer(r"\b[A-Z][\w]*(?:\s+[A-Z][\w]*)*", words.text):
            before = words.text[:m.start()].rstrip()
            opens = not before or before[-1] in ".!?:\"\u201c\u00ab\u00bf\u00a1\n" or _BULLET.match(
                words.text[words.text.rfind("\n", 0, m.start()) + 1:m.end()]) is not None
            if opens or any(s < m.end() and m.start() < e for s, e in taken) or m.group() in ("I",):
                continue
            key = _answer.name_key(m.group(), accents)
            if key and not set(key) <= gold_words and not _glued(words.text, *m.span()):
                out.append(_Mention(m.span(), False, m.group(), "name"))
    return sorted(out, key=lambda x: x.span)


def _split_keyed(cands, accents: bool) -> tuple[dict, int]:
    """The candidates keyed as ``_digit_split`` reads names (once per fact: a file may hold ~10k names)."""
    keyed, longest = _answer._keyed(cands, accents)
    split = {_digit_split(k): v for k, v in keyed.items()}
    return split, max([longest, *map(len, split)])


def _digit_split(key: tuple[str, ...]) -> tuple[str, ...]:
    """A name key with letters and digits apart ("64GB" and "64 GB" are one key)."""
    return tuple(p for w in key for p in re.findall(r"\d+|\D+", w))


def _split_words(words) -> list[tuple[str, int, int]]:
    out = []
    for w, a, _b in words.items:
        for p in re.finditer(r"\d+|\D+", w):
            out.append((p.group(), a + p.start(), a + p.end()))
    return out


def _glued(t: str, a: int, b: int) -> bool:
    """A match hyphenated (or glued, letters to digits) to a further word is part of a longer name."""
    return (t[b:b + 1] == "-" and t[b + 1:b + 2].isalnum()) or (a >= 2 and t[a - 1] == "-" and t[a - 2].isalnum()) \
        or (t[b:b + 1].isalnum()) or (a >= 1 and t[a - 1].isalnum())


def _prep(fact: dict, text: str) -> str:
    """The text as matching reads it (spans found in it index it directly)."""
    t = _answer.canon(text)
    return _answer._APOSTROPHES.sub("", t) if fact["mode"] == "exact" else t


def _mentions(fact: dict, text: str) -> list[_Mention]:
    if fact["mode"] == "numeric":
        return _numeric_mentions(fact, text) if re.search(r"\d", text) else []
    gold_keys, _sib, _keyed, _longest, _words, cands = _exact_keys(fact)
    exp = str(fact["expected"]).strip()
    if not cands and not (exp[:1].isupper() and not re.search(r"\d", exp)) and not (
            re.search(r"\d", exp) and re.search(r"\d", text)):
        folded = _answer.strip_accents(text.casefold())
        if not any(_answer.strip_accents(k[0]) in folded for k in gold_keys):
            return []  # no word of the value, and no other value of its kind can be told apart here
    return _exact_mentions(fact, text)


def _segment(text: str, mentions: list[_Mention], k: int) -> str:
    """The words that belong to the k-th mention: those since the previous mention of the sentence ("refund
    of $54.20") and those after it to the end of its clause or the next mention ("$65.80 restocking fee");
    what follows a comma or "but" belongs to the next value ("You mentioned $60, but the refund is ...")."""
    a = mentions[k - 1].span[1] if k else 0
    end = _CLAUSE_END.search(text, mentions[k].span[1])
    b = min(mentions[k + 1].span[0] if k + 1 < len(mentions) else len(text), end.start() if end else len(text))
    return text[a:mentions[k].span[0]] + " " + text[mentions[k].span[1]:b]


def _frame(text: str, mentions: list[_Mention], k: int) -> set[str]:
    """The words that say what the k-th mention is (its ``_segment``), filler and numbers left out."""
    words = re.findall(r"[^\W\d_]+", _answer._APOSTROPHES.sub("", _segment(text, mentions, k)).casefold())
    return {_stem(w) for w in words if w not in _FILLER and len(w) > 1}


def _stem(word: str) -> str:
    """A word without its inflection ("ships", "shipped", "shipping" -> "ship"), crude but enough to
    compare the frames of two statements."""
    for end in ("ing", "ed", "es", "s"):
        if word.endswith(end) and len(word) - len(end) >= 3:
            word = word[:-len(end)]
            break
    return word[:-1] if len(word) > 3 and word[-1] == word[-2] else word


def _enumerated(fact: dict, text: str, span: tuple[int, int]) -> bool:
    """The value at ``span`` is one item of a list of values of its type; the other values the agent is
    to say (its own list's, the other facts': an address's street, city and zip) are no such list."""
    after, before = text[span[1]:], text[:span[0]]
    known = [g for s in fact.get("siblings") or [] for g in [s["expected"], *s.get("aliases", [])]]
    known += fact.get("peers") or []
    if fact["mode"] == "numeric":
        nxt = re.match(_SEP + r"(" + _CURRENCY + r"\s*[-+]?\d[\d.,]*)", after)
        prev = re.search(r"(\d[\d.,]*%?)" + _SEP + _CURRENCY + r"\s*$", before)
        return any(not _known_number(m.group(1), known) and not _known_word(m.group(1), known, at)
                   for m, at in ((nxt, 0), (prev, -1)) if m)
    if fact.get("candidates"):
        return False  # the other names are known: naming one is caught as such, not guessed from capitals
    item = r"(?!(?:the|a|an|der|die|das|le|la|les|el|los|las)\b)([A-Z0-9][\w-]*)"
    nxt = re.match(_SEP + item, after)
    prev = re.search(r"([A-Za-z0-9][\w-]*)" + _SEP + r"$", before)
    return bool((nxt and not _known_word(nxt.group(1), known, 0)) or
                (prev and not _known_word(prev.group(1), known, -1)))


def _known_number(written: str, known: list) -> bool:
    found = _answer.number_readings(written.strip("$\u20ac\u00a3\u00a5# %"))
    values = [v for v in (_as_number(k) for k in known) if v is not None]
    return bool(found) and any(_answer._close(v, g, 1e-6, 1e-9) for v in found[0] for g in values)


def _known_word(word: str, known: list, at: int) -> bool:
    """``word`` is the first (``at`` 0) or last (-1) word of one of the ``known`` values."""
    w = _digit_split(_answer.name_key(word))
    return bool(w) and any(k and k[at] == w[at] for k in (_digit_split(_answer.name_key(str(g))) for g in known))


# ------------------------------------------------------------------ the statements of a fact


@dataclass
class _Event:
    where: tuple[int, int, int]
    """(message, sentence, position)."""
    kind: str
    """gold | gold-hedged | gold-neg | rival | retract."""
    text: str
    why: str = ""
    value: str = ""
    marked: frozenset = frozenset()
    """The correction words of its sentence ("sorry", "correction", "actually" ...)."""


def _read(fact: dict, said: list[tuple[object, str]]) -> tuple[list[_Event], list[tuple], set[str]]:
    """Every statement of the fact in the agent's messages; every rival as (where, mention, sentence, its
    frame words, its correction words, the fact's frame words) to be judged once the fact's own frame is
    known; the classes the fact's value is written in."""
    events, rivals, frame, frames, classes = [], [], set(), set(), set()
    frame |= _name_words(fact)
    seen = []  # (where, sentence as read, whether it states the value): the second pass reads these
    for m_i, (_turn, message) in enumerate(said):
        for u_i, unit in enumerate(_units(message)):
            canon = _prep(fact, unit)
            found = _mentions(fact, canon)
            golds = [k for k, x in enumerate(found) if x.gold]
            seen.append(((m_i, u_i), canon, bool(golds)))
            classes |= {found[k].cls for k in golds}
            marked = _marks(canon)
            for k, x in enumerate(found):
                if not x.gold:
                    x.segment = _segment(canon, found, k)
                    rivals.append(((m_i, u_i, x.span[0]), x, canon, _frame(canon, found, k), marked))
            if not golds:
                if _RETRACTION.search(canon) and not found and not re.search(r"\d", canon):
                    events.append(_Event((m_i, u_i, 0), "retract", unit.strip(), "taken back", marked=marked))
                continue
            spans = [found[k].span for k in golds]
            beside = sorted({x.value for x in found if not x.gold and x.cls == "cand"})
            why = ""
            if beside:
                why = f"stated beside {', '.join(beside[:4])}: one value is asked for"
            elif _hedged(canon, spans):
                why = f"stated with a hedge ({_hedged(canon, spans)})"
            elif any(_modal(canon, s) for s in spans):
                why = f"stated with a hedge ({next(_modal(canon, s) for s in spans if _modal(canon, s))})"
            elif any(_enumerated(fact, canon, s) for s in spans):
                why = "stated as one item of a list of values"
            pos = (m_i, u_i, spans[-1][0])
            if why:
                events.append(_Event(pos, "gold-hedged", unit.strip(), why, marked=marked))
            elif all(_negated(canon, s) for s in spans):
                events.append(_Event(pos, "gold-neg", unit.strip(), "stated with a negation", marked=marked))
            else:
                events.append(_Event(pos, "gold", unit.strip(), marked=marked))
                for k in golds:
                    frame |= _frame(canon, found, k)
                if fact["mode"] == "exact":
                    frames.add(_blanked(canon, spans))
    if frames:  # a name said again in the same words with another value in its place: another answer
        for (m_i, u_i), canon, states in seen:
            said_instead = "" if states else _restated(frames, canon)
            if said_instead and not _a_peer(fact, said_instead):
                rivals.append(((m_i, u_i, 0), _Mention((0, 0), False, said_instead, "restated"), canon, set(),
                               _marks(canon)))
    return events, [(w, x, c, f, mk, frame) for w, x, c, f, mk in rivals], classes


_BLANK = "qqvalueqq"


def _marks(canon: str) -> frozenset:
    return frozenset(re.sub(r"\s+", " ", m.group().casefold()) for m in _CORRECTION.finditer(canon))


def _words_of(text: str) -> str:
    return re.sub(r"\W+", " ", text).strip().casefold()


def _blanked(canon: str, spans: list[tuple[int, int]]) -> str:
    """The sentence's words with the value blanked out."""
    t = canon
    for a, b in sorted(spans, reverse=True):
        t = t[:a] + f" {_BLANK} " + t[b:]
    return _words_of(t)


def _a_peer(fact: dict, phrase: str) -> bool:
    """Whether ``phrase`` (as words) is the value of another fact the agent is to tell: "Here is what you asked
    about: cotton." then "...: 481.50." tells two facts, not one fact twice."""
    numbers = [v for m in _answer._NUMBER.finditer(phrase.replace(" ", ".")) for v in _answer._readings(m)]
    for peer in fact.get("peers") or []:
        if _words_of(str(peer)) == phrase:
            return True
        value = _as_number(peer)
        if value is not None and any(_answer._close(n, value, 1e-6, 1e-9) for n in numbers):
            return True
    return False


def _restated(frames: set[str], canon: str) -> str:
    """The phrase that stands where the value stood, when ``canon`` says one of the sentences ``frames``
    again with something else in the value's place ("It ships from Porto." after "It ships from Lisbon.")."""
    text = _words_of(canon).split()
    for frame in frames:
        head, _, tail = frame.partition(_BLANK)
        head, tail = head.split(), tail.split()
        middle = len(text) - len(head) - len(tail)
        if head + tail and 1 <= middle <= 4 and text[:len(head)] == head and text[len(text) - len(tail):] == tail:
            return " ".join(text[len(head):len(head) + middle])
    return ""


def _name_words(fact: dict) -> set[str]:
    """The words of the fact's ``name`` (when it has one beside its value), stemmed."""
    if not fact.get("name") or fact["name"] == str(fact["expected"]):
        return set()
    return {_stem(w) for w in re.findall(r"[^\W\d_]+", fact["name"].casefold()) if w not in _FILLER}


def judge(fact: dict, said: list[tuple[object, str]]) -> tuple[bool, str, int]:
    """(conveyed, why not, the index in ``said`` of the statement that counts; -1 when not conveyed) for
    one fact over the agent's messages."""
    if "items" in fact:
        reasons, at = [], -1
        for item in fact["items"]:
            ok, why, k = judge(item, said)
            if not ok:
                reasons.append(f"{item['name']!r}: {why}")
            at = max(at, k)
        return (not reasons, "; ".join(reasons), at if not reasons else -1)
    events, rivals, classes = _read(fact, said)
    for where, x, canon, words, marked, frame in rivals:
        if x.cls == "restated":
            events.append(_Event(where, "rival", canon.strip(), value=x.value, marked=marked))
            continue
        if x.cls not in ("cand", "shape", "name") and not (x.cls in classes or (
                x.cls.startswith("n:") and ("n:" in classes or x.cls == "n:" and classes & {"money"}))):
            continue  # a number of another kind (a count of days beside an amount)
        same_class = x.cls in classes or x.cls in ("cand", "shape")
        about = words <= frame or bool(words & _name_words(fact)) or (same_class and _RETRACTION.search(canon))
        if _negated(canon, x.span):
            continue  # "not $60": no claim
        s, e = _clause(canon, x.span)
        clause = canon[s:e] + " " + x.segment
        unit = canon.strip()
        if ((same_class or about) and _ALTERNATIVE.search(clause)) or (about and _UNSURE.search(canon)):
            return False, (f"a second candidate value, {x.value}, is offered for it "
                           f"({unit[:90]!r}): one value is asked for"), -1
        if about and (x.cls != "name" or words or _RETRACTION.search(canon)):
            if not same_class and x.cls != "name" and not (words or marked):
                continue  # a bare number with nothing to say what it is, in no correction: not a statement
            events.append(_Event(where, "rival", unit, value=x.value, marked=marked))
    events.sort(key=lambda ev: ev.where)
    golds = [i for i, ev in enumerate(events) if ev.kind == "gold"]
    if not golds:
        reasons = [ev.why for ev in events if ev.kind in ("gold-hedged", "gold-neg")]
        return False, reasons[-1] if reasons else "not stated", -1
    last = events[-1]
    if last.kind != "gold":
        what = {"rival": f"a later statement gives {last.value} instead",
                "gold-neg": "a later statement takes it back (a negation)",
                "gold-hedged": f"last stated {last.why.removeprefix('stated ')}",
                "retract": "a later statement takes it back"}[last.kind]
        return False, f"{what} ({last.text[:90]!r}): the last statement counts", -1
    g = events[golds[-1]]
    for i in range(golds[-1] - 1, -1, -1):
        ev = events[i]
        if ev.where[0] != g.where[0]:
            break
        if ev.kind in ("rival", "gold-neg", "retract"):
            # a correction word the other statement does not share ("I'm sorry, but" in both is no correction)
            corrected = any(e.marked - ev.marked and e.where[1] > ev.where[1] for e in events[i + 1:golds[-1] + 1])
            if not corrected:
                value = f" ({ev.value})" if ev.value else ""
                return False, (f"the same message also says otherwise{value} ({ev.text[:90]!r}): two answers, "
                               f"none marked as a correction"), -1
            break
    return True, "", g.where[0]


def conveyed(fact: dict, text: str) -> tuple[bool, str]:
    """Does the message ``text`` alone convey ``fact``? (ok, why not)."""
    ok, why, _ = judge(fact, [(None, text)])
    return ok, why


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
    for f in facts:  # what else the agent is to say: listed beside this fact, it is no list of candidates
        peers = [v for o in facts if o is not f for v in (o["expected"] if isinstance(o["expected"], list)
                                                          else [o["expected"], *o.get("aliases", [])])]
        for one in f.get("items") or [f]:
            one["peers"] = peers
    said = _texts(messages, answer)
    results = []
    for f in facts:
        ok, why, at = judge(f, said)
        row = {"fact": f["name"], "ok": ok}
        if ok:
            row["turn"] = said[at][0]
        else:
            row["reason"] = why if why != "not stated" else "not stated in any message to the user"
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
