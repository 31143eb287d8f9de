"""The specification judge: does a task's problem statement specify what its FAIL_TO_PASS tests check?

SWE-bench Verified had annotators score each issue 0-3 (0 well-specified, 1 some blanks with a sensible
interpretation, 2 vague, 3 nearly impossible to understand) against the tests that judge a fix; this
is that annotation by an LLM behind any OpenAI-compatible endpoint (``envgen.llm.client.LLMClient``).
It runs after validation, because it needs the FAIL_TO_PASS test names and the test patch. Scores map
to three labels (``SPEC_LEVELS``: well-specified, needs-interpretation, underspecified for 2 and 3);
the label goes into the task's ``meta.spec`` and ``--min-spec`` rejects tasks below a level.

Resuming costs nothing: the client caches every paid response in the build store by request hash, and
a judged task's result is part of its stored stage result, so a rerun makes no model call for it. A
reply that does not parse is answered with the problem and asked again (``max_attempts``); a judge that
never answers usably raises ``JudgeError`` (the task is retried on the next run, never guessed).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from ...errors import EnvgenError, InputError, JudgeError, LLMError
from ...llm.client import LLMClient, LLMConfig, TranscriptFile, Usage
from ...llm.judge import _objects
from ...llm.roles import load_spec

SPEC_LEVELS = ("well-specified", "needs-interpretation", "underspecified")
"""Best first. SWE-bench Verified's scores 0, 1 and 2-3."""
ROLE = "spec-judge"
MAX_PATCH_CHARS = 24_000
"""The test patch shown to the judge is cut to this many characters (tests are long; the names say most)."""

INSTRUCTIONS = """You annotate whether an issue specifies the behaviour its hidden FAIL_TO_PASS tests check.
Score 0 (well-specified), 1 (needs interpretation, but a sensible reading passes the tests), 2 (underspecified:
vague, or the tests check what the issue never mentions) or 3 (impossible to understand without more).
Reply with one JSON object: {"score": <0|1|2|3>, "reason": "<short>"}"""


def spec_label(score: int) -> str:
    """The label of a SWE-bench Verified score (0-3)."""
    return SPEC_LEVELS[min(int(score), 2)]


def meets(label: str, minimum: str | None) -> bool:
    """Whether ``label`` is at least as good as ``minimum`` (None: every label)."""
    if minimum is None:
        return True
    check_level(minimum)
    return SPEC_LEVELS.index(label) <= SPEC_LEVELS.index(minimum)


def check_level(level: str) -> str:
    if level not in SPEC_LEVELS:
        raise InputError(f"--min-spec {level!r}: use one of {', '.join(SPEC_LEVELS)}")
    return level


@dataclass
class SpecJudgement:
    label: str
    score: int
    """SWE-bench Verified's 0-3."""
    reason: str
    model: str
    attempts: int
    cached: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_spec_reply(text: str) -> tuple[int, str]:
    """(score 0-3, reason) from the judge's reply: the last JSON object with a ``score``; ValueError if none."""
    clean = re.sub(r"<think>.*?</think>", "", text or "", flags=re.DOTALL | re.IGNORECASE)
    for obj in _objects(clean):
        if "score" not in obj:
            continue
        score = obj["score"]
        if isinstance(score, str) and score.strip().isdigit():
            score = int(score.strip())
        if isinstance(score, bool) or not isinstance(score, int) or not 0 <= score <= 3:
            raise ValueError(f"\"score\" must be 0, 1, 2 or 3, got {json.dumps(obj['score'])}")
        return score, str(obj.get("reason") or "")
    raise ValueError("no JSON object with a \"score\" key found in the reply")


def _prompt(problem: str, fail_to_pass: list[str], test_patch: str) -> str:
    patch = test_patch if len(test_patch) <= MAX_PATCH_CHARS else \
        test_patch[:MAX_PATCH_CHARS] + f"\n[... {len(test_patch) - MAX_PATCH_CHARS} more characters cut]"
    tests = "\n".join(f"- {t}" for t in fail_to_pass[:200])
    return (f"<issue>\n{problem}\n</issue>\n\nFAIL_TO_PASS tests (fail before the fix, pass after it):\n{tests}\n\n"
            f"The test patch that adds or changes them:\n<test_patch>\n{patch}\n</test_patch>\n\n"
            "Score the issue: one JSON object {\"score\": 0-3, \"reason\": \"...\"}.")


class SpecJudge:
    """Scores statements against their FAIL_TO_PASS tests with one LLM call each (more only to repair a reply).

    Args:
        llm: an LLMClient (give it the build store as cache, so reruns replay) or an LLMConfig.
        max_attempts: replies per statement before giving up on an unparseable judge.
        instructions: the system prompt (default: the ``spec-judge`` role in agents/).
    """

    def __init__(self, llm: LLMClient | LLMConfig, *, max_attempts: int = 3, instructions: str | None = None):
        if max_attempts < 1:
            raise InputError(f"max_attempts must be at least 1 (got {max_attempts})")
        self.llm = llm if isinstance(llm, LLMClient) else LLMClient(llm)
        self.max_attempts = max_attempts
        if instructions is None:
            try:
                instructions = load_spec(ROLE).instructions
            except EnvgenError:
                instructions = INSTRUCTIONS
        self.instructions = instructions
        self.usage = Usage()

    def judge(self, instance_id: str, problem: str, fail_to_pass: list[str], test_patch: str, *,
              transcript: TranscriptFile | None = None) -> SpecJudgement:
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.instructions},
                                          {"role": "user", "content": _prompt(problem, fail_to_pass, test_patch)}]
        last = ""
        cached = True
        for attempt in range(1, self.max_attempts + 1):
            try:
                done = self.llm.complete(messages, None, salt=f"spec|{instance_id}", transcript=transcript,
                                         usage=self.usage, agent=f"{ROLE}/{instance_id}")
            except LLMError as e:
                raise JudgeError(f"spec judge for {instance_id}: the model failed: {e}") from None
            cached = cached and done.cached
            text = done.message.get("content") or ""
            try:
                score, reason = parse_spec_reply(text)
            except ValueError as e:
                last = str(e)
                messages = messages + [{"role": "assistant", "content": text},
                                       {"role": "user", "content": f"Your reply could not be used: {last}. Reply "
                                        "with only the JSON object {\"score\": 0-3, \"reason\": \"...\"}."}]
                continue
            return SpecJudgement(spec_label(score), score, reason, self.llm.config.model, attempt, cached)
        raise JudgeError(f"spec judge for {instance_id}: no usable score in {self.max_attempts} replies "
                         f"(last problem: {last})")
