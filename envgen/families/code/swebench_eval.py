"""``envgen eval swebench``: grade SWE-bench predictions with a code pack's own verifier, report as SWE-bench does.

A prediction (``instance_id``, ``model_patch``, ``model_name_or_path``: SWE-bench's predictions format, as
JSONL, a JSON list or a JSON object keyed by instance id) is run as an episode of its instance's pack whose
only action is the ``submit`` tool with the patch, then the pack's ``tests`` verifier: the same sandbox
(the pack's Docker image), staging and test run that validation, the red-team gate and the pass check
use. No second harness can disagree with the one that built the task.

Outcomes follow SWE-bench's harness (``swebench.harness``):

- no prediction for an instance: ``incomplete``;
- an empty or missing ``model_patch``: ``empty_patch`` (not run);
- a patch the ``submit`` tool refuses (malformed, or it does not apply to the base commit), or a run that
  produced no test report: ``error`` (SWE-bench counts a patch that fails to apply as an error);
- otherwise ``completed``, and ``resolved`` iff every FAIL_TO_PASS and PASS_TO_PASS test passes;
- a prediction whose instance id no pack holds is listed in ``unknown_ids`` (SWE-bench refuses the whole
  file; here the rest is still graded).

Per model it writes ``<model>.<run_id>.json`` (SWE-bench's run summary: counts and id lists, schema
version 2) and ``logs/run_evaluation/<run_id>/<model>/<instance_id>/report.json`` (per instance,
``tests_status`` with FAIL_TO_PASS / PASS_TO_PASS success and failure lists), ``/`` in a model name
written as ``__``.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...episodes.episode import Episode
from ...errors import EnvgenError, InputError
from ...pack.format import Pack, Task
from ...sandbox import open_sandbox
from .packs import SUBMIT, code_packs

SCHEMA_VERSION = 2
LOG_DIR = Path("logs") / "run_evaluation"
REPORT = "report.json"
PASSING = ("passed", "xfail")


@dataclass
class Prediction:
    instance_id: str
    model_patch: str | None
    model_name_or_path: str


def read_predictions(path: str | Path) -> list[Prediction]:
    """Predictions from JSONL, a JSON list, or a JSON object {instance_id: prediction}; each must be an object
    with a string ``instance_id``. A repeated (model, instance) pair keeps the last prediction, as SWE-bench."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"--predictions {path}: cannot read it ({e.strerror})") from None
    rows: list[tuple[str, Any]] = []
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        data = None  # not one JSON document: JSONL
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((f"{path}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise InputError(f"{path}:{lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
    if isinstance(data, list):
        rows = [(f"{path}: item {i + 1}", r) for i, r in enumerate(data)]
    elif isinstance(data, dict) and data and "instance_id" not in data and all(isinstance(v, dict)
                                                                             for v in data.values()):
        rows = [(f"{path}: {k!r}", {"instance_id": k, **v}) for k, v in data.items()]  # {instance_id: prediction}
    elif isinstance(data, dict):
        rows = [(f"{path}:1", data)]  # one prediction (a one-line JSONL file)
    elif data is not None:
        raise InputError(f"{path}: expected JSONL, a JSON list or a JSON object of predictions")
    out: dict[tuple[str, str], Prediction] = {}
    for where, row in rows:
        if not isinstance(row, dict):
            raise InputError(f"{where}: a prediction must be a JSON object")
        iid = row.get("instance_id")
        if not isinstance(iid, str) or not iid.strip():
            raise InputError(f"{where}: instance_id: missing or not a non-empty string")
        patch = row.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise InputError(f"{where}: model_patch: expected a string (a unified diff) or null")
        model = row.get("model_name_or_path")
        model = model if isinstance(model, str) and model.strip() else "unknown"
        out[(model, iid)] = Prediction(iid, patch, model)
    if not out:
        raise InputError(f"{path}: no predictions in it")
    return list(out.values())


def _tests_status(f2p: list[str], p2p: list[str], details: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    outcomes = details.get("tests")
    if isinstance(outcomes, dict):
        ok = {t for t, o in outcomes.items() if o in PASSING}
    else:  # a kit without per-test outcomes: its failure list (first 20) is exact below 20 failures
        ok = set(f2p + p2p) - set(details.get("failed") or [])
    return {"FAIL_TO_PASS": {"success": [t for t in f2p if t in ok], "failure": [t for t in f2p if t not in ok]},
            "PASS_TO_PASS": {"success": [t for t in p2p if t in ok], "failure": [t for t in p2p if t not in ok]},
            "FAIL_TO_FAIL": {"success": [], "failure": []}, "PASS_TO_FAIL": {"success": [], "failure": []}}


def grade(pack: Pack, task: Task, patch: str, *, sandbox: str = "docker") -> dict[str, Any]:
    """One prediction through an episode (``submit`` with the patch) and the verifier: SWE-bench's per-instance
    report fields plus ``status`` (resolved, unresolved or error), ``reason`` and the verifier's details."""
    args = {**task.verifier.args, "report_tests": True}
    task = task.model_copy(update={"verifier": task.verifier.model_copy(update={"args": args})})
    f2p, p2p = list(args.get("FAIL_TO_PASS") or []), list(args.get("PASS_TO_PASS") or [])
    rec: dict[str, Any] = {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": False,
                           "resolved": False}
    tool = pack.manifest.submit_tool or args.get("submit_tool") or SUBMIT
    try:
        with open_sandbox(pack, sandbox) as sbx:
            ep = Episode(sbx, task)
            sub = ep.call(tool, {"patch": patch})
            if not sub.ok:
                return {**rec, "status": "error", "reason": f"the patch was refused: {sub.content.strip()[-600:]}"}
            verdict = ep.finish("")
    except EnvgenError as e:  # a sandbox that cannot start, an image that is missing
        return {**rec, "status": "error", "reason": f"{type(e).__name__}: {e}"}
    details = verdict.details
    if details.get("error") or "FAIL_TO_PASS" not in details:
        return {**rec, "status": "error", "reason": str(details.get("error") or details.get("reason") or
                                                        "the verifier gave no test report"), "details": details}
    resolved = verdict.reward >= 1.0
    return {**rec, "patch_successfully_applied": True, "resolved": resolved,
            "tests_status": _tests_status(f2p, p2p, details), "status": "resolved" if resolved else "unresolved",
            **({"reason": details["reason"]} if details.get("reason") else {}),
            "details": {k: v for k, v in details.items() if k != "tests"}}


def model_dir_name(model: str) -> str:
    return model.replace("/", "__")


def evaluate_predictions(target: str | Path, predictions: list[Prediction] | str | Path, *, sandbox: str = "docker",
                         run_id: str = "envgen", out_dir: str | Path = ".", workers: int = 1,
                         log: Callable[[str], None] = lambda m: None,
                         progress: Callable[[int], Any] | None = None) -> list[dict[str, Any]]:
    """Grade every prediction against the code pack(s) at ``target``; write and return one SWE-bench run report
    per model (with ``instances``: each instance's report, and the paths written)."""
    if workers < 1:
        raise InputError(f"--workers {workers}: must be at least 1")
    if not run_id or any(c in run_id for c in "/\\") or run_id in (".", ".."):
        raise InputError(f"--run-id {run_id!r}: a name without slashes")
    preds = read_predictions(predictions) if isinstance(predictions, (str, Path)) else list(predictions)
    instances: dict[str, tuple[Pack, Task]] = {}
    for pack in code_packs(target):
        for task in pack.tasks:
            instances[str(task.meta.get("instance_id") or task.id)] = (pack, task)
    out_dir = Path(out_dir)
    by_model: dict[str, list[Prediction]] = {}
    for p in preds:
        by_model.setdefault(p.model_name_or_path, []).append(p)
    jobs: list[tuple[Prediction, Pack, Task]] = []
    unknown: dict[str, list[str]] = {}
    for model, ps in by_model.items():
        for p in ps:
            if p.instance_id not in instances:
                unknown.setdefault(model, []).append(p.instance_id)
            elif p.model_patch is not None and p.model_patch.strip():
                jobs.append((p, *instances[p.instance_id]))
    for model, ids in unknown.items():
        log(f"eval swebench: {model}: {len(ids)} prediction(s) for instances no pack here holds, not graded: "
            f"{', '.join(sorted(ids)[:10])}{' ...' if len(ids) > 10 else ''}")

    results: dict[tuple[str, str], dict[str, Any]] = {}

    def run(job: tuple[Prediction, Pack, Task]) -> None:
        p, pack, task = job
        try:
            results[(p.model_name_or_path, p.instance_id)] = grade(pack, task, p.model_patch or "", sandbox=sandbox)
        finally:
            if progress:
                progress(1)

    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(run, jobs))

    reports = []
    for model, ps in by_model.items():
        mine = {p.instance_id: p for p in ps if p.instance_id in instances}
        ids: dict[str, set[str]] = {k: set() for k in ("completed", "incomplete", "empty_patch", "resolved",
                                                        "unresolved", "error")}
        per_instance: dict[str, dict[str, Any]] = {}
        for iid in instances:
            p = mine.get(iid)
            if p is None:
                ids["incomplete"].add(iid)
                continue
            if p.model_patch is None or not p.model_patch.strip():
                ids["empty_patch"].add(iid)
                per_instance[iid] = {"patch_is_None": p.model_patch is None, "patch_exists": False,
                                     "patch_successfully_applied": False, "resolved": False, "status": "empty_patch"}
                continue
            rec = results[(model, iid)]
            per_instance[iid] = rec
            if rec["status"] == "error":
                ids["error"].add(iid)
                log(f"eval swebench: {model}: {iid}: error: {rec['reason']}")
                continue
            ids["completed"].add(iid)
            ids["resolved" if rec["resolved"] else "unresolved"].add(iid)
            logs = out_dir / LOG_DIR / run_id / model_dir_name(model) / iid
            logs.mkdir(parents=True, exist_ok=True)
            swe = {k: rec[k] for k in ("patch_is_None", "patch_exists", "patch_successfully_applied", "resolved",
                                       "tests_status")}
            (logs / REPORT).write_text(json.dumps({iid: swe}, indent=4) + "\n")
        report = {
            "total_instances": len(instances), "submitted_instances": len(mine),
            "completed_instances": len(ids["completed"]), "resolved_instances": len(ids["resolved"]),
            "unresolved_instances": len(ids["unresolved"]), "empty_patch_instances": len(ids["empty_patch"]),
            "error_instances": len(ids["error"]),
            **{f"{k}_ids": sorted(ids[k]) for k in ("completed", "incomplete", "empty_patch")},
            "submitted_ids": sorted(mine), "resolved_ids": sorted(ids["resolved"]),
            "unresolved_ids": sorted(ids["unresolved"]), "error_ids": sorted(ids["error"]),
            "unknown_ids": sorted(unknown.get(model, [])), "schema_version": SCHEMA_VERSION,
            "model_name_or_path": model, "run_id": run_id, "sandbox": sandbox,
        }
        path = out_dir / f"{model_dir_name(model)}.{run_id}.json"
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(report, indent=4) + "\n")
        tmp.replace(path)
        reports.append({**report, "report_file": str(path), "instances": per_instance})
    return reports
