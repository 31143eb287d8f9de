"""Does the stock code family reproduce SWE-bench records? Build each record with the CLI in Docker and compare.

    python bench/bench_swebench.py FILE [FILE ...] --repo-path OWNER/NAME=CLONE [...] [--instance ID ...]
        [--python X.Y] [--no-gate] [--out DIR [--reuse]] [--write]

Each instance (a repeated instance_id is taken once) is written to a one-record SWE-bench file and built with
``envgen build code --from swebench:... --sandbox docker --json`` as a user would run it, so one instance's
failure cannot touch another's and each gets its own wall time. Per instance it prints: built or rejected
(with the reason), whether FAIL_TO_PASS and PASS_TO_PASS equal the record's exactly, and equal modulo
SWE-bench's id form (its pytest log parser keys a result by the id's first word, so the record's lists
may hold cut ids; for repositories it runs with their own runner, such as sympy, by the bare test name),
and minutes. An instance whose repository has no ``--repo-path`` is
reported as the build reports it (rejected at source). ``--write`` records the table in bench/RESULTS.md
under "## SWE-bench records with the stock CLI".
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import ran_on, write_section  # noqa: E402

from envgen.families.code.packs import harness_id  # noqa: E402
from envgen.families.code.sources import read_swebench  # noqa: E402
from envgen.pack import load  # noqa: E402

HEADING = "SWE-bench records with the stock CLI"


def cut(ids: list[str], bare: bool = False) -> set[str]:
    """The ids as SWE-bench's grader keys them (``harness_id``); ``bare``: by test name alone, as its
    parsers for repositories it runs with their own runner (sympy's ``bin/test``) key them."""
    return {harness_id(t).rsplit("::", 1)[-1] if bare else harness_id(t) for t in ids}


def compare(mine: list[str], record: list[str]) -> dict:
    """exact: the same ids; cut: the same once both are in the harness's form (first word; the bare name
    where the record's ids have no file part); the ids on each side only."""
    bare = bool(record) and not any("::" in t for t in record)
    return {"exact": set(mine) == set(record), "cut": cut(mine, bare) == cut(record, bare),
            "only_envgen_cut": sorted(cut(mine, bare) - cut(record, bare))[:5],
            "only_record_cut": sorted(cut(record, bare) - cut(mine, bare))[:5],
            "only_envgen": sorted(set(mine) - set(record))[:5], "only_record": sorted(set(record) - set(mine))[:5]}


def build_one(row: dict, repo_paths: list[str], work: Path, extra: list[str], reuse: bool = False) -> dict:
    """One record through ``envgen build code`` in Docker; the outcome and the comparison with the record
    (``reuse``: an instance whose build this work folder already holds is compared, not rebuilt)."""
    src = work / "instance.jsonl"
    src.write_text(json.dumps(row) + "\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "envgen.cli", "build", "code", "--from", f"swebench:{src}", "--out",
           str(work / "out"), "--store", str(work / "state.sqlite"), "--sandbox", "docker", "--json", *extra]
    for rp in repo_paths:
        cmd += ["--repo-path", rp]
    done = work / "out" / "build.json"
    if reuse and done.exists():  # built by an earlier run: compared again, not rebuilt (its report's time)
        report = json.loads(done.read_text())
        minutes = report["seconds"] / 60
    else:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        minutes = (time.perf_counter() - t0) / 60
        (work / "build.log").write_text(proc.stderr)
        try:
            report = json.loads(proc.stdout)
        except json.JSONDecodeError:
            last = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            return {"instance_id": row["instance_id"], "minutes": round(minutes, 1), "status": "error",
                    "reason": last[0][:300]}
    out = {"instance_id": row["instance_id"], "minutes": round(minutes, 1)}
    if not report.get("packs"):
        rej = (report.get("rejections") or [{}])[0]
        return {**out, "status": "rejected", "reason": f"{rej.get('stage')}: {rej.get('reason', '')}"[:300]}
    args = load(work / "out" / report["packs"][0]).tasks[0].verifier.args
    network = ((report.get("details") or {}).get("network") or {}).get("tasks", {}).get(row["instance_id"], [])
    return {**out, "status": "built", "reason": "", "network": network,
            "FAIL_TO_PASS": compare(args["FAIL_TO_PASS"], row["FAIL_TO_PASS"]),
            "PASS_TO_PASS": compare(args["PASS_TO_PASS"], row["PASS_TO_PASS"]),
            "counts": {"FAIL_TO_PASS": len(args["FAIL_TO_PASS"]), "PASS_TO_PASS": len(args["PASS_TO_PASS"]),
                       "record_FAIL_TO_PASS": len(row["FAIL_TO_PASS"]),
                       "record_PASS_TO_PASS": len(row["PASS_TO_PASS"])}}


def _mark(result: dict, key: str, how: str) -> str:
    if result["status"] != "built":
        return "-"
    return "yes" if result[key][how] else "no"


def table(results: list[dict]) -> str:
    lines = ["| instance | outcome | FAIL_TO_PASS equal (exact / harness form) | PASS_TO_PASS equal (exact / "
             "harness form) | differences (harness form) | minutes |", "|---|---|---|---|---|---|"]
    for r in results:
        outcome = r["status"] + (f": {r['reason']}" if r["reason"] else "")
        diffs = []
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS") if r["status"] == "built" else ():
            for side, what in (("only_envgen_cut", "envgen only"), ("only_record_cut", "record only")):
                if r[key].get(side):
                    diffs.append(f"{key} {what}: {', '.join(r[key][side])}")
        if r.get("network"):
            left = set(r["PASS_TO_PASS"]["only_record_cut"]) - cut(r["network"])
            diffs.append(f"{len(r['network'])} test(s) need the network (reported apart)"
                         + ("; every record-only test is one of them" if not left else ""))
        lines.append(f"| {r['instance_id']} | {outcome.replace('|', '/')} | {_mark(r, 'FAIL_TO_PASS', 'exact')} / "
                     f"{_mark(r, 'FAIL_TO_PASS', 'cut')} | {_mark(r, 'PASS_TO_PASS', 'exact')} / "
                     f"{_mark(r, 'PASS_TO_PASS', 'cut')} | {'; '.join(diffs).replace('|', '/') or '-'} | "
                     f"{r['minutes']} |")
    built = [r for r in results if r["status"] == "built"]
    same = [r for r in built if r["FAIL_TO_PASS"]["cut"] and r["PASS_TO_PASS"]["cut"]]
    lines.append("")
    lines.append(f"{len(results)} instance(s): {len(built)} built, {len(same)} reproduced (both lists equal modulo "
                 f"the harness's id form), {len(results) - len(built)} not built.")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="SWE-bench files (JSON list or JSONL)")
    ap.add_argument("--repo-path", action="append", default=[], help="OWNER/NAME=CLONE (repeat per repository)")
    ap.add_argument("--instance", action="append", default=[], help="only these instance ids (repeatable)")
    ap.add_argument("--python", help="X.Y for every instance (default: the recipe's choice)")
    ap.add_argument("--no-gate", action="store_true", help="skip the red-team gate (validation only)")
    ap.add_argument("--out", type=Path, help="keep each instance's build here (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true", help="with --out: compare the builds already there again")
    ap.add_argument("--write", action="store_true", help="record the table in bench/RESULTS.md")
    a = ap.parse_args()
    if a.reuse and not a.out:
        ap.error("--reuse needs --out")
    rows: dict[str, dict] = {}
    for f in a.files:
        for row in read_swebench(f):
            rows.setdefault(row["instance_id"], row)
    if a.instance:
        missing = [i for i in a.instance if i not in rows]
        if missing:
            sys.exit(f"not in the files: {', '.join(missing)}")
        rows = {i: rows[i] for i in a.instance}
    extra = (["--python", a.python] if a.python else []) + (["--no-gate"] if a.no_gate else [])
    root = a.out or Path(tempfile.mkdtemp(prefix="bench-swebench-"))
    results = []
    for iid, row in rows.items():
        work = root / iid
        work.mkdir(parents=True, exist_ok=True)
        r = build_one(row, a.repo_path, work, extra, a.reuse)
        results.append(r)
        print(json.dumps(r), flush=True)
    text = table(results)
    print(text)
    if a.write:
        write_section(HEADING, ran_on("python bench/bench_swebench.py " + " ".join(str(f) for f in a.files)
                                      + (" --no-gate" if a.no_gate else ""), f"{os.cpu_count()} CPUs",
                                      "Docker sandbox") + "\n\n" + text)


if __name__ == "__main__":
    main()
