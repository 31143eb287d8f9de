"""GitHub mining against recorded REST responses through an httpx transport (the real client code runs)."""

from __future__ import annotations

import pytest

from envgen.families.code import build_code
from envgen.families.code.sources import GitHub, GitHubError, GitHubSource

try:
    from .code_repo import diff, make_calc_repo
    from .github_recorded import REPO, FakeClock, FakeGitHub, new_pr, recorded
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import diff, make_calc_repo
    from github_recorded import REPO, FakeClock, FakeGitHub, new_pr, recorded


@pytest.fixture
def world(tmp_path):
    root = tmp_path / "calc"
    shas = make_calc_repo(root)
    clock = FakeClock()
    server = FakeGitHub(recorded(shas, lambda b, h: diff(root, b, h)), clock)
    return root, shas, clock, server


def _client(server, clock, cache, token="ghp_recorded"):
    return GitHub(token, cache_dir=cache, transport=server.transport(), sleep=clock.sleep, clock=clock.time)


def _paths(server):
    return [(r.url.path, r.url.params.get("page"), "diff" in r.headers.get("accept", "")) for r in server.log]


def test_mining_paginates_waits_out_rate_limits_and_links_issues_from_commits(world, tmp_path):
    root, shas, clock, server = world
    server.rate_limit_once.add(f"/repos/{REPO}/pulls/11/commits")
    gh = _client(server, clock, tmp_path / "cache" / "github")
    src = GitHubSource(REPO, repo_path=root, cache_dir=tmp_path / "cache", github=gh)
    raws = {r.instance_id: r for r in src.instances()}

    assert set(raws) == {f"acme__calc-{n}" for n in (11, 12, 13, 14, 15)}
    pages = [p for path, p, _ in _paths(server) if path.endswith("/pulls")]
    assert pages == [None, "2"]  # the second page came from the Link header
    assert all(r.headers["authorization"] == "Bearer ghp_recorded" for r in server.log)
    assert clock.slept == [43.0] and gh.stats["waits"] == [43.0]  # reset header + 1 s, then the retry passed

    fix = raws["acme__calc-11"]
    assert fix.issues == [7]  # named only in the commit message "(fixes #7)"
    assert fix.problem_statement.startswith("subtract() returns the wrong sign\ncalc.core.subtract(5, 3)")
    assert fix.hints_text == "Confirmed: the operands are swapped in core.py."  # the later comment is left out
    assert fix.base_commit == shas["initial"] and fix.created_at == "2024-02-11T09:00:00Z"
    assert "def test_subtract" in fix.patch and fix.merged
    assert raws["acme__calc-13"].issues == [9, 10]
    assert not raws["acme__calc-14"].merged
    assert not any("/pulls/14/" in r.url.path for r in server.log)  # nothing else asked for an unmerged PR
    assert raws["acme__calc-15"].issues == []


def test_rerun_asks_only_for_what_is_new(world, tmp_path):
    root, shas, clock, server = world
    cache = tmp_path / "cache"
    first = list(GitHubSource(REPO, repo_path=root, cache_dir=cache,
                              github=_client(server, clock, cache / "github")).instances())
    server.log.clear()

    gh = _client(server, clock, cache / "github")
    again = list(GitHubSource(REPO, repo_path=root, cache_dir=cache, github=gh).instances())
    assert [r.instance_id for r in again] == [r.instance_id for r in first]
    assert len(server.log) == 1 and server.log[0].headers.get("if-none-match")  # one conditional request...
    assert gh.stats["not_modified"] == 1  # ...answered 304, and the list walk stopped at the high-water mark

    extra = new_pr(shas, lambda b, h: diff(root, b, h))
    page1 = server.routes[f"/repos/{REPO}/pulls?page=1"]
    server.routes[f"/repos/{REPO}/pulls?page=1"] = (200, [extra.pop("new_pr")[1], *page1[1]], page1[2])
    server.routes.update(extra)
    server.log.clear()
    gh = _client(server, clock, cache / "github")
    src = GitHubSource(REPO, repo_path=root, cache_dir=cache, github=gh)
    latest = {r.instance_id: r for r in src.instances()}
    assert "acme__calc-16" in latest and latest["acme__calc-16"].issues == [9]
    asked = {(path, diffreq) for path, _, diffreq in _paths(server)}
    assert asked == {(f"/repos/{REPO}/pulls", False), (f"/repos/{REPO}/pulls/16/commits", False),
                     (f"/repos/{REPO}/pulls/16", True), (f"/repos/{REPO}/issues/9", False),
                     (f"/repos/{REPO}/issues/9/comments", False)}
    assert src.stats == {"prs_listed": 1, "prs_fetched": 1, "prs_from_cache": 0}


def test_errors_name_the_fix(world, tmp_path):
    root, shas, clock, server = world
    gh = _client(server, clock, None)
    with pytest.raises(GitHubError, match="not found"):
        gh.get("/repos/acme/nope/pulls")
    server.rate_limit_once.add(f"/repos/{REPO}/issues/7")
    gh.max_retries = 0
    with pytest.raises(GitHubError, match="rate limit"):
        gh.get(f"/repos/{REPO}/issues/7")


def test_build_from_github_keeps_the_fix_and_records_every_reason(world, tmp_path):
    root, shas, clock, server = world
    cache = tmp_path / "cache"
    report = build_code(f"github:{REPO}", tmp_path / "out", repo_path=root, cache_dir=cache, backend="local",
                        gate=False, store=tmp_path / "s.sqlite", github=_client(server, clock, cache / "github"),
                        log=lambda m: None)
    assert report.packs == ["acme-calc-11"]
    reasons = {r["task"]: r["reason"] for r in report.rejections}
    assert reasons == {
        "acme__calc-12": "PASS_TO_FAIL: the gold patch breaks 1 passing test(s): tests/test_core.py::test_multiply_int",
        "acme__calc-13": "links 2 issues", "acme__calc-14": "not merged", "acme__calc-15": "no linked issue"}
    assert report.details["source_stats"]["http"]["waits"] == [] and report.details["source_stats"]["prs_fetched"] == 5
