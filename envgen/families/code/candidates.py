"""From raw instances to candidates: split each diff into gold and test patch, filter with reasons.

The split is by the language's test-path rules, file by file (a file is test or not as a whole, as in
SWE-bench). The filters are cheap heuristics that run before any container starts; each rejection
keeps its reason, so a build report says why every instance was dropped. ``created_at`` is carried
into the task's meta for contamination-safe (time-based) splits.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .lang import Language, RepoView
from .sources import RawInstance, has_commit


@dataclass
class Filters:
    """Heuristic filters run before any container starts; each rejection names its reason.

    The defaults follow SWE-bench's and SWE-rebench's mining: a merged PR that closes one issue, a
    statement in English that says something in words (not only a link, an image or a paste of code or
    logs), 1-15 files, the gold patch changing code and the test patch adding tests, size caps.
    ``swebench_filters()`` keeps only the structural checks for curated SWE-bench files."""

    require_merged: bool = True
    """The PR (or commit) was merged: unmerged work has no trusted fix."""
    require_one_issue: bool = True
    """GitHub only: the PR must close exactly one issue (local history and SWE-bench files have none)."""
    min_problem_chars: int = 40
    """Characters of the (cleaned) statement; shorter ones cannot specify a behaviour."""
    max_problem_chars: int = 40_000
    """Longer statements are mostly pasted logs and overflow an agent's first turn."""
    reject_link_only: bool = True
    """Reject a statement that is only a link (or links) with no words of its own."""
    reject_image_only: bool = True
    """Reject a statement that is only an image (a screenshot) with no words of its own."""
    min_prose_words: int = 5
    """Words outside links, images and code a statement needs (below it: "only a link/image/code")."""
    max_code_share: float = 0.9
    """Largest share of a statement's non-empty lines that may be code or log (fenced or indented blocks,
    tracebacks, prompts, timestamped log lines)."""
    min_latin_share: float = 0.8
    """Smallest share of the prose's letters that are ASCII Latin: a cheap "written in English" check
    (catches non-Latin scripts)."""
    min_english_word_share: float = 0.05
    """Smallest share of English function words ("the", "is", "when" ...) in prose of at least 20 words:
    catches Latin-script languages other than English."""
    min_files: int = 1
    max_files: int = 15
    """Files the whole change touches (gold and test patch together), as in SWE-bench."""
    max_gold_lines: int = 1_000
    """Changed (added + removed) lines in the gold patch."""
    max_test_lines: int = 3_000
    """Changed lines in the test patch."""
    max_patch_bytes: int = 1_000_000
    """Bytes of the whole diff (generated files, vendored code)."""


@dataclass
class Candidate:
    """A task candidate: the gold patch, the test patch, the problem statement and where they come from."""

    instance_id: str
    repo: str
    repo_path: Path
    base_commit: str
    gold_patch: str
    test_patch: str
    problem_statement: str
    language: str
    hints_text: str = ""
    created_at: str = ""
    source: str = ""
    code_files: list[str] = field(default_factory=list)
    test_files: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["repo_path"] = str(self.repo_path)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Candidate:
        return cls(**{**d, "repo_path": Path(d["repo_path"])})


@dataclass
class Rejection:
    instance_id: str
    stage: str
    """candidates | environment | validate | gate"""
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The reason without its specifics, for counting (``changes 17 files (allowed 1-15)`` -> ``changes N files``)."""
        return reason_group(self.reason)


def reason_group(reason: str) -> str:
    """A code rejection reason with its numbers and details dropped, to count rejections by kind."""
    head = reason.split(":", 1)[0].split(" (", 1)[0]
    return re.sub(r"\d+", "N", head).strip()


def split_files(diff: str) -> list[tuple[str, str]]:
    """[(path, section)] of a git diff, one section per file (its header and hunks), in order."""
    sections: list[list[str]] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git ") or not sections:
            sections.append([line])
        else:
            sections[-1].append(line)
    out = []
    for sec in sections:
        text = "".join(sec)
        path = _section_path(sec)
        if path is not None:
            out.append((path, text))
        elif text.strip():
            raise ValueError(f"cannot tell which file this diff section changes: {sec[0][:80]!r}")
    return out


def _section_path(lines: list[str]) -> str | None:
    minus = plus = None
    for line in lines[:12]:
        if line.startswith("+++ "):
            plus = line[4:].rstrip("\n").split("\t")[0]
        elif line.startswith("--- "):
            minus = line[4:].rstrip("\n").split("\t")[0]
        elif line.startswith("rename to "):
            return line[len("rename to "):].rstrip("\n")
    for p in (plus, minus):
        if p and p != "/dev/null":
            return p[2:] if p[:2] in ("a/", "b/") else p
    m = re.match(r"^diff --git a/(.+?) b/(.+)$", lines[0].rstrip("\n"))
    return m.group(2) if m else None


def split_patch(diff: str, language: Language, view: RepoView | None = None) -> tuple[str, str, list[str], list[str]]:
    """(gold patch, test patch, code files, test files): test files by the language's rules and, with
    ``view`` (the repository at the base commit), by the project's own test settings there
    (``Language.test_matcher``); the rest gold."""
    is_test = language.test_matcher(view)
    gold, test, code_files, test_files = [], [], [], []
    for path, text in split_files(diff):
        if is_test(path):
            test.append(text)
            test_files.append(path)
        else:
            gold.append(text)
            if language.is_code_path(path):
                code_files.append(path)
    return "".join(gold), "".join(test), code_files, test_files


def changed_lines(patch: str) -> int:
    return sum(1 for line in patch.splitlines()
               if (line.startswith("+") and not line.startswith("+++ ")) or
               (line.startswith("-") and not line.startswith("--- ")))


def make_candidate(raw: RawInstance, language: Language, filters: Filters | None = None) -> Candidate | Rejection:
    """The candidate for ``raw``, or the first filter it fails (with its reason). Test files are told apart
    by the language's conventions and the project's own test settings at the base commit."""
    f = filters or Filters()

    def reject(reason: str, **details) -> Rejection:
        return Rejection(raw.instance_id, "candidates", reason, details)

    if f.require_merged and not raw.merged:
        return reject("not merged")
    if f.require_one_issue and raw.source == "github" and len(raw.issues) != 1:
        return reject("no linked issue" if not raw.issues else f"links {len(raw.issues)} issues",
                      issues=raw.issues)
    n_chars = len(raw.problem_statement.strip())
    if n_chars < f.min_problem_chars:
        return reject(f"problem statement too short ({n_chars} < {f.min_problem_chars} characters)")
    if n_chars > f.max_problem_chars:
        return reject(f"problem statement too long ({n_chars} > {f.max_problem_chars} characters)")
    problem = statement_problem(raw.problem_statement, f)
    if problem:
        return reject(problem)
    files = raw.files
    if raw.test_patch is not None:
        try:
            gold_files = [p for p, _ in split_files(raw.patch)]
            test_files_all = [p for p, _ in split_files(raw.test_patch)]
        except ValueError as e:
            return reject(f"malformed patch: {e}")
        files = gold_files + test_files_all
    elif files is None:
        try:
            files = [p for p, _ in split_files(raw.patch)]
        except ValueError as e:
            return reject(f"malformed patch: {e}")
    if not (f.min_files <= len(files) <= f.max_files):
        return reject(f"changes {len(files)} files (allowed {f.min_files}-{f.max_files})")
    if raw.test_patch is not None:
        gold, test = raw.patch, raw.test_patch
        code_files = [p for p in gold_files if language.is_code_path(p)]
        test_files = test_files_all
    else:
        view = base_view(raw)
        is_test = language.test_matcher(view)
        if not any(is_test(p) for p in files):
            return reject("no test change")
        if not any(language.is_code_path(p) for p in files):
            return reject("no code change")
        if len(raw.patch.encode()) > f.max_patch_bytes:
            return reject(f"diff too large ({len(raw.patch.encode())} > {f.max_patch_bytes} bytes)")
        try:
            gold, test, code_files, test_files = split_patch(raw.patch, language, view)
        except ValueError as e:
            return reject(f"malformed patch: {e}")
    if not test.strip():
        return reject("no test change")
    if not gold.strip():
        return reject("no code change")
    if not code_files:
        return reject("gold patch changes only non-code files", files=[p for p, _ in split_files(gold)][:20])
    if not any(line.startswith("+") and not line.startswith("+++") for line in test.splitlines()):
        return reject("test patch only removes lines (no test can go from failing to passing)")
    if changed_lines(gold) > f.max_gold_lines:
        return reject(f"gold patch too large ({changed_lines(gold)} > {f.max_gold_lines} changed lines)")
    if changed_lines(test) > f.max_test_lines:
        return reject(f"test patch too large ({changed_lines(test)} > {f.max_test_lines} changed lines)")
    if raw.repo_path is None or not has_commit(raw.repo_path, raw.base_commit):
        return reject(f"base commit {raw.base_commit[:12] or '(none)'} is not in the local clone",
                      repo_path=str(raw.repo_path))
    return Candidate(instance_id=raw.instance_id, repo=raw.repo, repo_path=Path(raw.repo_path),
                     base_commit=raw.base_commit, gold_patch=gold, test_patch=test,
                     problem_statement=raw.problem_statement.strip(), language=language.name,
                     hints_text=raw.hints_text, created_at=raw.created_at, source=raw.source,
                     code_files=code_files, test_files=test_files, meta=dict(raw.meta, issues=raw.issues))


def base_view(raw: RawInstance) -> RepoView | None:
    """The repository at the instance's base commit, or None without a clone holding it (conventions only)."""
    if raw.repo_path is None or not raw.base_commit or not has_commit(raw.repo_path, raw.base_commit):
        return None
    return RepoView(raw.repo_path, raw.base_commit)


def swebench_filters() -> Filters:
    """SWE-bench files are curated: keep the structural checks only."""
    return Filters(require_one_issue=False, min_problem_chars=0, max_problem_chars=10 ** 9, max_files=10 ** 6,
                   max_gold_lines=10 ** 9, max_test_lines=10 ** 9, max_patch_bytes=10 ** 12,
                   reject_link_only=False, reject_image_only=False, max_code_share=1.0, min_latin_share=0.0,
                   min_english_word_share=0.0)


# ---------------------------------------------------------------- statement content

_FENCE = re.compile(r"^\s*(```|~~~)")
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)|<img\b[^>]*>|\bhttps?://\S+\.(?:png|jpe?g|gif|webp|svg)\b\S*", re.I)
_MD_LINK = re.compile(r"\[([^\]]*)\]\((?:[^)]*)\)")
_URL = re.compile(r"<?\bhttps?://\S+>?|\bwww\.\S+", re.I)
_LOG_LINE = re.compile(
    r"^\s*(?:Traceback \(most recent call last\)|File \"[^\"]+\", line \d+|at [\w$.<>]+\(.*\)$|>>> |\.\.\. |\$ |"
    r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\[?(?:DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL)\]?[: ]|"
    r"[\w.]+(?:Error|Exception|Warning): )")
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
ENGLISH_WORDS = frozenset(
    "the a an is are was were be been being to of in on at for with by from as and or but not no if when while "
    "this that these those it its it's i we you he she they there here which what why how does do did doesn't "
    "don't can can't cannot should would could will won't have has had than then so because".split())


def code_lines(text: str) -> tuple[int, int, list[str]]:
    """(non-empty lines, of which code or log, the prose lines): fenced and indented blocks, tracebacks,
    shell/REPL prompts and log lines count as code."""
    total = code = 0
    prose: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not line.strip():
            continue
        total += 1
        if fenced or line.startswith(("    ", "\t")) or _LOG_LINE.match(line):
            code += 1
        else:
            prose.append(line)
    return total, code, prose


def statement_problem(text: str, f: Filters) -> str | None:
    """Why a statement cannot specify a task (only a link or an image, mostly code or logs, not English),
    or None."""
    total, code, prose_lines = code_lines(text)
    prose = "\n".join(prose_lines)
    had_image = bool(_IMAGE.search(prose))
    prose = _IMAGE.sub(" ", prose)
    had_link = bool(_URL.search(prose)) or bool(_MD_LINK.search(prose))
    prose = _URL.sub(" ", _MD_LINK.sub(r"\1", prose))
    words = _WORD.findall(prose)
    if len(words) < f.min_prose_words:
        if f.reject_image_only and had_image:
            return "problem statement is only an image"
        if f.reject_link_only and had_link:
            return "problem statement is only a link"
    if total and code / total > f.max_code_share:
        return f"problem statement is mostly code or logs ({round(100 * code / total)}% of its lines)"
    letters = [c for c in prose if c.isalpha()]
    if letters:
        latin = sum(1 for c in letters if c.isascii()) / len(letters)
        if latin < f.min_latin_share:
            return f"problem statement is not in English ({round(100 * latin)}% of its letters are Latin)"
    if len(words) >= 20:
        share = sum(1 for w in words if w.lower() in ENGLISH_WORDS) / len(words)
        if share < f.min_english_word_share:
            return f"problem statement is not in English ({round(100 * share)}% English function words)"
    return None
