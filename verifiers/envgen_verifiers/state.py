"""DB-state checks: after the episode, queries over the work dir's SQLite database must give expected rows."""

from __future__ import annotations

import os
import sqlite3


def _rows(cur) -> list[list]:
    return [list(r) for r in cur.fetchall()]


def check(args: dict, *, work_dir: str, **_) -> dict:
    """args: db (path under the work dir), checks=[{query, params=[], expected=[[...]], ordered=false}],
    partial=false (reward = fraction of checks passed instead of all-or-nothing)."""
    db = os.path.normpath(os.path.join(work_dir, args["db"]))
    if not db.startswith(os.path.normpath(work_dir) + os.sep):
        raise ValueError(f"db path {args['db']!r} leaves the work dir")
    if not os.path.isfile(db):
        return {"reward": 0.0, "details": {"reason": f"database {args['db']} is missing"}}
    checks = args.get("checks") or []
    if not checks:
        raise ValueError("state verifier needs at least one check")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    results = []
    try:
        for c in checks:
            try:
                got = _rows(con.execute(c["query"], c.get("params", [])))
            except sqlite3.Error as e:
                results.append({"query": c["query"], "ok": False, "error": str(e)})
                continue
            want = [list(r) for r in c["expected"]]
            ok = got == want if c.get("ordered") else sorted(map(repr, got)) == sorted(map(repr, want))
            results.append({"query": c["query"], "ok": ok, **({} if ok else {"got": got[:20], "expected": want[:20]})})
    finally:
        con.close()
    passed = sum(r["ok"] for r in results)
    reward = passed / len(results) if args.get("partial") else float(passed == len(results))
    return {"reward": reward, "details": {"passed": passed, "checks": results}}
