"""tau2-bench domains through `envgen import tau2`, judged as a user would run them (CI never runs this).

    python bench/bench_tau2.py PATH_TO_TAU2_BENCH [--domains retail,airline,telecom] [--workers 8] [--write]

For each domain: the import (or the one-line reason it cannot be made), then every imported task replayed in
the local sandbox three ways:

- reference: tau2's expected actions with the reference conversation (greeting, a description and consent
  question before each write, the final message telling ``communicate_info``): must score 1;
- null: no call, an empty answer: must score 0, except tasks tau2 itself passes with no action (no expected
  write and nothing to tell), counted apart;
- wrong: the reference with one argument of its last write changed (an id's last character, a list's last
  element, another value of the same type): must score 0 (tasks without writes have none).

`--write` records the figures in bench/RESULTS.md under "## tau2-bench import".
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import copy
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import ran_on, write_section  # noqa: E402

from envgen.episodes.episode import replay  # noqa: E402
from envgen.errors import InputError  # noqa: E402
from envgen.importers.tau2 import import_tau2  # noqa: E402
from envgen.pack import ToolCall  # noqa: E402
from envgen.sandbox import open_sandbox  # noqa: E402


def _mutate(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        if not value:
            return "x"
        last = value[-1]
        return value[:-1] + (str((int(last) + 1) % 10) if last.isdigit() else "x" if last != "x" else "y")
    if isinstance(value, list):
        return value[:-1] + [_mutate(value[-1])] if value else ["x"]
    if isinstance(value, dict):
        out = dict(value)
        if out:
            k = sorted(out)[0]
            out[k] = _mutate(out[k])
        return out
    return "x"


def wrong_calls(task, writes: set[str]) -> list | None:
    """The reference calls with one argument of the last write changed; None without a write."""
    idx = [i for i, c in enumerate(task.reference.calls) if c.tool in writes and c.args]
    if not idx:
        return None
    calls = [ToolCall(tool=c.tool, args=copy.deepcopy(c.args)) for c in task.reference.calls]
    c = calls[idx[-1]]
    key = sorted(c.args)[0]
    c.args[key] = _mutate(c.args[key])
    return calls


def judge(pack, workers: int, writes: set[str]) -> dict:
    local = threading.local()
    boxes, lock = [], threading.Lock()

    def sbx():
        if not hasattr(local, "s"):
            local.s = open_sandbox(pack, "local")
            with lock:
                boxes.append(local.s)
        return local.s

    def one(task):
        ref = task.reference
        out = {"id": task.id}
        good = replay(sbx(), task, ref.calls, ref.answer, ref.messages).verdict
        out["reference"] = good.reward
        out["null"] = replay(sbx(), task, [], "", None).verdict.reward
        wrong = wrong_calls(task, writes)
        if wrong is not None:
            out["wrong"] = replay(sbx(), task, wrong, ref.answer, ref.messages).verdict.reward
        # tau2 passes a task with no action when its expected actions change nothing (none writes, or every
        # write fails) and nothing is to be told (its judged assertions aside)
        out["trivial"] = _changed(good.details) == 0 and not any(
            p.get("kind") in ("said", "transferred") for p in _parts(task.verifier.model_dump()))
        return out

    try:
        with cf.ThreadPoolExecutor(workers) as ex:
            rows = list(ex.map(one, pack.tasks))
    finally:
        for b in boxes:
            b.close()
    return {"rows": rows}


def _changed(details: dict) -> int | None:
    """Leaves of the JSON state the episode changed, from its verdict's state part."""
    for p in details.get("parts") or []:
        d = p.get("details") or {}
        if isinstance(d.get("changes"), dict) and "summary" in d["changes"]:
            return d["changes"]["summary"].get("changed")
        found = _changed(d)
        if found is not None:
            return found
    return None


def _parts(v: dict) -> list[dict]:
    if v["kind"] == "composite":
        return [q for p in v["args"]["parts"] for q in _parts(p)]
    return [v]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", help="root of a tau2-bench checkout")
    ap.add_argument("--domains", default="retail,airline,telecom")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    lines = [ran_on(f"python bench/bench_tau2.py TAU2 --domains {a.domains}", "local sandbox"), "",
             "| domain | imported | reference = 1 | null = 0 | null = 1 (tau2 passes it too) | wrong = 0 | import s | "
             "judge s |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    for domain in a.domains.split(","):
        out = Path(tempfile.mkdtemp(prefix=f"bench-tau2-{domain}-")) / "pack"
        t0 = time.perf_counter()
        try:
            rep = import_tau2(a.path, domain, out)
        except InputError as e:
            lines.append(f"| {domain} | not imported | | | | | | |")
            notes.append(f"- {domain}: {e}")
            print(f"{domain}: {e}", flush=True)
            continue
        t_import = time.perf_counter() - t0
        writes = set(rep.write_tools)
        t0 = time.perf_counter()
        res = judge(rep.pack, a.workers, writes)["rows"]
        t_judge = time.perf_counter() - t0
        n = len(res)
        ref_ok = sum(r["reference"] == 1.0 for r in res)
        trivial = [r for r in res if r["trivial"]]
        null_zero = sum(r["null"] == 0.0 for r in res if not r["trivial"])
        null_one_trivial = sum(r["null"] == 1.0 for r in trivial)
        wrong = [r for r in res if "wrong" in r]
        wrong_zero = sum(r["wrong"] == 0.0 for r in wrong)
        lines.append(f"| {domain} | {n} (skipped {len(rep.skipped)}) | {ref_ok}/{n} | {null_zero}/{n - len(trivial)} | "
                     f"{null_one_trivial}/{len(trivial)} | {wrong_zero}/{len(wrong)} | {t_import:.1f} | {t_judge:.0f} |")
        for what, ids in (("reference below 1", [r["id"] for r in res if r["reference"] != 1.0]),
                          ("wrong trajectory above 0", [r["id"] for r in wrong if r["wrong"] != 0.0]),
                          ("null above 0", [r["id"] for r in res if not r["trivial"] and r["null"] != 0.0]),
                          ("tau2 passes with no action", [r["id"] for r in trivial])):
            if ids:
                notes.append(f"- {domain}: {what}: {', '.join(sorted(ids, key=lambda i: int(i.rsplit('-', 1)[1]) if i.rsplit('-', 1)[1].isdigit() else 0)[:30])}")
        kinds = Counter(rep.kinds)
        notes.append(f"- {domain}: verifier parts per task kind: {dict(sorted(kinds.items()))}")
        print(lines[-1], flush=True)
    body = "\n".join(lines + [""] + notes)
    print(body)
    if a.write:
        write_section("tau2-bench import", body)


if __name__ == "__main__":
    main()
