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

from .lang import Language
from .sources import RawInstance, has_commit


@dataclass
class Filters:
    """Heuristic filters; the defaults follow SWE-bench's mining (one issue, 1-15 files, code and tests)."""

    require_merged: bool = True
    require_one_issue: bool = True
    """GitHub only: the PR must close exactly one issue (local history and SWE-bench files have none)."""
    min_problem_chars: int = 40
    max_problem_chars: int = 40_000
    min_files: int = 1
    max_files: int = 15
    max_gold_lines: int = 1_000
    """Changed (added + removed) lines in the gold patch."""
    max_test_lines: int = 3_000
    max_patch_bytes: int = 1_000_000


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


def split_patch(diff: str, language: Language) -> tuple[str, str, list[str], list[str]]:
    """(gold patch, test patch, code files, test files): test files by the language's rules, the rest gold."""
    gold, test, code_files, test_files = [], [], [], []
    for path, text in split_files(diff):
        if language.is_test_path(path):
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
    """The candidate for ``raw``, or the first filter it fails (with its reason)."""
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
        if not any(language.is_test_path(p) for p in files):
            return reject("no test change")
        if not any(language.is_code_path(p) for p in files):
            return reject("no code change")
        if len(raw.patch.encode()) > f.max_patch_bytes:
            return reject(f"diff too large ({len(raw.patch.encode())} > {f.max_patch_bytes} bytes)")
        try:
            gold, test, code_files, test_files = split_patch(raw.patch, language)
        except ValueError as e:
            return reject(f"malformed patch: {e}")
    if not test.strip():
        return reject("no test change")
    if not gold.strip() or not code_files:
        return reject("no code change")
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


def swebench_filters() -> Filters:
    """SWE-bench files are curated: keep the structural checks only."""
    return Filters(require_one_issue=False, min_problem_chars=0, max_problem_chars=10 ** 9, max_files=10 ** 6,
                   max_gold_lines=10 ** 9, max_test_lines=10 ** 9, max_patch_bytes=10 ** 12)
