"""The `envgen` command line as a user runs it: a real subprocess, JSON output, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def envgen(*args: str, cwd=None, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    p = subprocess.run([sys.executable, "-m", "envgen", *args], capture_output=True, text=True, cwd=cwd, env=env,
                       timeout=600)
    if check:
        assert p.returncode == 0, p.stderr[-2000:]
    return p


@pytest.fixture(scope="module")
def travel(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "travel"
    summary = json.loads(envgen("build", "general", "--category", "travel-planning", "--out", str(out),
                                "--tasks", "20", "--json").stdout)
    assert summary["kept"] == summary["proposed"] == 20
    return out, summary


def test_build_validate_run_ls(travel, tmp_path):
    out, summary = travel
    assert set(summary["difficulty"]) >= {"1", "2", "3", "4", "5", "6", "7", "8"}
    v = json.loads(envgen("validate", str(out), "--json").stdout)
    assert v["passed"] == v["tasks"] == 20 and v["failed"] == []
    t = json.loads(envgen("run", str(out), "--task", "travel-s0-0005", "--policy", "oracle", "--json").stdout)
    assert t["reward"] == 1.0 and t["terminated"] and t["tool_calls"] == t["turns"] - 1
    t = json.loads(envgen("run", str(out), "--task", "travel-s0-0005", "--policy", "null", "--json").stdout)
    assert t["reward"] == 0.0
    rows = json.loads(envgen("ls", str(out.parent), "--json").stdout)
    assert [r["name"] for r in rows] == ["general-travel-planning"] and rows[0]["tasks"] == 20
    text = envgen("run", str(out), "--task", "travel-s0-0005").stdout
    assert "reward 1" in text and "[user]" in text


def test_check_writes_stats_kept_pack_and_histogram(travel, tmp_path):
    out, _ = travel
    r = json.loads(envgen("check", str(out), "--policy", "oracle", "--k", "5", "--out", str(tmp_path / "kept"),
                          "--plot", str(tmp_path / "h.png"), "--store", str(tmp_path / "s.sqlite"), "--json").stdout)
    assert r["kept"] == 20 and r["rollouts"] == 20 and r["naive_rollouts"] == 100
    assert (tmp_path / "h.png").stat().st_size > 1000
    assert json.loads(envgen("validate", str(tmp_path / "kept"), "--json").stdout)["passed"] == 20


def test_families_lists_offline_categories():
    cats = {(c["family"], c["category"]) for c in json.loads(envgen("families", "--json").stdout)}
    assert {("general", "travel-planning"), ("general", "library-catalog"), ("search", "geo-multihop")} <= cats


@pytest.mark.parametrize("args,needle", [
    (("validate", "/nonexistent/pack"), "not a pack (no pack.json)"),
    (("build", "general", "--category", "nope", "--out", "/tmp/x"), "nope"),
    (("run", "/nonexistent", "--policy", "oracle"), "not a pack"),
    (("check", "/nonexistent", "--policy", "oracle"), "not a pack"),
    (("build", "code", "--out", "/tmp/x"), "needs --from"),
])
def test_user_errors_are_one_line(args, needle):
    p = envgen(*args, check=False)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_unknown_policy_is_one_line(travel):
    out, _ = travel
    p = envgen("run", str(out), "--policy", "gpt", check=False)
    assert p.returncode == 2 and "unknown policy 'gpt'" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_train_errors_are_one_line(travel):
    pytest.importorskip("trl")
    out, _ = travel
    p = envgen("train", "--pack", str(out), "--model", "x", "--set", "nonsense", check=False)
    assert p.returncode == 2 and "--set 'nonsense': write KEY=VALUE" in p.stderr
