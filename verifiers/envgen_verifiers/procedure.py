"""Built-in policy checks of conversational (tau-style) domains, so a pack needs no hand-written procedure
code: ``confirmed`` (every change was described and agreed to first), ``transferred`` (a hand-off to a human
happened) and ``identified`` (the customer's identity before any access to their records).

They read the episode's order from turns: an assistant message and the calls it made share a turn, the
user's reply carries the turn it answers, so within a turn the order is message, calls, reply. A call
without a turn (a driver that does not count them) cannot be placed, and fails ``confirmed``.

``confirmed`` args::

    writes: {TOOL: [ARG, ...], ...}   the tools that change something, each with the arguments whose values
                                      the description must name (ids, item ids, amounts, addresses)
    verbs: {TOOL: [WORD, ...]}        optional: words naming the tool's action (default: the tool name's
                                      first word and its synonyms, e.g. cancel_order -> cancel, call off)

Every successful call of a listed tool needs, after the previous successful listed call and before it:

1. one assistant message that describes *that* call: a word of its action and the value of every listed
   argument (a string as written, case-insensitive, or by a name an earlier tool result gives the object it
   identifies, e.g. an item id by its product name, a payment method by its label; a number by value,
   "$54.20" for 54.2; a list: each element; an object such as an address: each of its values; a flag or
   null: nothing);
2. then a user reply whose ``dialogue.agreement`` is "yes", answering a message (the description or a
   later one) that asks for agreement (``dialogue.asks_agreement``);
3. and no "no" from the user after that yes (a regret cancels it; a new description and yes may follow).

A blanket yes before the description ("Shall I proceed with whatever is needed?") counts for nothing.

``transferred`` args::

    tool: NAME                        the hand-off tool
    args: {ARG: VALUE, ...}           optional: values the call must have (strings compared case-insensitively)

``identified`` args::

    auth: [TOOL, ...]                 tools that verify an identity: a successful call whose result is an
                                      object with ``id_key`` (and not ``verified: false``), or a bare id string
    access: [TOOL, ...]               tools that read or change the customer's records
    customer: ID | null               the customer of the conversation (null: their identity cannot be verified,
                                      so no record may be accessed at all)
    id_key: "customer_id"             where an auth result holds the verified id
    told: [ARG, ...]                  arguments whose values must come from the user: in a successful verifying
                                      auth call or access call, the value appears in an earlier user message

The first verified identity must be the customer; no access call before it.
"""

from __future__ import annotations

import json
import re

from . import dialogue

SYNONYMS = (
    ("cancel", "call off", "void", "annul"),
    ("modify", "change", "update", "edit", "alter", "amend", "switch", "adjust"),
    ("return", "send back", "refund"),
    ("exchange", "swap", "replace", "switch", "trade"),
    ("transfer", "hand over", "hand off", "connect", "escalate"),
    ("book", "reserve", "purchase", "buy"),
    ("send", "issue", "grant"),
    ("add", "include", "append"),
    ("remove", "delete", "drop", "take off"),
    ("upgrade", "change", "switch"),
    ("downgrade", "change", "switch"),
    ("refuel", "top up", "add data", "recharge"),
    ("enable", "turn on", "activate"),
    ("disable", "turn off", "deactivate"),
    ("suspend", "pause"),
    ("resume", "reactivate", "restore"),
    ("reset", "restart"),
    ("create", "open", "set up"),
)
"""Words that name the same action: a tool named by its first word ("cancel_order") is also described by
the others of that word's groups."""
NAME_KEYS = ("name", "product", "product_name", "title", "label", "description", "full_name")
"""Fields of a tool result that name the object they sit in: an id can be described by them."""
OPTION_KEYS = ("options", "attributes", "specs", "properties", "features")
"""Fields of a tool result whose flat object of values, said together, names a variant ("color white, finish
matte")."""


def _stem(word: str) -> str:
    w = word.lower()
    return w[:-1] if len(w) > 4 and w[-1] in "ey" else w


_INFLECTION = (r"(?:e|es|ed|d|s|ing|ling|led|red|ring|ped|ping|ion|ions|ation|ations|lation|lations|ication|ment|ments|"
               r"al|y|ied|ies|ition)?")
"""Endings of a verb's forms ("cancel": cancelled, cancellation; "modify": modified, modification), never any
word that merely starts like one ("add" is not "address")."""


def action_pattern(words) -> re.Pattern:
    """Matches any of ``words`` in any of its forms."""
    alts = sorted({r"\s+".join(re.escape(_stem(p)) + _INFLECTION if k == 0 else re.escape(p)
                               for k, p in enumerate(w.split())) for w in words if w.strip()}, key=len, reverse=True)
    return re.compile(r"(?<![\w])(?:" + "|".join(alts) + r")(?![\w])", re.I)


def verbs_for(tool: str, given=None) -> list[str]:
    """The words naming ``tool``'s action: ``given``, else its name's first word and that word's synonyms."""
    if given:
        return [str(w) for w in given]
    first = re.split(r"[_\W]+|(?<=[a-z])(?=[A-Z])", tool.strip())[0].lower()
    out = [first]
    for group in SYNONYMS:
        if first in group:
            out += [w for w in group if w not in out]
    return out


# ------------------------------------------------------------------ naming values


_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])")


def _numbers(text: str) -> list[float]:
    out = []
    for m in _NUMBER.finditer(text):
        try:
            out.append(float(m.group().replace(",", "")))
        except ValueError:
            continue
    return out


def _says(text: str, phrase: str) -> bool:
    """``phrase`` in ``text`` as whole words, case-insensitive, any run of spaces or punctuation between."""
    words = [w for w in re.split(r"\W+", phrase.strip()) if w]
    if not words:
        return False
    pattern = r"(?<![A-Za-z0-9])" + r"[\W_]*".join(re.escape(w) for w in words) + r"(?![A-Za-z0-9])"
    return re.search(pattern, text, re.I) is not None


def _result(call: dict):
    try:
        return json.loads(call.get("content") or "")
    except (TypeError, ValueError):
        return call.get("content")


def _objects(obj):
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _objects(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _objects(v)


def names_of(value: str, seen: list) -> list[list[str]]:
    """Other ways to name ``value``: for each object of an earlier tool result (``seen``) that holds it as
    a field, its name fields (one phrase each) and its flat object of options (``OPTION_KEYS``: all of its
    values together, e.g. {"color": "white", "size": "M"})."""
    out: list[list[str]] = []
    for res in seen:
        for obj in _objects(res):
            if not any(isinstance(v, (str, int)) and not isinstance(v, bool) and str(v) == value
                       for v in obj.values()):
                continue
            for k in NAME_KEYS:
                if isinstance(obj.get(k), str) and obj[k].strip() and obj[k] != value:
                    out.append([obj[k]])
            for k in OPTION_KEYS:
                v = obj.get(k)
                if isinstance(v, dict) and v and all(isinstance(x, (str, int, float)) and not isinstance(x, bool)
                                                    for x in v.values()):
                    out.append([str(x) for x in v.values()])
    return out


def named(value, text: str, seen: list) -> bool:
    """Does ``text`` name ``value`` (see the module docstring)?"""
    if value is None or isinstance(value, bool):
        return True  # nothing to say for a flag or an absent value
    if isinstance(value, (int, float)):
        return any(abs(n - float(value)) <= 1e-6 * max(1.0, abs(float(value))) for n in _numbers(text))
    if isinstance(value, list):
        return all(named(v, text, seen) for v in value)
    if isinstance(value, dict):
        return all(named(v, text, seen) for v in value.values())
    value = str(value)
    if not value.strip() or _says(text, value):
        return True
    if re.fullmatch(r"\s*[-+]?\d+(?:\.\d+)?\s*", value) and named(float(value), text, seen):
        return True
    return any(all(_says(text, p) for p in phrases) for phrases in names_of(value, seen))


def describes(text: str, call: dict, keys, verbs, seen: list) -> str:
    """Why ``text`` does not describe ``call`` ("" when it does): its action named, every key value named."""
    if not action_pattern(verbs).search(text):
        return f"names no action of {call.get('tool')} ({', '.join(verbs[:4])})"
    args = call.get("args") or {}
    for key in keys:
        if key in args and not named(args[key], text, seen):
            return f"does not name its {key} ({json.dumps(args[key], ensure_ascii=False)[:60]})"
    return ""


# ------------------------------------------------------------------ confirmed


def check_confirmed(args: dict, *, calls: list | None = None, messages: list | None = None, **_) -> dict:
    writes = args.get("writes")
    if not isinstance(writes, dict) or not writes:
        raise ValueError("confirmed verifier needs args.writes: {tool: [argument names the description must name]}")
    verbs = args.get("verbs") or {}
    msgs = [m for m in messages or [] if isinstance(m, dict) and m.get("turn") is not None]
    calls = list(calls or [])
    prev, seen, checked = 0, [], []
    for i, c in enumerate(calls):
        tool = c.get("tool")
        if tool in writes and c.get("ok"):
            turn = c.get("turn")
            if turn is None:
                return {"reward": 0.0, "details": {"reason": f"call {i} ({tool}) has no turn: the driver recorded no "
                                                             "order of messages and calls", "writes": checked}}
            why, turns = _agreed(c, writes[tool] or [], verbs_for(tool, verbs.get(tool)), seen,
                                 [m for m in msgs if prev < m["turn"] < turn])
            checked.append({"call": i, "tool": tool, "ok": not why, **turns, **({"reason": why} if why else {})})
            if why:
                return {"reward": 0.0, "details": {"reason": f"call {i} ({tool}): {why}", "writes": checked}}
            prev = turn
        if c.get("ok"):
            seen.append(_result(c))
    return {"reward": 1.0, "details": {"writes": checked}}


def _agreed(call: dict, keys, verbs, seen: list, window: list) -> tuple[str, dict]:
    """(why the messages of ``window`` (after the previous write, before ``call``) do not confirm it, or "";
    the turns of the first description and of the standing yes)."""
    turns: dict = {}
    asked, near = False, ""
    for m in window:
        text = str(m.get("content") or "")
        if m.get("role") == "assistant":
            why = describes(text, call, keys, verbs, seen)
            if not why:
                turns.setdefault("described", m["turn"])
            elif "described" not in turns and text.strip():
                near = why
            asked = "described" in turns and dialogue.asks_agreement(text)
        elif m.get("role") == "user":
            said = dialogue.agreement(text)
            if said == "yes" and asked:
                turns["agreed"] = m["turn"]
            elif said == "no":
                turns.pop("agreed", None)
                turns["declined"] = m["turn"]
            asked = False
    if "described" not in turns:
        return "no message after the previous change describes it" + (f" (the closest {near})" if near else ""), turns
    if "agreed" not in turns:
        return "the user did not agree after its description (or took the yes back) before the call", turns
    return "", turns


# ------------------------------------------------------------------ transferred


def _same(want, got) -> bool:
    if isinstance(want, str) and isinstance(got, str):
        return want.strip().lower() == got.strip().lower()
    if isinstance(want, (int, float)) and isinstance(got, (int, float)) and not isinstance(want, bool):
        return abs(float(want) - float(got)) <= 1e-9
    return want == got


def check_transferred(args: dict, *, calls: list | None = None, **_) -> dict:
    tool = args.get("tool")
    if not isinstance(tool, str) or not tool:
        raise ValueError("transferred verifier needs args.tool: the name of the hand-off tool")
    want = args.get("args") or {}
    made = [c for c in calls or [] if c.get("tool") == tool and c.get("ok")]
    for c in made:
        got = c.get("args") or {}
        if all(k in got and _same(v, got[k]) for k, v in want.items()):
            return {"reward": 1.0, "details": {"transferred": c.get("args")}}
    why = (f"no successful {tool} call" if not made else
           f"no {tool} call with {json.dumps(want, ensure_ascii=False)[:120]}")
    return {"reward": 0.0, "details": {"reason": why}}


# ------------------------------------------------------------------ identified


def _verified(call: dict, id_key: str):
    """The id an auth call verified, or None."""
    if not call.get("ok"):
        return None
    res = _result(call)
    if isinstance(res, dict):
        if res.get("verified") is False:
            return None
        got = res.get(id_key)
        return str(got) if got not in (None, "") else None
    if isinstance(res, str) and res.strip() and len(res.strip()) <= 80 and "\n" not in res.strip():
        return res.strip()
    return None


def _told(value, turn, messages: list) -> bool:
    """Did the user say ``value`` in a message before the call of ``turn``?"""
    want = str(value).strip().lower()
    if not want:
        return True
    for m in messages:
        if m.get("role") != "user" or want not in str(m.get("content") or "").lower():
            continue
        if turn is None or m.get("turn") is None or m["turn"] < turn:
            return True
    return False


def check_identified(args: dict, *, calls: list | None = None, messages: list | None = None, **_) -> dict:
    auth, access = args.get("auth"), args.get("access")
    if not isinstance(auth, list) or not auth or not isinstance(access, list):
        raise ValueError("identified verifier needs args.auth (a non-empty list of tools) and args.access (a list)")
    customer = args.get("customer")
    id_key = args.get("id_key") or "customer_id"
    told = args.get("told") or []
    messages = [m for m in messages or [] if isinstance(m, dict)]
    verified = None

    def fail(why: str) -> dict:
        return {"reward": 0.0, "details": {"reason": why, "verified": verified}}

    def untold(i: int, c: dict) -> str:
        for key in told:
            value = (c.get("args") or {}).get(key)
            if value is not None and not _told(value, c.get("turn"), messages):
                return (f"call {i} ({c.get('tool')}) uses a {key.replace('_', ' ')} ({str(value)[:40]!r}) the user "
                        "never gave")
        return ""

    for i, c in enumerate(calls or []):
        tool = c.get("tool")
        if tool in auth and verified is None:
            got = _verified(c, id_key)
            if got is None:
                continue
            verified = got
            why = untold(i, c)
            if why:
                return fail(why)
            if customer is None or str(customer) != got:
                return fail(f"call {i}: verified {got}, but the user of this conversation is "
                            f"{customer if customer is not None else 'not verifiable'}")
        elif tool in access:
            if verified is None:
                return fail(f"call {i} ({tool}) reaches the customer's records before their identity was verified")
            why = untold(i, c) if c.get("ok") else ""
            if why:
                return fail(why)
    if customer is not None and verified is None:
        return fail("the customer's identity was never verified")
    return {"reward": 1.0, "details": {"verified": verified}}
