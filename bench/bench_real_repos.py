"""The code family on real repositories' own git history: what a stock build keeps, what it drops and why.

Each ``--repo LANG=PATH[@LIMIT]`` (repeatable; PATH a local clone, LANG a language name or ``auto`` for
detection, LIMIT the newest commits to read, default ``--limit``) goes through the stock build,
``build_code("git:PATH", limit=LIMIT, backend="docker")`` (what ``envgen build code --from git:PATH
--limit N --sandbox docker`` runs), and the bench prints per repository and per language: commits read,
candidates (commits that pass the candidate filters), kept, rejections by reason, where kept tasks'
statements came from, oracle / null on every kept task, and minutes.

Oracle / null: with the gate on (the stock build) every kept task has already been run with the gold
patch twice (``reference`` must score 1) and with no change (``noop``, else ``claim``: must score 0); the
bench reads those probe scores from the build report. With ``--no-gate`` it rolls each kept pack out in
Docker itself (``OraclePolicy`` and ``NullPolicy`` through ``PackEnv``).

``--candidates-only`` stops before any container: the source and the candidate filters only (seconds per
repository), which is what the statement-yield question needs.

Writes the figures as JSON to bench/out/real_repos-<time>.json; ``--write`` records a section of
bench/RESULTS.md (``--section`` names it, default "Code family on real repositories").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import ran_on, write_section

from envgen.errors import EnvgenError, InputError
from envgen.families.code import build_code
from envgen.families.code.candidates import Filters, Rejection, reason_group
from envgen.families.code.lang import RepoView
from envgen.families.code.languages import detect_language, get_language
from envgen.families.code.packs import slug
from envgen.families.code.sources import git_out, load_issues, open_source

OUT = Path(__file__).resolve().parent / "out"
SPEC = re.compile(r"^(?P<lang>[\w+-]+)=(?P<path>.+?)(?:@(?P<limit>\d+))?$")


def parse_repo(spec: str, default_limit: int) -> tuple[str, Path, int]:
    """(language or "auto", clone, limit) of one ``--repo LANG=PATH[@LIMIT]``."""
    m = SPEC.match(spec)
    if not m:
        raise InputError(f"--repo {spec!r}: expected LANG=PATH[@LIMIT] (LANG a language name or auto)")
    lang = m["lang"].lower()
    if lang != "auto":
        get_language(lang)  # an unknown name is one clear error before any build
    path = Path(m["path"]).expanduser().resolve()
    if not (path / ".git").exists() and not (path / "HEAD").exists():
        raise InputError(f"--repo {spec!r}: {path} is not a git clone")
    return lang, path, int(m["limit"]) if m["limit"] else default_limit


def detected(path: Path) -> str:
    """The language ``auto`` resolves to at the clone's HEAD (the build detects it again per commit)."""
    view = RepoView(path, git_out(path, "rev-parse", "HEAD").strip())
    return detect_language(view).name


def candidates_only(lang: str, path: Path, limit: int, issues: dict | None) -> dict:
    """The source and the candidate filters, nothing built: commits read, candidates, rejections by reason,
    and where the candidates' statements came from."""
    from envgen.families.code.pipeline import (
        _plan,  # the build's own planning step: the same filters and detection
    )

    t0 = time.perf_counter()
    fixed = None if lang == "auto" else get_language(lang)
    src = open_source(f"git:{path}", language=fixed, max_items=limit, issues=issues)
    raws = list(src.instances())[:limit]
    reasons: Counter = Counter()
    statements: Counter = Counter()
    languages: Counter = Counter()
    n = 0
    for raw in raws:
        cand, language, recipe = _plan(raw, fixed, Filters(), {}, None)
        languages[language.name if language else "?"] += 1
        if isinstance(cand, Rejection):
            reasons[f"{cand.stage}: {reason_group(cand.reason)}"] += 1
            continue
        n += 1
        statements[raw.meta.get("statement_from", "?")] += 1
        if isinstance(recipe, Rejection):
            reasons[f"{recipe.stage}: {reason_group(recipe.reason)}"] += 1
    return {"commits": len(raws), "candidates": n, "kept": None, "rejected": dict(reasons),
            "statements": dict(statements), "languages": dict(languages), "seconds": time.perf_counter() - t0}


def probe_scores(summary: dict) -> tuple[float | None, float | None]:
    """(oracle, null) of a kept task from its gate probes: the reference's score, the no-change probe's."""
    probes = summary.get("gate") or {}
    oracle = probes.get("reference")
    null = probes.get("noop", probes.get("claim"))
    return oracle, null


def rollouts(pack_dir: Path) -> tuple[float | None, float | None]:
    """(oracle, null) of a kept pack rolled out in Docker (for builds run with ``--no-gate``)."""
    from envgen.episodes.gym import PackEnv
    from envgen.policies.builtin import NullPolicy, OraclePolicy, rollout

    env = PackEnv(pack_dir, sandbox="docker")
    try:
        return rollout(env, OraclePolicy()).reward, rollout(env, NullPolicy()).reward
    finally:
        env.close()


def full_build(lang: str, path: Path, limit: int, issues: dict | None, root: Path, runs: int, gate: bool) -> dict:
    """The stock Docker build of one repository's history, summarised."""
    from envgen.pack import load

    out = root / "out"
    t0 = time.perf_counter()
    report = build_code(f"git:{path}", out, language=None if lang == "auto" else lang, limit=limit, runs=runs,
                        backend="docker", gate=gate, store=root / "state.sqlite", issues=issues,
                        log=lambda m: print(f"  {m}", flush=True))
    seconds = time.perf_counter() - t0
    candidate_rejections = sum(1 for r in report.rejections if r.get("stage") == "candidates")
    statements: Counter = Counter()
    checks = []
    for instance, summary in sorted(report.details["tasks"].items()):
        name = slug(instance)
        task = load(out / name).tasks[0]
        statements[task.meta.get("statement_from", "?")] += 1
        oracle, null = probe_scores(summary) if gate else rollouts(out / name)
        checks.append({"task": instance, "oracle": oracle, "null": null,
                       "FAIL_TO_PASS": summary.get("FAIL_TO_PASS"), "PASS_TO_PASS": summary.get("PASS_TO_PASS")})
    return {"commits": report.proposed, "candidates": report.proposed - candidate_rejections, "kept": report.kept,
            "rejected": dict(report.rejected_by_reason), "statements": dict(statements), "tasks": checks,
            "reasons": [{"task": r["task"], "stage": r.get("stage"), "reason": r["reason"][:300]}
                        for r in report.rejections if r.get("stage") != "candidates"],
            "seconds": seconds}


def fmt_reasons(rejected: dict) -> str:
    return ", ".join(f"{k} ({n})" for k, n in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0]))) or "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", action="append", required=True, metavar="LANG=PATH[@LIMIT]",
                    help="a local clone and its language (or auto); repeatable")
    ap.add_argument("--limit", type=int, default=30, help="newest commits per repository without @LIMIT")
    ap.add_argument("--runs", type=int, default=3, help="repetitions of each validation side")
    ap.add_argument("--no-gate", action="store_true", help="skip the red-team gate; roll oracle/null out instead")
    ap.add_argument("--candidates-only", action="store_true", help="source and candidate filters only, no Docker")
    ap.add_argument("--issues", type=Path, help="issue texts for every repository (envgen's --issues format)")
    ap.add_argument("--write", action="store_true", help="record the figures in bench/RESULTS.md")
    ap.add_argument("--section", default="Code family on real repositories", help="RESULTS.md heading")
    a = ap.parse_args()
    repos = [parse_repo(s, a.limit) for s in a.repo]
    issues = load_issues(a.issues) if a.issues else None
    rows = []
    for lang, path, limit in repos:
        print(f"{path.name} ({lang}, {limit} commits) ...", flush=True)
        row = {"repo": path.name, "path": str(path), "asked": lang, "limit": limit,
               "head": git_out(path, "rev-parse", "HEAD").strip()}
        try:
            row["language"] = detected(path) if lang == "auto" else lang
        except EnvgenError as e:
            row["language"] = f"undetected ({e})"
        try:
            if a.candidates_only:
                row.update(candidates_only(lang, path, limit, issues))
            else:
                with tempfile.TemporaryDirectory(prefix=f"bench-real-{path.name}-") as d:
                    row.update(full_build(lang, path, limit, issues, Path(d), a.runs, not a.no_gate))
        except Exception as e:  # noqa: BLE001  one repository's failure is a row of the table, not the end of the run
            row["error"] = f"{type(e).__name__}: {e}"[:400]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("tasks", "reasons")}, default=str), flush=True)

    by_lang: dict[str, dict] = {}
    for r in rows:
        if "error" in r:
            continue
        agg = by_lang.setdefault(r["language"], {"repos": 0, "commits": 0, "candidates": 0, "kept": 0,
                                                 "rejected": Counter(), "seconds": 0.0})
        agg["repos"] += 1
        for k in ("commits", "candidates", "seconds"):
            agg[k] += r[k]
        agg["kept"] += r["kept"] or 0
        agg["rejected"].update(r["rejected"])
    mode = "candidate filters only (no Docker)" if a.candidates_only else \
        f"Docker, {a.runs} runs per side, gate {'off (oracle/null rolled out)' if a.no_gate else 'on'}"
    lines = [("| repository | language | HEAD | commits | candidates | kept | statements from | oracle / null "
              "| rejected by reason | minutes |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['repo']} | {r['language']} | {r['head'][:10]} | failed: {r['error'][:200]} "
                         "| | | | | | |")
            continue
        tasks = r.get("tasks") or []
        checks = ", ".join(f"{t['oracle']}/{t['null']}" for t in tasks) or "-"
        kept = "-" if r["kept"] is None else str(r["kept"])
        lines.append(f"| {r['repo']} | {r['language']}{'' if r['asked'] != 'auto' else ' (auto)'} | "
                     f"{r['head'][:10]} | {r['commits']} | {r['candidates']} | {kept} | "
                     f"{fmt_reasons(r['statements'])} | {checks} | {fmt_reasons(r['rejected'])} | "
                     f"{r['seconds'] / 60:.1f} |")
    lang_lines = ["| language | repositories | commits | candidates | kept | rejected by reason | minutes |",
                  "|---|---|---|---|---|---|---|"]
    for name, agg in sorted(by_lang.items()):
        kept = "-" if a.candidates_only else str(agg["kept"])
        lang_lines.append(f"| {name} | {agg['repos']} | {agg['commits']} | {agg['candidates']} | {kept} | "
                          f"{fmt_reasons(agg['rejected'])} | {agg['seconds'] / 60:.1f} |")
    cmd = "python bench/bench_real_repos.py " + " ".join(
        [f"--repo {lang}={p.name}@{n}" for lang, p, n in repos] + (["--candidates-only"] if a.candidates_only else [])
        + (["--no-gate"] if a.no_gate else []) + (["--write"] if a.write else []))
    text = (ran_on(cmd, f"{os.cpu_count()} CPUs", f"5-min load average {os.getloadavg()[1]:.1f}") +
            f" Each repository's newest commits through the stock `git:` build; {mode}.\n\n" + "\n".join(lines) +
            "\n\nPer language:\n\n" + "\n".join(lang_lines) + "\n")
    print(text)
    OUT.mkdir(exist_ok=True)
    dest = OUT / f"real_repos-{time.strftime('%Y%m%d-%H%M%S')}.json"
    dest.write_text(json.dumps({"mode": mode, "rows": rows,
                                "by_language": {k: {**v, "rejected": dict(v["rejected"])} for k, v in by_lang.items()}},
                               indent=2, default=str) + "\n")
    print(f"wrote {dest}")
    if a.write:
        write_section(a.section, text)


if __name__ == "__main__":
    main()
