"""Recorded GitHub REST responses for the calc repository (tests/code_repo.py), served by an httpx transport.

The payloads keep the fields of real GitHub responses that envgen reads (and a few around them), with
the commit ids and diffs of the local calc repository filled in. The server behaves like GitHub where
the client depends on it: Link-header pagination, ETags with 304 answers to ``If-None-Match``, a
primary rate limit (403 with ``x-ratelimit-remaining: 0`` and ``x-ratelimit-reset``) armed on a path.
"""

from __future__ import annotations

import hashlib
import json
from urllib.parse import parse_qs, urlparse

import httpx

REPO = "acme/calc"
API = "https://api.github.com"
PAGE_SIZE = 3


def _user(login: str) -> dict:
    return {"login": login, "id": abs(hash(login)) % 10 ** 6, "type": "User"}


def _pull(n: int, title: str, body: str, base: str, head: str, *, merged: bool, updated: str) -> dict:
    return {"url": f"{API}/repos/{REPO}/pulls/{n}", "html_url": f"https://github.com/{REPO}/pull/{n}", "number": n,
            "state": "closed", "locked": False, "title": title, "user": _user("contributor"), "body": body,
            "created_at": updated.replace("T18", "T09"), "updated_at": updated, "closed_at": updated,
            "merged_at": updated if merged else None, "merge_commit_sha": head if merged else None,
            "head": {"label": f"contributor:pr-{n}", "ref": f"pr-{n}", "sha": head},
            "base": {"label": "acme:main", "ref": "main", "sha": base}, "draft": False}


def _commit(sha: str, message: str, date: str) -> dict:
    return {"sha": sha, "url": f"{API}/repos/{REPO}/commits/{sha}",
            "commit": {"author": {"name": "Dev", "email": "dev@example.com", "date": date},
                       "committer": {"name": "Dev", "email": "dev@example.com", "date": date}, "message": message}}


def _issue(n: int, title: str, body: str, created: str) -> dict:
    return {"url": f"{API}/repos/{REPO}/issues/{n}", "number": n, "title": title, "user": _user("reporter"),
            "state": "closed", "body": body, "created_at": created, "comments": 2}


def _comment(i: int, body: str, created: str) -> dict:
    return {"id": 1000 + i, "user": _user("maintainer"), "created_at": created, "body": body}


def recorded(shas: dict[str, str], diff) -> dict[str, tuple[int, object, dict]]:
    """{path: (status, body, headers)} for the scenario the tests replay; ``diff(base, head)`` gives PR diffs."""
    prs = [
        _pull(15, "Describe the project in the README", "Docs only.", shas["power"], shas["readme"], merged=True,
              updated="2024-02-15T18:00:00Z"),
        _pull(14, "Experiment: faster add", "Superseded.", shas["docs"], shas["docs"], merged=False,
              updated="2024-02-14T18:00:00Z"),
        _pull(13, "Add power()", "Resolves #9. Also fixes #10 while at it.", shas["docs"], shas["power"],
              merged=True, updated="2024-02-13T18:00:00Z"),
        _pull(12, "Return floats from multiply", "Closes #8", shas["fix"], shas["float"], merged=True,
              updated="2024-02-12T18:00:00Z"),
        _pull(11, "Fix subtract sign", "Swap the operands.", shas["initial"], shas["fix"], merged=True,
              updated="2024-02-11T18:00:00Z"),
    ]
    r: dict[str, tuple[int, object, dict]] = {}
    r[f"/repos/{REPO}/pulls?page=1"] = (200, prs[:PAGE_SIZE], {"link": _link(2)})
    r[f"/repos/{REPO}/pulls?page=2"] = (200, prs[PAGE_SIZE:], {"link": _link(1, rel="prev")})
    commits = {
        15: [_commit(shas["readme"], "Describe the project in the README", "2024-01-06T12:00:00Z")],
        13: [_commit(shas["power"], "Add power() for integer exponents", "2024-01-05T12:00:00Z")],
        12: [_commit(shas["float"], "Return floats from multiply for consistency with divide",
                     "2024-01-03T12:00:00Z")],
        11: [_commit(shas["fix"], "Fix subtract returning the wrong sign (fixes #7)", "2024-01-02T12:00:00Z")],
    }
    heads = {15: ("power", "readme"), 13: ("docs", "power"), 12: ("fix", "float"), 11: ("initial", "fix")}
    for n, cs in commits.items():
        r[f"/repos/{REPO}/pulls/{n}/commits"] = (200, cs, {})
        b, h = heads[n]
        r[f"/repos/{REPO}/pulls/{n}#diff"] = (200, diff(shas[b], shas[h]), {"content-type": "text/plain"})
    r[f"/repos/{REPO}/issues/7"] = (200, _issue(7, "subtract() returns the wrong sign",
                                                "calc.core.subtract(5, 3) gives -2, but 5 - 3 is 2. Every difference "
                                                "computed with calc comes out negated.", "2024-01-01T15:00:00Z"), {})
    r[f"/repos/{REPO}/issues/7/comments"] = (200, [
        _comment(1, "Confirmed: the operands are swapped in core.py.", "2024-01-01T16:00:00Z"),
        _comment(2, "Fixed in #11, thanks!", "2024-01-03T09:00:00Z")], {})
    r[f"/repos/{REPO}/issues/8"] = (200, _issue(8, "multiply and divide disagree on result types",
                                                "multiply(2, 3) gives an int while divide gives floats; make them "
                                                "consistent so chained results keep one type.",
                                                "2024-01-02T15:00:00Z"), {})
    r[f"/repos/{REPO}/issues/8/comments"] = (200, [], {})
    for n in (9, 10):
        r[f"/repos/{REPO}/issues/{n}"] = (200, _issue(n, f"Feature request {n}", "Please add exponentiation to calc "
                                                      "so users can compute powers.", "2024-01-04T15:00:00Z"), {})
        r[f"/repos/{REPO}/issues/{n}/comments"] = (200, [], {})
    return r


def new_pr(shas: dict[str, str], diff) -> dict[str, tuple[int, object, dict]]:
    """What GitHub answers after a new PR (#16, fixing #9 with the power commit) was merged."""
    pr = _pull(16, "Add power(), take two", "Fixes #9", shas["docs"], shas["power"], merged=True,
               updated="2024-03-01T18:00:00Z")
    return {f"/repos/{REPO}/pulls/16/commits": (200, [_commit(shas["power"], "Add power() for integer exponents",
                                                              "2024-01-05T12:00:00Z")], {}),
            f"/repos/{REPO}/pulls/16#diff": (200, diff(shas["docs"], shas["power"]), {"content-type": "text/plain"}),
            "new_pr": (200, pr, {})}


def _link(page: int, rel: str = "next") -> str:
    return f'<{API}/repositories/4242/pulls?state=closed&sort=updated&direction=desc&per_page=100&page={page}>; ' \
           f'rel="{rel}"'


class FakeGitHub:
    """The transport's handler: routes, ETags, a one-shot rate limit, and a log of every request."""

    def __init__(self, routes: dict, clock):
        self.routes, self.clock = routes, clock
        self.log: list[httpx.Request] = []
        self.rate_limit_once: set[str] = set()

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def key(self, request: httpx.Request) -> str:
        u = urlparse(str(request.url))
        path = u.path.replace("/repositories/4242/", f"/repos/{REPO}/")
        if path.endswith("/pulls"):
            return f"{path}?page={parse_qs(u.query).get('page', ['1'])[0]}"
        if "diff" in request.headers.get("accept", ""):
            return path + "#diff"
        return path

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.log.append(request)
        key = self.key(request)
        remaining = {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "4999",
                     "x-ratelimit-reset": str(int(self.clock.now) + 3600)}
        if key in self.rate_limit_once:
            self.rate_limit_once.discard(key)
            return httpx.Response(403, json={"message": "API rate limit exceeded for user ID 1.",
                                             "documentation_url": "https://docs.github.com/rest/rate-limit"},
                                  headers={**remaining, "x-ratelimit-remaining": "0",
                                           "x-ratelimit-reset": str(int(self.clock.now) + 42)})
        if key not in self.routes:
            return httpx.Response(404, json={"message": "Not Found"})
        status, body, headers = self.routes[key]
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        etag = '"' + hashlib.sha1(raw).hexdigest() + '"'
        if request.headers.get("if-none-match") == etag:
            return httpx.Response(304, headers={"etag": etag, **remaining})
        ctype = headers.get("content-type", "application/json; charset=utf-8")
        return httpx.Response(status, content=raw, headers={**headers, "content-type": ctype, "etag": etag,
                                                            **remaining})


class FakeClock:
    """time.time and time.sleep for the client: sleeping advances the clock instantly and is recorded."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
