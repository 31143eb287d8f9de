"""Reading consent in a conversation: does the agent ask the user's agreement to an action, and does the
user's reply agree? (stdlib only; shared by the ``confirmed`` verifier and the scripted user, so the customer
who answers and the grader who checks read a question the same way.)

A consent question is any wording that asks whether the agent may *do* something ("Shall I proceed?", "Is
that OK with you?", "Would you like me to do that?", "Can I go ahead and cancel it?"), not a question about
facts ("Which order?", "What is your email?", "Should I look at order W123?": looking something up needs no
consent). "Is that correct?" asks about facts unless the same message announces an action of the agent's
("I'll cancel order W123 ... Is that correct?"). Magic words are not required: the point of training on the
scripted user is the act of asking, not a phrase.
"""

from __future__ import annotations

import re

_SENTENCES = re.compile(r"(?<=[?!.])\s+|\n+")

_INFO_VERBS = (r"look|looking|check|checking|search|find|see|verify|review|pull|fetch|read|tell|explain|show|list|"
               r"have|get|know|ask|help|assist|clarify|note|share|describe|walk|find out|look up|go over|"
               r"confirm your|provide|give|"
               r"spell|enter|hear|learn|repeat|inform|answer|investigate|research|locate|identify|authenticate|"
               r"confirm the (?:email|zip|address|name|order number|spelling|details)|take a look|double[- ]check")
"""What the agent may do without anyone's consent: finding things out, helping, explaining."""
_ACT_VERBS = (r"go ahead|proceed|continue|go on|do|cancel|return|exchange|modify|change|update|edit|book|place|"
              r"submit|process|issue|refund|apply|make|transfer|send|delete|remove|add|upgrade|downgrade|switch|"
              r"reschedule|move|ship|reset|file|open|close|charge|pay|set|put|finali[sz]e|complete|initiate|start|"
              r"execute|replace|swap|rebook|purchase|buy|activate|deactivate|suspend|enable|disable|"
              r"redirect|create|register|sign|renew|extend|reduce|increase|lower|raise|go|move forward|finish")
"""Verbs of changing something: asking whether to do one of these asks for consent."""

_ASKER = re.compile(
    r"\b(?:shall|should|can|could|may|might)\s+(?:i|we)\b|"
    r"\b(?:do|would)\s+you\s+(?:want|like|wish|prefer)\s+(?:me|us)\s+to\b|\byou\s+want\s+me\s+to\b|"
    r"\b(?:do|would)\s+you\s+(?:want|like|wish|prefer)\s+to\b|\bwant\s+me\s+to\b|"
    r"\b(?:is|would)\s+it\s+be\s+(?:ok|okay|alright|all right|fine)\s+(?:if|to|for)\b|"
    r"\bis\s+it\s+(?:ok|okay|alright|all right|fine)\s+(?:if|to|for)\b|"
    r"\b(?:are\s+you\s+)?ready\s+for\s+me\s+to\b|\blet\s+me\s+know\s+(?:if|whether)\s+(?:i|we)\s+(?:should|can|"
    r"may)\b|"
    r"\b(?:if|whether)\s+you(?:['\u2019]d|\s+would)\s+like\s+me\s+to\b|\b(?:if|whether)\s+you\s+want\s+me\s+to\b",
    re.I)
"""A question whose verb follows: consent when that verb changes something (or none is named: "Shall I?")."""
_INFO = re.compile(r"(?:" + _INFO_VERBS + r")\b", re.I)
_ACT = re.compile(r"\b(?:" + _ACT_VERBS + r")\b", re.I)
_ASSENT = re.compile(
    r"\b(?:is|are|would|will)\s+(?:that|this|it|these|those)(?:\s+\w+){0,2}\s+(?:be\s+)?"
    r"(?:ok|okay|alright|all right|fine|acceptable|agreeable|good|alright with you|what you want|"
    r"what you(?:['\u2019]d| would) like)\b|"
    r"\b(?:does|would|will)\s+(?:that|this|it)\s+(?:work|suit|sound\s+(?:good|ok|okay|fine|alright|right|"
    r"like a plan))\b|"
    r"\bsounds?\s+(?:good|ok|okay|fine|alright|right)\s*\?|"
    r"\b(?:are|were)\s+you\s+(?:ok|okay|alright|all right|fine|happy|comfortable|good)\s+with\b|"
    r"\bdo\s+you\s+(?:agree|approve|consent|accept|authori[sz]e|confirm)\b|"
    r"\b(?:do|may|can)\s+(?:i|we)\s+have\s+your\s+(?:permission|consent|approval|authori[sz]ation|go[- ]ahead|ok|"
    r"okay|agreement|confirmation)\b|"
    r"\b(?:i|we)\s+(?:need|want|require)\s+your\s+(?:permission|consent|approval|authori[sz]ation|go[- ]ahead|ok|"
    r"okay|agreement|explicit\s+confirmation|confirmation)\b|"
    r"\bare\s+you\s+sure\b|\bgo\s+ahead\s*\?|\bproceed\s*\?|\bok(?:ay)?\s*\?\s*$|"
    r"\b(?:yes\s*/\s*no|y\s*/\s*n)\b|\(\s*yes\s+or\s+no\s*\)",
    re.I)
"""A question asking to approve what was just described ("Is that OK with you?", "Does that work for you?")."""
_CONFIRM = re.compile(
    r"\b(?:please|can\s+you|could\s+you|would\s+you|kindly)\s+confirm\b"
    r"(?!\s+(?:your|which|what|whether|the\s+(?:e-?mail|zip|address|name|order|spelling|phone|number|id|items?|"
    r"products?|account|payment|date|amount|price|size|colou?r)))|\bsay\s+the\s+word\b|"
    r"\b(?:reply|say|answer|respond|type)\s+(?:with\s+)?['\"\u201c]?(?:yes|y|confirm|ok)\b|"
    r"\blet\s+me\s+know\s+(?:if|whether)\s+(?:you(?:['\u2019]d|\s+would)\s+like\s+(?:me\s+)?to|"
    r"you\s+want\s+(?:me\s+)?to|"
    r"(?:that|this|it)(?:['\u2019]s|\s+is)\s+(?:ok|okay|fine|alright))|"
    r"\bconfirm\s*\?\s*$",
    re.I)
"""An explicit request for confirmation ("Please confirm and I'll proceed.", "Reply yes to go ahead.")."""
_CORRECT = re.compile(r"\b(?:is|does)\s+(?:that|this|everything|all\s+(?:of\s+)?(?:that|this))\s+(?:\w+\s+)?"
                      r"(?:correct|right|accurate)\b|\b(?:correct|right)\s*\?\s*$", re.I)
_ANNOUNCE = re.compile(
    r"\b(?:i|we)(?:['\u2019]ll|\s+will|\s+would|['\u2019]d|\s+am\s+going\s+to|['\u2019]m\s+going\s+to|\s+can|"
    r"\s+am\s+about\s+to|['\u2019]m\s+about\s+to)\s+(?:now\s+|then\s+|go\s+ahead\s+and\s+)?(?:" + _ACT_VERBS + r")\b|"
    r"\blet\s+me\s+(?:" + _ACT_VERBS + r")\b|\bhere(?:['\u2019]s|\s+is)\s+what\s+i(?:['\u2019]ll|\s+will)\b",
    re.I)
"""The agent announcing a change of its own ("I'll cancel order W123 ...")."""


def _questions(text: str) -> list[str]:
    """The sentences of ``text`` that ask something (end in "?") or request an answer ("Please confirm.")."""
    out = []
    for s in _SENTENCES.split(str(text or "")):
        s = s.strip()
        if s and (s.endswith("?") or "?" in s or _CONFIRM.search(s)):
            out.append(s)
    return out


_FILLER = re.compile(r"^\W*(?:(?:first|just|quickly|also|now|then|please|still|go\s+ahead\s+and|"
                     r"go\s+on\s+and)\s+)*", re.I)
_WH = re.compile(r"^\W*(?:what|which|where|when|who|whom|whose|how|why)\b", re.I)
_THEN = re.compile(r"\b(?:and|then|to)\s+(?:then\s+)?(?:" + _ACT_VERBS + r")\b", re.I)


def _asks(sentence: str) -> bool:
    if _CONFIRM.search(sentence):
        return True
    for m in _ASSENT.finditer(sentence):  # "How would you like to proceed?" asks for a choice, not a yes
        if not _WH.match(re.split(r"[,;:\u2013\u2014]", sentence[:m.start()])[-1]):
            return True
    for m in _ASKER.finditer(sentence):
        clause = re.split(r"[,;:\u2013\u2014]", sentence[:m.start()])[-1]
        if _WH.match(clause):  # "What else can I do for you?": a question for information
            continue
        rest = _FILLER.sub("", re.split(r"[?.!;]", sentence[m.end():], maxsplit=1)[0])
        if _INFO.match(rest):  # "Should I look at order W123?" unless a change follows ("... and cancel it?")
            if _THEN.search(rest):
                return True
            continue
        # a verb of change, none ("Shall I?", "Can I go ahead?"), or one of neither kind: asking whether to act
        return True
    return False


def asks_agreement(text: str) -> bool:
    """Whether the agent's message ``text`` asks the user's consent to an action (not a question of fact)."""
    qs = _questions(text)
    if any(_asks(q) for q in qs):
        return True
    if _ANNOUNCE.search(str(text or "")):
        return any(_CORRECT.search(q) for q in qs)
    return False


_POSITIVE_NO = re.compile(r"\b(?:no\s+(?:problem|worries|objections?|issue|doubt)|not\s+a\s+problem|why\s+not|"
                          r"(?:i\s+)?don['\u2019]?t\s+(?:mind|worry)|can['\u2019]?t\s+wait|no\s+reason\s+not\s+to|"
                          r"of\s+course\s+not\s+a\s+problem)\b", re.I)
"""Phrases with a negation that agree ("No problem, go ahead."): read as yes, taken out before looking for no."""
_UNSURE = re.compile(r"\b(?:not\s+(?:sure|certain)|unsure|don['\u2019]?t\s+know|no\s+idea|no\s+longer|no\s+more)\b",
                     re.I)
"""Neither yes nor no: hesitation, and negations that state a fact ("I no longer need it")."""
_NO = re.compile(
    r"\b(?:no|nope|nah|nay|negative|stop|decline|declined|refuse)\b|"
    r"\b(?:please\s+)?(?:don['\u2019]?t|do\s+not)(?:\s+(?:do|go|proceed|continue|cancel|change|make|touch|return|"
    r"exchange|modify|update|book|process|submit|transfer|want|need|bother|record|keep|charge|refund|send|ship|apply|remove|delete|it|that|this)\b|\s*[.!,]|\s*$)|"
    r"\b(?:i|we)\s+(?:do\s+not|don['\u2019]?t)\s+(?:want|wish|need|agree|approve|consent)\b|"
    r"\bchanged?\s+my\s+mind\b|\bnever\s*mind\b|\b(?:i['\u2019]?d|i\s+would)\s+rather\s+(?:not|"
    r"you\s+didn['\u2019]?t)\b|"
    r"\brather\s+not\b|\bhold\s+(?:off|on)\b|\bnot\s+(?:now|yet|anymore|any\s+more)\b|\blet['\u2019]?s\s+not\b|"
    r"\bon\s+second\s+thought\b|\bcancel\s+that\s+request\b|\bscratch\s+that\b|\bforget\s+(?:it|that|about\s+it)\b|"
    r"\bnot\s+(?:ok|okay|alright|fine|correct|right|good|what\s+i\s+(?:want|asked|meant))\b|"
    r"\b(?:that|this|it)(?:['\u2019]s|\s+is)\s+(?:wrong|incorrect)\b|\bi\s+disagree\b|\bwait\b(?=.*\b(?:mind|not|"
    r"don))",
    re.I)
"""Declining or taking a yes back ("No, don't.", "Actually, wait, I changed my mind, please don't")."""
_YES = re.compile(
    r"\b(?:yes|yeah|yea|yep|yup|aye|sure|ok|okay|alright|all\s+right|absolutely|definitely|certainly|affirmative|"
    r"please\s+(?:do|proceed|go\s+ahead)|do\s+it|go\s+(?:ahead|for\s+it)|proceed|of\s+course|by\s+all\s+means|"
    r"sounds\s+(?:good|great|fine|right|ok|okay)|(?:that|this|it)\s+works|works\s+for\s+me|"
    r"let['\u2019]?s\s+(?:do\s+it|go|proceed)|"
    r"i\s+(?:agree|approve|consent|accept|confirm|authori[sz]e)|confirmed|agreed|approved|fine\s+(?:by|with)\s+me|"
    r"(?:that|this|it)(?:['\u2019]?s|\s+is)\s+(?:right|correct|fine|ok|okay|good|great|perfect|alright))\b|"
    r"^\W*(?:(?:oh|well|um+|hm+|yes|great)\W+)?(?:correct|right|fine|perfect|great|confirm|please\s*(?:[.!]|$))",
    re.I)
"""Agreeing ("Yes, please go ahead.", "Sure.", "OK, do it", "That's fine"); words that also occur in other
statements ("correct", "fine", "please") only at the start of the reply ("Correct.", but not "the correct
address is ...")."""


def _blank(text: str, pattern: re.Pattern) -> str:
    return pattern.sub(lambda m: " " * len(m.group()), text)


def agreement(text: str) -> str | None:
    """How the user's message ``text`` answers a consent question: "yes", "no", or None (neither: a question
    back, an unrelated reply, hesitation). When both appear the later stance wins ("Yes. Actually, no."). A
    sentence that asks something back ("OK, what's the fee?") agrees to nothing yet."""
    t = str(text or "")
    noes, yeses, pos = [], [], 0
    for sentence in re.split(r"(?<=[?!.\n])", t):
        positive = [pos + m.start() for m in _POSITIVE_NO.finditer(sentence)]
        masked = _blank(_blank(sentence, _POSITIVE_NO), _UNSURE)
        asks = sentence.rstrip().endswith("?")
        found = [m for m in _NO.finditer(masked) if not (asks and m.group().strip().lower() == "no")]
        noes += [pos + m.start() for m in found]
        for m in found:  # a word character: a "No" taken out does not make what follows a sentence's start
            masked = masked[:m.start()] + "_" * (m.end() - m.start()) + masked[m.end():]
        if not asks:
            yeses += positive + [pos + m.start() for m in _YES.finditer(masked)]
        pos += len(sentence)
    if noes and (not yeses or max(noes) > max(yeses)):
        return "no"
    return "yes" if yeses else None
