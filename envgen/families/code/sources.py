"""Where code tasks come from: GitHub pull requests and the issues they close, local git history,
SWE-bench files. Every source yields ``RawInstance``s; splitting and filtering happen in candidates.

GitHub is read through its REST API with httpx: merged PRs of a repository (paginated by Link
headers), the issues each closes (closing keywords in its title, body and commit messages), its diff,
and the issue comments written before the fix started (SWE-bench's hints). Requests carry
``GITHUB_TOKEN`` when set, wait out rate limits (403/429 with ``retry-after`` or
``x-ratelimit-reset``), and are conditional: every response is cached with its ETag and asked again
with ``If-None-Match``, so an unchanged resource costs a 304 (which GitHub does not count against
the rate limit). A PR whose ``updated_at`` has not moved is not asked about at all, and the PR list
is read newest-updated first only down to the previous run's high-water mark: a rerun asks GitHub
only for what is new.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

from ...errors import GitHubError, InputError, ServiceError
from ...paths import cache_dir
from .lang import Language, RepoView
from .languages import detect_language

API = "https://api.github.com"
CLOSING = re.compile(
    r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b:?\s+"
    r"(?:(?P<owner>[\w.-]+)/(?P<name>[\w.-]+))?#(?P<num>\d+)"
    r"|\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\b:?\s+https?://github\.com/(?P<uowner>[\w.-]+)/(?P<uname>[\w.-]+)"
    r"/issues/(?P<unum>\d+)",
    re.I)
SWEBENCH_FIELDS = ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement")
"""Fields a SWE-bench instance must have; FAIL_TO_PASS, PASS_TO_PASS, version, environment_setup_commit,
hints_text and created_at are optional."""


@dataclass
class RawInstance:
    """One proposed task before splitting and filtering."""

    instance_id: str
    repo: str
    """``owner/name`` (GitHub, SWE-bench) or the local repository's folder name."""
    base_commit: str
    patch: str
    """The whole diff (code and tests), or only the gold part when ``test_patch`` is given."""
    repo_path: Path | None = None
    """A local clone holding ``base_commit``."""
    test_patch: str | None = None
    problem_statement: str = ""
    hints_text: str = ""
    created_at: str = ""
    merged: bool = True
    issues: list[int] = field(default_factory=list)
    """Issues the change closes (GitHub); the filter wants exactly one."""
    files: list[str] | None = None
    """Paths the change touches, when known before its diff is read."""
    source: str = ""
    """github | git | swebench"""
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["repo_path"] = str(self.repo_path) if self.repo_path else None
        return d


def closing_issues(text: str, repo: str) -> list[int]:
    """Issue numbers of ``repo`` that closing keywords in ``text`` name (``Fixes #12``, ``closes o/r#3``, URLs)."""
    owner, name = repo.lower().split("/", 1) if "/" in repo else ("", repo.lower())
    out: list[int] = []
    for m in CLOSING.finditer(text or ""):
        o, n, num = (m.group("owner"), m.group("name"), m.group("num")) if m.group("num") else \
            (m.group("uowner"), m.group("uname"), m.group("unum"))
        if o and (o.lower(), n.lower()) != (owner, name):
            continue
        k = int(num)
        if k not in out:
            out.append(k)
    return out


def git_out(repo: Path, *args: str, check: bool = True) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True)
    if check and out.returncode != 0:
        raise InputError(f"{repo}: git {' '.join(args[:3])} failed: {out.stderr.decode(errors='replace').strip()[-300:]}")
    return out.stdout.decode("utf-8", errors="surrogateescape")


def has_commit(repo: Path, sha: str) -> bool:
    return subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode == 0


# ---------------------------------------------------------------- names and statements


def remote_repo(url: str) -> str | None:
    """``OWNER/NAME`` of a GitHub/GitLab-style remote URL (https, ssh, scp-like ``git@host:o/n.git``), or None
    for a local path or an URL without an owner. GitLab subgroups keep the last two parts (``group/sub/name``
    -> ``sub/name``)."""
    url = url.strip()
    if not url:
        return None
    m = re.match(r"^(?:[\w.+-]+://)?(?:[^@/\s]+@)?([^/:\s]+)(?::\d+)?[:/](.+)$", url) \
        if "://" in url else re.match(r"^(?:[^@/\s]+@)?([^/:\s]+):(?!/)(.+)$", url)
    if not m or url.startswith(("file://", "/", ".", "~")):
        return None
    parts = [p for p in m.group(2).strip("/").split("/") if p]
    if len(parts) < 2:
        return None
    owner, name = parts[-2], re.sub(r"\.git$", "", parts[-1])
    if not re.fullmatch(r"[\w.-]+", owner) or not re.fullmatch(r"[\w.-]+", name) or not name:
        return None
    return f"{owner}/{name}"


def repo_name(path: Path) -> str:
    """A local repository's name: ``OWNER/NAME`` parsed from its ``origin`` remote, else the folder's name."""
    out = subprocess.run(["git", "-C", str(path), "remote", "get-url", "origin"], capture_output=True, text=True)
    return (remote_repo(out.stdout) if out.returncode == 0 else None) or Path(path).name


_TRAILER = re.compile(r"^\s*(?:co-authored-by|signed-off-by|reviewed-by|acked-by|tested-by|reported-by|"
                      r"suggested-by|helped-by|reviewed-on|change-id|cc)\s*:.*$", re.I)
_PR_REF = re.compile(r"\s*\((?:#\d+(?:,\s*)?)+\)")
_MERGE_LINE = re.compile(r"^\s*(?:\*\s*)?Merge (?:(?:remote-tracking )?branch|pull request) .*$", re.I)
_RULE = re.compile(r"^\s*-{3,}\s*$")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)


def clean_commit_message(text: str) -> str:
    """A commit message without squash-merge noise: trailers (``Co-authored-by:``, ``Signed-off-by:`` ...),
    PR numbers (``(#123)``), merge lines, ``---`` separators and, in a squash merge (subject ending in a PR
    number, or several ``* `` paragraphs), the ``* subject`` paragraphs of the squashed commits
    ("* Add changelog", "* fix typo"): what remains is what the author wrote about the change."""
    lines = (text or "").replace("\r\n", "\n").split("\n")
    squash = bool(lines) and bool(_PR_REF.search(lines[0]))
    paras: list[list[str]] = [[]]
    for line in lines:
        if not line.strip():
            paras.append([])
        else:
            paras[-1].append(line)
    paras = [p for p in paras if p]
    bullets = sum(1 for p in paras[1:] if p[0].startswith("* "))
    squash = squash or bullets >= 2
    kept: list[str] = []
    for i, para in enumerate(paras):
        if i > 0 and squash and para[0].startswith("* "):
            continue  # one squashed commit: its subject and body
        body = [_PR_REF.sub("", line).rstrip() for line in para
                if not _TRAILER.match(line) and not _MERGE_LINE.match(line) and not _RULE.match(line)]
        body = [line for line in body if line.strip()]
        if body:
            kept.append("\n".join(body))
    return "\n\n".join(kept).strip()


def issue_text(issue: Any) -> str:
    """An issue's statement: ``title`` and ``body`` (template comments ``<!-- ... -->`` dropped), or a string."""
    if isinstance(issue, dict):
        title, body = str(issue.get("title") or ""), str(issue.get("body") or "")
        text = f"{title}\n{_HTML_COMMENT.sub('', body).strip()}"
    else:
        text = _HTML_COMMENT.sub("", str(issue or ""))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def load_issues(path: str | Path) -> dict[int, Any]:
    """Issue texts for a local-history source from JSON (``{"12": "text" | {title, body}}`` or a list of
    ``{number, title, body}``) or JSONL (one ``{number, title, body}`` per line)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"--issues {path}: cannot read it ({e.strerror})") from None
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise InputError(f"--issues {path}: neither JSON nor JSONL ({e.msg})") from None
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list) and all(isinstance(d, dict) and "number" in d for d in data):
        items = [(d["number"], d) for d in data]
    else:
        raise InputError(f"--issues {path}: expected {{number: text}} or a list of {{number, title, body}}")
    try:
        return {int(k): v for k, v in items}
    except (TypeError, ValueError):
        raise InputError(f"--issues {path}: issue numbers must be integers") from None


def ensure_clone(repo: str, repo_path: str | Path | None, cache_dir: Path, url: str | None = None) -> Path:
    """A local clone of ``repo``: ``repo_path`` when given, else ``cache_dir/repos/OWNER__NAME`` (cloned or
    fetched from ``url``, default GitHub)."""
    if repo_path is not None:
        p = Path(repo_path).expanduser().resolve()
        if subprocess.run(["git", "-C", str(p), "rev-parse", "--git-dir"], capture_output=True).returncode != 0:
            raise InputError(f"--repo-path {p}: not a git repository")
        return p
    dest = cache_dir / "repos" / repo.replace("/", "__")
    url = url or f"https://github.com/{repo}.git"
    if (dest / ".git").exists() or (dest / "HEAD").exists():
        subprocess.run(["git", "-C", str(dest), "fetch", "-q", "--all", "--tags"], capture_output=True)
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["git", "clone", "-q", url, str(dest)], capture_output=True)
    if out.returncode != 0:
        raise ServiceError(f"cannot clone {url} into {dest}: {out.stderr.decode(errors='replace').strip()[-300:]}; "
                          "pass --repo-path with a local clone")
    return dest


# ---------------------------------------------------------------- GitHub REST


class GitHub:
    """A small GitHub REST client: token, conditional requests with an on-disk ETag cache, rate-limit waits.

    ``transport`` replaces the network (an ``httpx.MockTransport`` in tests); ``sleep`` and ``clock``
    make the rate-limit waits observable. ``stats`` counts requests, 304s and the seconds waited.
    """

    def __init__(self, token: str | None = None, *, cache_dir: str | Path | None = None,
                 transport: httpx.BaseTransport | None = None, base_url: str = API,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 max_retries: int = 6, timeout_s: float = 30.0):
        self.token = token if token is not None else os.environ.get("GITHUB_TOKEN") or None
        headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
                   "User-Agent": "envgen"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self.client = httpx.Client(base_url=base_url, headers=headers, transport=transport, timeout=timeout_s,
                                   follow_redirects=True)
        self.cache = Path(cache_dir) / "http" if cache_dir else None
        self.sleep, self.clock, self.max_retries = sleep, clock, max_retries
        self.stats = {"requests": 0, "not_modified": 0, "waits": [], "cached": 0}
        self._resume_at = 0.0

    def close(self) -> None:
        self.client.close()

    # -- cache

    def _cache_path(self, url: str, accept: str) -> Path | None:
        if self.cache is None:
            return None
        return self.cache / (hashlib.sha256(f"{accept}\0{url}".encode()).hexdigest()[:32] + ".json")

    def get(self, url: str, params: dict | None = None, *, accept: str | None = None) -> tuple[Any, httpx.Headers]:
        """(JSON body or text, headers) of a GET, through the conditional cache and rate-limit waits."""
        req = self.client.build_request("GET", url, params=params)
        full = str(req.url)
        accept = accept or "application/vnd.github+json"
        path = self._cache_path(full, accept)
        cached = json.loads(path.read_text()) if path and path.is_file() else None
        headers = {"Accept": accept}
        if cached and cached.get("etag"):
            headers["If-None-Match"] = cached["etag"]
        elif cached and cached.get("last_modified"):
            headers["If-Modified-Since"] = cached["last_modified"]
        resp = self._send(full, headers)
        if resp.status_code == 304 and cached is not None:
            self.stats["not_modified"] += 1
            return cached["body"], httpx.Headers(cached.get("headers") or {})
        self._raise_for(resp, full)
        body = resp.json() if "json" in resp.headers.get("content-type", "") else resp.text
        if path is not None and (resp.headers.get("etag") or resp.headers.get("last-modified")):
            keep = {k: resp.headers[k] for k in ("link",) if k in resp.headers}
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"etag": resp.headers.get("etag"), "last_modified": resp.headers.get("last-modified"),
                                       "body": body, "headers": keep}))
            os.replace(tmp, path)
        return body, resp.headers

    def _send(self, url: str, headers: dict) -> httpx.Response:
        for attempt in range(self.max_retries + 1):
            wait = self._resume_at - self.clock()
            if wait > 0:
                self._wait(wait)
            try:
                resp = self.client.get(url, headers=headers)
            except httpx.TransportError as e:
                if attempt == self.max_retries:
                    raise GitHubError(f"GitHub unreachable ({type(e).__name__}: {e}) at {url}") from None
                self._wait(min(60.0, 2.0 ** attempt))
                continue
            self.stats["requests"] += 1
            if resp.headers.get("x-ratelimit-remaining") == "0" and resp.headers.get("x-ratelimit-reset"):
                self._resume_at = float(resp.headers["x-ratelimit-reset"]) + 1.0  # spent: the next request waits
            if resp.status_code in (403, 429) and self._rate_limited(resp):
                if attempt == self.max_retries:
                    raise GitHubError(f"GitHub rate limit still exceeded after {attempt} waits at {url}; "
                                      "set GITHUB_TOKEN for a higher limit")
                self._wait(self._wait_for(resp, attempt))
                self._resume_at = 0.0  # the wait above already ran to the reset time
                continue
            if resp.status_code >= 500 and attempt < self.max_retries:
                self._wait(min(60.0, 2.0 ** attempt))
                continue
            return resp
        raise AssertionError("unreachable")

    def _rate_limited(self, resp: httpx.Response) -> bool:
        if resp.status_code == 429 or "retry-after" in resp.headers:
            return True
        if resp.headers.get("x-ratelimit-remaining") == "0":
            return True
        return "rate limit" in resp.text.lower()

    def _wait_for(self, resp: httpx.Response, attempt: int) -> float:
        if "retry-after" in resp.headers:
            try:
                return max(1.0, float(resp.headers["retry-after"]))
            except ValueError:
                pass
        if resp.headers.get("x-ratelimit-reset"):
            return max(1.0, float(resp.headers["x-ratelimit-reset"]) - self.clock() + 1.0)
        return min(900.0, 60.0 * 2 ** attempt)  # a secondary limit without headers: GitHub asks for a minute

    def _wait(self, seconds: float) -> None:
        self.stats["waits"].append(round(seconds, 3))
        self.sleep(seconds)

    def _raise_for(self, resp: httpx.Response, url: str) -> None:
        if resp.status_code < 400:
            return
        msg = ""
        try:
            msg = resp.json().get("message", "")
        except ValueError:
            msg = resp.text[:200]
        if resp.status_code == 401:
            raise GitHubError(f"GitHub rejected the credentials (401: {msg}); set a valid GITHUB_TOKEN")
        if resp.status_code == 404:
            raise GitHubError(f"GitHub: {url} not found (404); check OWNER/REPO, or GITHUB_TOKEN for private repos")
        raise GitHubError(f"GitHub answered {resp.status_code} for {url}: {msg}")

    def paginate(self, url: str, params: dict | None = None, *, stop: Callable[[dict], bool] | None = None,
                 max_items: int | None = None) -> Iterator[dict]:
        """Items of a list endpoint across pages (Link rel=next); ``stop(item)`` ends the walk at that item."""
        n = 0
        next_url: str | None = url
        next_params = dict(params or {})
        while next_url:
            body, headers = self.get(next_url, next_params)
            if not isinstance(body, list):
                raise GitHubError(f"GitHub: {next_url} did not return a list")
            for item in body:
                if stop is not None and stop(item):
                    return
                yield item
                n += 1
                if max_items is not None and n >= max_items:
                    return
            next_url, next_params = _next_link(headers.get("link", "")), None
        return


def _next_link(link: str) -> str | None:
    for part in link.split(","):
        m = re.match(r'\s*<([^>]+)>\s*;\s*rel="?next"?', part)
        if m:
            return m.group(1)
    return None


class GitHubSource:
    """Merged pull requests of ``owner/name`` and the issues they close, cached under ``cache_dir``."""

    kind = "github"

    def __init__(self, repo: str, *, repo_path: str | Path | None = None, cache_dir: str | Path | None = None,
                 github: GitHub | None = None, max_prs: int | None = None, log: Callable[[str], None] = lambda m: None):
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
            raise InputError(f"github:{repo}: expected github:OWNER/REPO")
        self.repo = repo
        self.cache_dir = Path(cache_dir) if cache_dir else _default_cache()
        self.gh = github or GitHub(cache_dir=self.cache_dir / "github")
        self.repo_path = repo_path
        self.max_prs = max_prs
        self.log = log
        self.state_dir = self.cache_dir / "github" / repo.replace("/", "__")
        self.stats: dict[str, int] = {"prs_listed": 0, "prs_fetched": 0, "prs_from_cache": 0}

    def _state(self) -> dict:
        p = self.state_dir / "state.json"
        return json.loads(p.read_text()) if p.is_file() else {}

    def _save(self, name: str, obj: dict) -> None:
        p = self.state_dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp")
        tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
        os.replace(tmp, p)

    def refresh(self) -> dict[int, dict]:
        """Bring the PR records up to date with GitHub (only what changed since the last run); return them all."""
        state = self._state()
        mark = state.get("high_water") or ""
        newest = mark
        prs_dir = self.state_dir / "prs"
        seen = 0
        for pr in self.gh.paginate(f"/repos/{self.repo}/pulls",
                                   {"state": "closed", "sort": "updated", "direction": "desc", "per_page": 100},
                                   stop=lambda p: bool(mark) and p.get("updated_at", "") <= mark,
                                   max_items=self.max_prs):
            seen += 1
            newest = max(newest, pr.get("updated_at", ""))
            rec_path = prs_dir / f"{pr['number']}.json"
            old = json.loads(rec_path.read_text()) if rec_path.is_file() else None
            if old is not None and old.get("updated_at") == pr.get("updated_at"):
                self.stats["prs_from_cache"] += 1
                continue
            self._save(f"prs/{pr['number']}.json", self._record(pr))
            self.stats["prs_fetched"] += 1
        self.stats["prs_listed"] = seen
        if self.max_prs is None or seen < self.max_prs:  # a walk cut short leaves older PRs unseen: keep the old mark
            self._save("state.json", {"high_water": newest, "repo": self.repo})
        records = {}
        if prs_dir.is_dir():
            for p in sorted(prs_dir.glob("*.json"), key=lambda p: int(p.stem)):
                rec = json.loads(p.read_text())
                records[rec["number"]] = rec
        return records

    def _record(self, pr: dict) -> dict:
        """Everything a task needs from one PR: its diff, commits, linked issues with text and hints."""
        n = pr["number"]
        rec = {"number": n, "updated_at": pr.get("updated_at"), "created_at": pr.get("created_at"),
               "merged_at": pr.get("merged_at"), "title": pr.get("title") or "", "body": pr.get("body") or "",
               "base_sha": (pr.get("base") or {}).get("sha"), "head_sha": (pr.get("head") or {}).get("sha"),
               "merge_commit_sha": pr.get("merge_commit_sha"), "url": pr.get("html_url"), "issues": [],
               "diff": None, "commits": []}
        if not pr.get("merged_at"):
            return rec  # the filter rejects it as unmerged; nothing else is worth a request
        self.log(f"github: PR #{n}")
        commits = list(self.gh.paginate(f"/repos/{self.repo}/pulls/{n}/commits", {"per_page": 100}, max_items=250))
        rec["commits"] = [{"sha": c.get("sha"), "message": (c.get("commit") or {}).get("message", ""),
                           "date": ((c.get("commit") or {}).get("author") or {}).get("date")} for c in commits]
        diff, _ = self.gh.get(f"/repos/{self.repo}/pulls/{n}", accept="application/vnd.github.diff")
        rec["diff"] = diff if isinstance(diff, str) else json.dumps(diff)
        text = "\n".join([rec["title"], rec["body"], *(c["message"] for c in rec["commits"])])
        first_commit = min((c["date"] for c in rec["commits"] if c.get("date")), default=pr.get("created_at"))
        for k in closing_issues(text, self.repo):
            issue, _ = self.gh.get(f"/repos/{self.repo}/issues/{k}")
            if not isinstance(issue, dict) or "pull_request" in issue:
                continue  # "fixes #k" naming another PR is not an issue
            comments = list(self.gh.paginate(f"/repos/{self.repo}/issues/{k}/comments", {"per_page": 100},
                                             max_items=300))
            hints = [c.get("body") or "" for c in comments
                     if first_commit and (c.get("created_at") or "") < first_commit]
            rec["issues"].append({"number": k, "title": issue.get("title") or "", "body": issue.get("body") or "",
                                  "created_at": issue.get("created_at"), "hints": "\n".join(hints).strip()})
        return rec

    def instances(self) -> Iterator[RawInstance]:
        records = self.refresh()
        clone = None
        owner, name = self.repo.split("/")
        for n, rec in records.items():
            if rec.get("merged_at") and clone is None:
                clone = ensure_clone(self.repo, self.repo_path, self.cache_dir)
            issue = rec["issues"][0] if len(rec["issues"]) == 1 else None
            # without one closed issue the PR's own title and body (kept only where the filters allow no issue)
            problem = issue_text(issue) if issue else issue_text({"title": rec.get("title"), "body": rec.get("body")})
            yield RawInstance(
                instance_id=f"{owner}__{name}-{n}", repo=self.repo, base_commit=rec.get("base_sha") or "",
                patch=rec.get("diff") or "", repo_path=clone, problem_statement=problem,
                hints_text=issue["hints"] if issue else "", created_at=rec.get("created_at") or "",
                merged=bool(rec.get("merged_at")), issues=[i["number"] for i in rec["issues"]], source="github",
                meta={"pull_number": n, "pull_url": rec.get("url"), "merged_at": rec.get("merged_at"),
                      "merge_commit_sha": rec.get("merge_commit_sha"), "title": rec.get("title"),
                      "issue_created_at": issue.get("created_at") if issue else None,
                      "statement_from": "issue" if issue else "pull request"})


def _default_cache() -> Path:
    return cache_dir() / "code"


# ---------------------------------------------------------------- local git history


_ISSUE_REF = re.compile(r"(?<![\w/&])#(\d+)\b")


class LocalGitSource:
    """Commits of a local repository that change code and tests (``merges``: merge commits, diffed
    against their first parent).

    The problem statement comes from the best source the history has, before any length filter: the text
    of an issue the commit links (closing keywords, else a lone ``#N`` in its subject or body, else in the
    message of the merge that brought it in) when ``issues`` ({number: text}) holds it; else, for a commit
    a pull request's merge brought into the first-parent history, that merge's PR title and body followed
    by the commit's own message; else the commit message (subject and body). ``meta.statement_from`` says
    which (``issue``, ``pull request``, ``commit message``)."""

    kind = "git"

    def __init__(self, path: str | Path, language: Language, *, rev: str = "HEAD", merges: bool = False,
                 max_count: int | None = None, issues: dict[int, Any] | None = None):
        self.path = ensure_clone("", path, Path("."))
        self.language, self.rev, self.merges, self.max_count = language, rev, merges, max_count
        self.issues = {int(k): issue_text(v) for k, v in (issues or {}).items()}
        self.name = repo_name(self.path)
        """``OWNER/NAME`` from the origin remote; the folder's name when there is none."""

    def instances(self) -> Iterator[RawInstance]:
        args = ["log", "--format=%x1e%H%x00%P%x00%aI%x00%B", "--reverse"]
        args += ["--merges", "--first-parent"] if self.merges else ["--no-merges"]
        if self.max_count:
            args.append(f"--max-count={self.max_count}")
        for chunk in git_out(self.path, *args, self.rev).split("\x1e"):
            if not chunk.strip():
                continue
            sha, parents, date, message = chunk.split("\0", 3)
            parents = parents.split()
            if not parents:
                continue  # the root commit has no base to start from
            base = parents[0]
            files = [f for f in git_out(self.path, "diff", "--name-only", "-z", base, sha).split("\0") if f]
            has_code = any(self.language.is_code_path(f) for f in files)
            has_tests = has_code and (any(self.language.is_test_path(f) for f in files) or
                                      any(map(self.language.test_matcher(RepoView(self.path, base)), files)))
            patch = git_out(self.path, "diff", "--binary", "--full-index", base, sha) if has_tests and has_code else ""
            message = message.strip()
            merge = self._merge_of(sha) if patch and not self.merges else None
            linked = closing_issues(message, self.name)
            issue_no = self._linked_issue(message, linked) or (self._linked_issue(merge[1], []) if merge else None)
            own = clean_commit_message(message)
            if issue_no is not None:
                problem, source = self.issues[issue_no], "issue"
            elif merge is not None and (pr := clean_commit_message(merge[1])) and pr.strip() != own.strip():
                problem, source = (pr if own in pr else f"{pr}\n\n{own}").strip(), "pull request"
            else:
                problem, source = own, "commit message"
            meta: dict[str, Any] = {"commit": sha, "subject": own.splitlines()[0] if own else "",
                                    "statement_from": source}
            if issue_no is not None:
                meta["issue"] = issue_no
                linked = linked or [issue_no]
            if merge is not None:
                meta["merge_commit"] = merge[0]
            yield RawInstance(
                instance_id=f"{self.name.replace('/', '__')}-{sha[:12]}", repo=self.name, base_commit=base,
                patch=patch, repo_path=self.path, problem_statement=problem, created_at=date, merged=True,
                issues=linked, files=files, source="git", meta=meta)

    def _linked_issue(self, message: str, closing: list[int]) -> int | None:
        """The one issue of ``issues`` a message links: by closing keywords, else by its lone ``#N``."""
        if len(closing) == 1 and closing[0] in self.issues:
            return closing[0]
        refs = {int(n) for n in _ISSUE_REF.findall(message)} & set(self.issues)
        return refs.pop() if len(refs) == 1 and not closing else None

    def _merge_of(self, sha: str) -> tuple[str, str] | None:
        """(merge commit, its message) of the merge that brought ``sha`` into the first-parent history of
        ``rev``; None for a commit made on that history itself."""
        chain = git_out(self.path, "rev-list", "--ancestry-path", "--first-parent", f"{sha}..{self.rev}",
                        check=False).split()
        if not chain:
            return None
        merge = chain[-1]
        parents = git_out(self.path, "rev-list", "--parents", "-n", "1", merge).split()[1:]
        if len(parents) < 2 or subprocess.run(["git", "-C", str(self.path), "merge-base", "--is-ancestor", sha,
                                               parents[0]], capture_output=True).returncode == 0:
            return None
        return merge, git_out(self.path, "log", "-1", "--format=%B", merge).strip()


# ---------------------------------------------------------------- SWE-bench files


def _tests_field(value: Any, where: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise InputError(f"{where}: not a JSON list of test names") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: expected a list of test names")
    return value


MULTI_SWE_TESTS = ("f2p_tests", "n2p_tests", "s2p_tests", "p2p_tests", "fixed_tests")
"""Multi-SWE-bench's test maps ({test: {run, test, fix}}): fail, none (absent) or skipped to pass, pass to
pass, and every test the fix makes pass."""
LANGUAGE_ALIASES = {"js": "javascript", "ts": "typescript", "c++": "cpp", "cxx": "cpp", "golang": "go",
                    "py": "python"}
"""Language spellings of SWE-bench-style files (Multi-SWE-bench's ``lang``, SWE-bench Multilingual's
``language``) -> envgen's language names."""


def _test_names(value: Any, where: str) -> list[str]:
    """Test names of a Multi-SWE-bench test map: {name: {...}}, its columnar form {"name": [...], ...}, or a list."""
    if isinstance(value, dict) and isinstance(value.get("name"), list):
        value = value["name"]
    if isinstance(value, dict):
        value = list(value)
    return _tests_field(value, where)


def _from_multi_swe(row: dict, where: str) -> dict:
    """A Multi-SWE-bench instance (org, repo, number, base.sha, fix_patch, resolved_issues, *_tests maps)
    as SWE-bench fields; every original field is kept beside them (exports give it back)."""
    org, name, number = row.get("org"), row.get("repo"), row.get("number")
    if not (isinstance(org, str) and org and isinstance(name, str) and name):
        raise InputError(f"{where}: org and repo: missing or not non-empty strings (Multi-SWE-bench fields)")
    base = row.get("base")
    sha = base.get("sha") if isinstance(base, dict) else row.get("base_commit")
    issues = row.get("resolved_issues") or []
    if isinstance(issues, dict):  # columnar (datasets' Arrow form): {"number": [...], "title": [...], "body": [...]}
        issues = [dict(zip(issues, vals)) for vals in zip(*issues.values())]
    texts = [t for i in issues if isinstance(i, dict)
             for t in (f"{i.get('title') or ''}\n\n{i.get('body') or ''}".strip(),) if t]
    problem = row.get("problem_statement") or "\n\n".join(texts) or \
        f"{row.get('title') or ''}\n\n{row.get('body') or ''}".strip()
    f2p = [t for k in ("f2p_tests", "n2p_tests", "s2p_tests") for t in _test_names(row.get(k), f"{where}: {k}")]
    out = dict(row)
    out.update(instance_id=row.get("instance_id") or f"{org}__{name}-{number}", repo=f"{org}/{name}",
               base_commit=sha if isinstance(sha, str) else "", patch=row.get("fix_patch") or row.get("patch") or "",
               problem_statement=problem, FAIL_TO_PASS=sorted(set(f2p)),
               PASS_TO_PASS=_test_names(row.get("p2p_tests"), f"{where}: p2p_tests"),
               multi_swe_bench={k: row[k] for k in ("org", "repo", "number") if k in row})
    return out


def read_swebench(path: str | Path) -> list[dict[str, Any]]:
    """Instances of a SWE-bench file (JSONL, or a JSON list), checked field by field. Multi-SWE-bench's
    field names (org/repo/number, base.sha, fix_patch, resolved_issues, f2p_tests/p2p_tests maps) are read
    as the SWE-bench ones, and a ``lang``/``language`` field names the repository's language."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    rows: list[tuple[int, Any]] = []
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
        rows = [(i + 1, r) for i, r in enumerate(data)]
        unit = "item"
    else:
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((lineno, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
        unit = "line"
    out = []
    for where_n, row in rows:
        where = f"{path}:{where_n}" if unit == "line" else f"{path}: item {where_n}"
        if not isinstance(row, dict):
            raise InputError(f"{where}: an instance must be a JSON object")
        if "fix_patch" in row or ("org" in row and "number" in row):
            row = _from_multi_swe(row, where)
        lang = row.get("language", row.get("lang"))
        if lang is not None:
            if not isinstance(lang, str) or not lang.strip():
                raise InputError(f"{where}: language: not a non-empty string")
            row["language"] = LANGUAGE_ALIASES.get(lang.strip().lower(), lang.strip().lower())
        for f in SWEBENCH_FIELDS:
            if not isinstance(row.get(f), str) or (f != "problem_statement" and not row[f].strip()):
                raise InputError(f"{where}: {f}: missing or not a non-empty string")
        row = dict(row)
        row["FAIL_TO_PASS"] = _tests_field(row.get("FAIL_TO_PASS"), f"{where}: FAIL_TO_PASS")
        row["PASS_TO_PASS"] = _tests_field(row.get("PASS_TO_PASS"), f"{where}: PASS_TO_PASS")
        out.append(row)
    return out


class SWEBenchSource:
    """Instances of a SWE-bench file; each repository from ``repo_path`` (one clone for a one-repository
    file, or {owner/name: path}) or ``cache_dir/repos/OWNER__NAME``."""

    kind = "swebench"

    def __init__(self, path: str | Path, *, repo_path: str | Path | dict[str, str | Path] | None = None,
                 cache_dir: str | Path | None = None, log: Callable[[str], None] = lambda m: None):
        self.path = Path(path)
        self.rows = read_swebench(self.path)
        self.repo_path = repo_path
        self.cache_dir = Path(cache_dir) if cache_dir else _default_cache()
        self.log = log
        self.stats: dict[str, Any] = {"rows": len(self.rows), "duplicates": [], "unavailable": {}}
        """duplicates: {instance_id, item, identical} for each later row of an id already read (not built
        again); unavailable: {repo: why} for repositories with no local clone (their instances rejected)."""

    def _clone(self, repo: str) -> Path:
        if isinstance(self.repo_path, dict):
            if repo not in self.repo_path:
                raise InputError("no --repo-path given for it")
            return ensure_clone(repo, self.repo_path[repo], self.cache_dir)
        if self.repo_path is not None:
            return ensure_clone(repo, self.repo_path, self.cache_dir)
        return ensure_clone(repo, None, self.cache_dir)

    def instances(self) -> Iterator[RawInstance]:
        """One instance per instance_id (a later row with the same id is reported in ``stats``, not built
        twice). A repository that has no clone does not stop the others: its instances come with
        ``repo_path`` None and ``meta["unavailable"]`` saying why, and the build rejects them."""
        repos = {r["repo"] for r in self.rows}
        if self.repo_path is not None and not isinstance(self.repo_path, dict) and len(repos) > 1:
            raise InputError(f"{self.path}: instances of {len(repos)} repositories ({', '.join(sorted(repos))}) "
                             "but one --repo-path; give one clone per repository (OWNER/NAME=CLONE) or use the "
                             "cache dir")
        clones: dict[str, Path | str] = {}
        first: dict[str, tuple[int, dict]] = {}
        for n, row in enumerate(self.rows, 1):
            iid = row["instance_id"]
            if iid in first:
                identical = first[iid][1] == row
                self.stats["duplicates"].append({"instance_id": iid, "item": n, "identical": identical})
                self.log(f"code: {self.path}: item {n} repeats {iid} (item {first[iid][0]}"
                         f"{'' if identical else ', with different fields'}): built once, from item {first[iid][0]}")
                continue
            first[iid] = (n, row)
            repo = row["repo"]
            if repo not in clones:
                try:
                    clones[repo] = self._clone(repo)
                except (InputError, ServiceError) as e:  # this repository's instances are rejected, not the file's
                    clones[repo] = (f"no local clone of the repository ({repo}): {e}; pass --repo-path "
                                    f"{repo}=CLONE")
                    self.stats["unavailable"][repo] = clones[repo]
                    self.log(f"code: {self.path}: {clones[repo]}")
            if isinstance(clones[repo], str):
                yield RawInstance(instance_id=iid, repo=repo, base_commit=row["base_commit"], patch=row["patch"],
                                  repo_path=None, test_patch=row["test_patch"], source="swebench",
                                  problem_statement=row["problem_statement"], meta={"unavailable": clones[repo]})
                continue
            keep = {k: row.get(k) for k in ("version", "environment_setup_commit", "FAIL_TO_PASS", "PASS_TO_PASS",
                                             "problem_statement", "hints_text", "created_at", "language",
                                             "multi_swe_bench") if k in row}
            extra = {k: v for k, v in row.items() if k not in SWEBENCH_FIELDS and k not in keep}
            yield RawInstance(
                instance_id=row["instance_id"], repo=repo, base_commit=row["base_commit"], patch=row["patch"],
                repo_path=clones[repo], test_patch=row["test_patch"], problem_statement=row["problem_statement"],
                hints_text=row.get("hints_text") or "", created_at=row.get("created_at") or "", merged=True,
                source="swebench", meta={"swebench": keep, "extra": extra,
                                         **({"language": row["language"]} if "language" in row else {})})


def open_source(spec: str, *, language: Language | None = None, repo_path: str | Path | None = None,
                cache_dir: str | Path | None = None, github: GitHub | None = None,
                max_items: int | None = None, log: Callable[[str], None] = lambda m: None,
                issues: dict[int, Any] | None = None):
    """The source a CLI spelling names: ``github:OWNER/REPO``, ``git:PATH`` or ``swebench:FILE``;
    ``issues`` ({number: text or {title, body}}): issue texts for local history (see ``load_issues``)."""
    kind, _, rest = spec.partition(":")
    if not rest:
        raise InputError(f"--from {spec!r}: expected github:OWNER/REPO, git:PATH or swebench:FILE")
    if kind == "github":
        return GitHubSource(rest, repo_path=repo_path, cache_dir=cache_dir, github=github, max_prs=max_items, log=log)
    if kind == "git":
        if language is None:  # the repository's language at the tip: it says which commits touch tests and code
            path = ensure_clone("", rest, Path("."))
            language = detect_language(RepoView(path, git_out(path, "rev-parse", "HEAD").strip()))
        return LocalGitSource(rest, language, max_count=max_items, issues=issues)
    if kind == "swebench":
        if not Path(rest).is_file():
            raise InputError(f"--from {spec!r}: no such file {rest}")
        return SWEBenchSource(rest, repo_path=repo_path, cache_dir=cache_dir, log=log)
    raise InputError(f"--from {spec!r}: unknown source {kind!r}; use github:, git: or swebench:")
