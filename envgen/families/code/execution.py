"""Execution validation: which tests the gold patch turns from failing to passing, and which it breaks.

The task's test files run ``runs`` times (default 3) at the base commit with the test patch, and ``runs``
times with the gold patch and the test patch, each run from a clean reset, all in one container from
the task's image (no network, ``TZ=UTC``, ``PYTHONHASHSEED=0``, a timeout per run, JUnit XML). One
container for all runs keeps the overhead over the raw test time small; every run's timings are kept.
The gold patch is staged exactly as an agent's submission will be (the kit's ``stage``: test
infrastructure restored from base + test patch) and the run is the verifier's (plugin autoload off,
the environment's pytest plugins named with ``-p``, a canary test that must fail); the plugins are
recorded for the verifier.

- FAIL_TO_PASS: fails in every base run, passes in every gold run;
- PASS_TO_PASS: passes in every run of both;
- PASS_TO_FAIL: passes in every base run, fails in every gold run: the task is rejected;
- flaky: any test whose outcome varies between runs of one side: excluded and listed;
- fail_to_fail: fails in every run of both sides: listed by name, not graded;
- network: failed (in both sides, or flakily) for want of the network (the runs have none): its failure
  text names a network error (``NETWORK``), or the kit's probe (``envgen_verifiers.netprobe``) saw the
  test, or its module while importing, try to reach another host (a data file fetched at test time
  whose download error the project swallows): listed by name, in neither list, and counted apart from
  the tests that fail for what the code does (fail_to_fail);
- a test missing from a run's report counts as failed in that run (a module that no longer imports);
  the files that did not collect are listed per side (``not_run``). A pytest session that stops before
  running any test (a conftest that does not import) is rerun file by file, so one broken file does not
  turn every test into FAIL_TO_PASS.

A task needs at least one FAIL_TO_PASS test, every one of them a test the test patch adds or changes
(the kit's ``changed_by_test_patch``; when the base did not build, so that the unchanged tests went
unreported there, those become PASS_TO_PASS and the task is graded on the changed ones), no PASS_TO_FAIL test, gold runs that ran tests, and runs whose
canary test failed (a project whose own configuration reports a failing test as passing cannot be
judged by its tests). Each rejection reason starts with its kind (``tests did not run``, ``no
FAIL_TO_PASS test``, ``PASS_TO_FAIL``, ``flaky``, ...) so build reports group them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...sandbox.engine import engine
from ...errors import BuildError, InputError, SandboxError
from ...sandbox.images import SANDBOX_UID
from ...paths import bundled
from ...sandbox.docker import LABEL, OWNER_LABELS

KIT_IN_IMAGE = "/opt/envgen/verifiers"
SPEC_DIR = "/run/envgen-validate"
PASS, FAIL, SKIP = "pass", "fail", "skip"
_BOOT = ("import sys; sys.path.insert(0, {kit!r}); from envgen_verifiers.tests import main; "
         "sys.exit(main(['matrix', {spec!r}]))")


NETWORK = re.compile(
    r"gaierror|Name or service not known|Temporary failure in name resolution|No address associated with hostname|"
    r"nodename nor servname|getaddrinfo failed|Network is unreachable|No route to host|ConnectionRefusedError|"
    r"Connection refused|URLError|NewConnectionError|Max retries exceeded|ConnectError|ConnectTimeout|"
    r"ConnectionError|Failed to establish a new connection|Could not resolve host")
"""A failure message that says the test needed the network (validation runs have none)."""


@dataclass
class Validation:
    instance_id: str
    FAIL_TO_PASS: list[str] = field(default_factory=list)
    PASS_TO_PASS: list[str] = field(default_factory=list)
    PASS_TO_FAIL: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    fail_to_fail: list[str] = field(default_factory=list)
    """Tests that fail in every run of both sides (not graded)."""
    network: list[str] = field(default_factory=list)
    """Tests that failed with a network error (validation has no network): in neither list."""
    not_run: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per side (base, gold): {test file: why} for files that did not collect in some run of that side;
    their tests are missing there (failed)."""
    unchanged_FAIL_TO_PASS: list[str] = field(default_factory=list)
    """FAIL_TO_PASS tests the test patch does not add or change (the task is rejected when any)."""
    runs: list[dict[str, Any]] = field(default_factory=list)
    """Per run: mode, run, seconds (the test command), total_seconds (reset + patches + tests), rc, timed_out,
    report source, outcome counts, error, error_line (why no test ran), reruns (per-file runs)."""
    plugins: list[dict[str, str]] = field(default_factory=list)
    """pytest11 entry points the environment provides ({name, value}): the verifier loads exactly these."""
    twins: dict[str, Any] | None = None
    """The twin checks (the kit's ``twins``): {"plan": files with the FAIL_TO_PASS tests renamed and their
    twins beside them, "expect_failing": twin ids that failed in every gold run}; None when none could be
    made (``twin_note`` says why)."""
    twin_note: str = ""
    runs_per_mode: int = 3
    wall_seconds: float = 0.0
    """Host wall time of the whole validation (container start to parsed result)."""
    test_seconds: float = 0.0
    """Sum of the test commands' own durations: the raw test time the wall time is compared with."""
    setup_seconds: float = 0.0
    accepted: bool = False
    reason: str = ""
    log_tail: str = ""
    """A rejected task's: the last lines of the run that shows why (not kept for accepted tasks)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def max_gold_seconds(self) -> float:
        return max((r.get("seconds") or 0.0 for r in self.runs if r["mode"] == "gold"), default=0.0)


def _norm(outcome: str | None) -> str:
    if outcome in ("passed", "xfail"):
        return PASS
    if outcome == "skipped":
        return SKIP
    return FAIL  # failed, error, or missing from the report


def classify(runs: list[dict], base: str = "base", gold: str = "gold") -> dict[str, Any]:
    """The test lists from repeated runs of the two sides (see the module docstring)."""
    b_runs = [r for r in runs if r["mode"] == base]
    g_runs = [r for r in runs if r["mode"] == gold]
    ids = sorted({t for r in runs for t in r.get("outcomes", {})})
    out: dict[str, Any] = {"FAIL_TO_PASS": [], "PASS_TO_PASS": [], "PASS_TO_FAIL": [], "flaky": [], "skipped": [],
                           "fail_to_fail": [], "network": []}
    for t in ids:
        b = {_norm(r.get("outcomes", {}).get(t)) for r in b_runs}
        g = {_norm(r.get("outcomes", {}).get(t)) for r in g_runs}
        pair = (b.pop(), g.pop()) if len(b) == 1 and len(g) == 1 else None
        if pair in (None, (FAIL, FAIL)) and any(_offline(r, t) for r in runs):
            out["network"].append(t)  # failed for want of a network, not for what the code does
        elif pair is None:
            out["flaky"].append(t)
        elif pair == (FAIL, PASS):
            out["FAIL_TO_PASS"].append(t)
        elif pair == (PASS, PASS):
            out["PASS_TO_PASS"].append(t)
        elif pair == (PASS, FAIL):
            out["PASS_TO_FAIL"].append(t)
        elif SKIP in pair:
            out["skipped"].append(t)
        else:
            out["fail_to_fail"].append(t)
    return out


def _attempted(test_id: str, where: str) -> bool:
    """Does a network attempt the kit's probe filed under ``where`` (a test's node id, or a module's while it
    was collected; empty: before collection) concern ``test_id``? Node ids are relative to pytest's rootdir,
    which may sit below the repository root the test ids start from."""
    if not where:
        return True
    return (test_id == where or test_id.endswith("/" + where) or test_id.startswith(where + "::")
            or f"/{where}::" in test_id)


def _offline(run: dict, test_id: str) -> bool:
    """Did ``test_id`` fail in ``run`` for want of the network? Its failure text names a network error
    (``NETWORK``), or the kit's probe saw it (or its module, while importing) try to reach another host."""
    if _norm(run.get("outcomes", {}).get(test_id)) != FAIL:
        return False
    if NETWORK.search((run.get("messages") or {}).get(test_id) or ""):
        return True
    return any(_attempted(test_id, w) for w in run.get("network_attempts") or ())


def _shown(tests: list[str], n: int = 5) -> str:
    return ", ".join(tests[:n]) + (f" ... ({len(tests)} in all)" if len(tests) > n else "")


def _tail(run: dict, lines: int = 40) -> str:
    return "\n".join((run.get("tail") or "").splitlines()[-lines:])


def judge(instance_id: str, result: dict, runs_per_mode: int) -> Validation:
    """A Validation from the kit's matrix result: lists, timings and the accept/reject decision.

    Reasons, in order: a patch that does not apply; "tests did not run: <first error line>" (no gold run
    reported a test, or no FAIL_TO_PASS test while a test file did not collect with the gold patch); a
    canary reported as anything but failing; gold runs that timed out; "PASS_TO_FAIL"; "flaky" (no
    FAIL_TO_PASS test and the tests that changed outcome are flaky); "no FAIL_TO_PASS test"; "FAIL_TO_PASS
    test(s) the test patch does not add or change" (from the kit's ``unchanged``).
    """
    runs = result["runs"]
    v = Validation(instance_id, runs_per_mode=runs_per_mode, setup_seconds=result.get("setup_seconds", 0.0),
                   plugins=list(result.get("plugins") or []))
    lists = classify(runs)
    for k, val in lists.items():
        setattr(v, k, val)
    for r in runs:
        for f, why in (r.get("not_run") or {}).items():
            v.not_run.setdefault(r["mode"], {}).setdefault(f, why)
    unchanged = set(result.get("unchanged") or ())
    v.unchanged_FAIL_TO_PASS = [t for t in v.FAIL_TO_PASS if t in unchanged]
    base_runs = [r for r in runs if r["mode"] == "base"]
    unreported = [t for t in v.unchanged_FAIL_TO_PASS if all(t not in r.get("outcomes", {}) for r in base_runs)]
    if v.unchanged_FAIL_TO_PASS and unreported == v.unchanged_FAIL_TO_PASS and len(unreported) < len(v.FAIL_TO_PASS):
        # the base did not build (its tests went unreported), yet the test patch changes some of the tests:
        # the task is graded on those; the others must simply still pass
        v.FAIL_TO_PASS = [t for t in v.FAIL_TO_PASS if t not in unreported]
        v.PASS_TO_PASS = sorted(v.PASS_TO_PASS + unreported)
        v.unchanged_FAIL_TO_PASS = []
    v.test_seconds = round(sum(r.get("seconds") or 0.0 for r in runs), 4)
    keys = ("mode", "run", "seconds", "total_seconds", "rc", "timed_out", "source", "error", "canary", "restored",
            "error_line", "reruns", "distrust")
    v.runs = [{k: r.get(k) for k in keys} | {"counts": _counts(r.get("outcomes", {}))} for r in runs]
    errors = [r for r in runs if r.get("error")]
    gold = [r for r in runs if r["mode"] == "gold"]
    gold_timeouts = [r for r in gold if r.get("timed_out")]
    silent = [r for r in gold if not r.get("outcomes") and not r.get("timed_out")]
    uncollected = [r for r in gold if r.get("not_run")]
    untrusted = [r for r in runs if not r.get("error") and not r.get("timed_out") and "canary" in r
                 and r["canary"] not in ("failed", "error")
                 and not (r["canary"] == "missing" and not r.get("outcomes"))]  # a run that ran nothing proves nothing
    disbelieved = [r for r in gold if r.get("distrust") and r.get("outcomes") and not r.get("timed_out")]
    v.twins, v.twin_note = result.get("twins"), result.get("twin_note") or ""
    why_run = None
    if errors:
        v.reason = errors[0]["error"] if errors[0]["mode"] == "gold" else f"at the base commit: {errors[0]['error']}"
    elif gold and len(silent) == len(gold):
        why_run = silent[0]
        v.reason = f"tests did not run: {why_run.get('error_line') or 'no test was reported with the gold patch'}"
    elif untrusted:
        r = why_run = untrusted[0]
        v.reason = (f"the {r['mode']} run {r['run']} reported its canary test, which always fails, as "
                    f"{r.get('canary')}: the project's test run cannot be trusted to report failures")
    elif disbelieved:
        r = why_run = disbelieved[0]
        v.reason = f"the gold run {r['run']} cannot be believed as the verifier reads it: {r['distrust']}"
    elif gold_timeouts:
        why_run = gold_timeouts[0]
        v.reason = f"the tests timed out with the gold patch ({len(gold_timeouts)} of {runs_per_mode} runs)"
        reached = why_run.get("network_attempts") or []
        if reached:  # pydicom's tests fetch their data files at import and retry with growing waits
            v.reason += (f" while trying to reach the network, which the sandbox does not have: "
                         f"{_shown([t or 'a conftest' for t in reached])}")
    elif v.PASS_TO_FAIL:
        why_run = gold[0] if gold else None
        v.reason = f"PASS_TO_FAIL: the gold patch breaks {len(v.PASS_TO_FAIL)} passing test(s): {_shown(v.PASS_TO_FAIL)}"
    elif not v.FAIL_TO_PASS and uncollected:
        why_run = uncollected[0]
        f, why = next(iter(why_run["not_run"].items()))
        v.reason = f"tests did not run: {why if f in why else f'{f}: {why}'}"
    elif not v.FAIL_TO_PASS and v.flaky:
        why_run = gold[0] if gold else None
        v.reason = f"flaky: no stable FAIL_TO_PASS test; the tests that change outcome are flaky: {_shown(v.flaky)}"
    elif not v.FAIL_TO_PASS:
        why_run = gold[0] if gold else None
        v.reason = "no FAIL_TO_PASS test"
    elif v.unchanged_FAIL_TO_PASS:
        v.reason = (f"FAIL_TO_PASS test(s) the test patch does not add or change: "
                    f"{_shown(v.unchanged_FAIL_TO_PASS)}")
    elif result.get("twinnable") and not v.twins:
        v.reason = (f"forgeable: a run forged to report every test passed would be believed ("
                    f"{v.twin_note or 'no twin check'})")
    restored = next((r["restored"] for r in gold if r.get("restored")), None)
    if v.reason and restored:
        v.reason += f" (the gold patch's changes to test infrastructure were restored: {', '.join(restored[:5])})"
    v.accepted = not v.reason
    if why_run is not None:
        v.log_tail = _tail(why_run)
    return v


def _counts(outcomes: dict) -> dict[str, int]:
    out: dict[str, int] = {}
    for o in outcomes.values():
        out[o] = out.get(o, 0) + 1
    return out


# ---------------------------------------------------------------- running the matrix


def _spec(base: str, framework: str, files: list[str], python: str | None, pythonpath: list[str], runs: int,
          timeout_s: float, git_dir: str, work: str, patch_dir: str, options: dict | None = None) -> dict:
    return {"git_dir": git_dir, "work": work, "base": base, "framework": framework, "options": options or {},
            "files": files,
            "python": python, "pythonpath": pythonpath, "timeout_s": timeout_s, "runs": runs,
            "test_patch": f"{patch_dir}/test.patch",
            "modes": [{"name": "base", "submission": None}, {"name": "gold", "submission": f"{patch_dir}/gold.patch"}]}


def _last_json(text: str, what: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    raise BuildError(f"{what}: no result from the validation runner; its output ended with: {text.strip()[-500:]!r}")


def run_matrix_docker(image: str, *, base: str, framework: str, files: list[str], python: str | None,
                      pythonpath: list[str], gold: str, test: str, runs: int = 3, timeout_s: float = 300.0,
                      memory_mb: int = 2048, cpus: float = 2.0, client=None, options: dict | None = None) -> dict:
    """All validation runs in one container of ``image`` (the task image: snapshot at /env/repo.git)."""
    import docker
    import requests


    client = client or engine()
    tmp = Path(tempfile.mkdtemp(prefix="envgen-validate-"))
    try:
        spec = _spec(base, framework, files, python, pythonpath, runs, timeout_s, "/env/repo.git", "/work", SPEC_DIR,
                     options)
        (tmp / "spec.json").write_text(json.dumps(spec))
        (tmp / "gold.patch").write_text(gold, encoding="utf-8", errors="surrogateescape")
        (tmp / "test.patch").write_text(test, encoding="utf-8", errors="surrogateescape")
        os.chmod(tmp, 0o755)
        for p in tmp.iterdir():
            os.chmod(p, 0o644)
        boot = _BOOT.format(kit=KIT_IN_IMAGE, spec=f"{SPEC_DIR}/spec.json")
        work_mb = max(256, memory_mb // 2)
        container = client.containers.run(
            image, ["python3", "-I", "-B", "-c", boot], user=f"{SANDBOX_UID}:{SANDBOX_UID}", detach=True,
            network_mode="none", read_only=True, working_dir="/work", pids_limit=1024,
            mem_limit=f"{memory_mb}m", memswap_limit=f"{memory_mb}m", nano_cpus=int(cpus * 1e9),
            tmpfs={"/work": f"rw,exec,nosuid,nodev,size={work_mb}m,uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0755",
                   "/tmp": f"rw,exec,nosuid,nodev,size={max(128, memory_mb // 4)}m,mode=1777"},
            mounts=[docker.types.Mount(target=SPEC_DIR, source=str(tmp), type="bind", read_only=True)],
            environment={"TZ": "UTC", "PYTHONHASHSEED": "0", "HOME": "/tmp", "LANG": "C.UTF-8"},
            labels={LABEL: "1", "envgen.validate": "1", **OWNER_LABELS}, log_config=docker.types.LogConfig(type="json-file"))
        try:
            limit = runs * 2 * (timeout_s + 60) + 120
            try:
                status = container.wait(timeout=limit)
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as e:
                try:  # the SDK reports a wait past its timeout and an engine gone away alike
                    client.ping()
                except Exception:
                    raise SandboxError(f"validation in {image}: the Docker engine stopped answering "
                                       f"({type(e).__name__}: {e})") from None
                raise BuildError(f"validation in {image} ran past {limit:g} s and was stopped") from None
            out = container.logs(stdout=True, stderr=False).decode("utf-8", errors="replace")
            if status.get("StatusCode") != 0:
                err = container.logs(stdout=False, stderr=True).decode("utf-8", errors="replace")
                raise BuildError(f"validation runner exited with {status.get('StatusCode')} in {image}: "
                                  f"{err.strip()[-800:]}")
        finally:
            try:
                container.remove(force=True)
            except docker.errors.APIError:
                pass
        return _last_json(out, f"validation in {image}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_matrix_local(git_dir: Path, *, base: str, framework: str, files: list[str], python: str | None,
                     pythonpath: list[str], gold: str, test: str, runs: int = 3, timeout_s: float = 300.0,
                     options: dict | None = None) -> dict:
    """The same runs in a local subprocess (this machine's Python and pytest): for hosts without Docker."""
    tmp = Path(tempfile.mkdtemp(prefix="envgen-validate-"))
    try:
        (tmp / "gold.patch").write_text(gold, encoding="utf-8", errors="surrogateescape")
        (tmp / "test.patch").write_text(test, encoding="utf-8", errors="surrogateescape")
        spec = _spec(base, framework, files, python, pythonpath, runs, timeout_s, str(git_dir), str(tmp / "work"),
                     str(tmp), options)
        (tmp / "spec.json").write_text(json.dumps(spec))
        boot = _BOOT.format(kit=str(bundled("verifiers")), spec=str(tmp / "spec.json"))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TZ": "UTC", "PYTHONHASHSEED": "0",
               "HOME": str(tmp), "TMPDIR": os.environ.get("TMPDIR", tempfile.gettempdir()), "LANG": "C.UTF-8"}
        out = subprocess.run([sys.executable, "-I", "-B", "-c", boot], capture_output=True, env=env, cwd=tmp,
                             timeout=runs * 2 * (timeout_s + 60) + 120)
        if out.returncode != 0:
            raise BuildError(f"local validation runner exited with {out.returncode}: "
                              f"{out.stderr.decode(errors='replace').strip()[-800:]}")
        return _last_json(out.stdout.decode("utf-8", errors="replace"), "local validation")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def validate_instance(instance_id: str, *, backend: str, image: str | None = None, git_dir: Path | None = None,
             base: str, framework: str, files: list[str], python: str | None, pythonpath: list[str], gold: str,
             test: str, runs: int = 3, timeout_s: float = 300.0, memory_mb: int = 2048, client=None,
             options: dict | None = None) -> Validation:
    """Run the matrix (``docker``: in ``image``; ``local``: from ``git_dir``) and judge it."""
    if runs < 1:
        raise InputError(f"validation runs must be at least 1, got {runs}")
    if not files:
        v = Validation(instance_id, runs_per_mode=runs)
        v.reason = "the test patch touches no runnable test file"
        return v
    t0 = time.perf_counter()
    common = dict(base=base, framework=framework, files=files, python=python, pythonpath=pythonpath, gold=gold,
                  test=test, runs=runs, timeout_s=timeout_s, options=options)
    if backend == "docker":
        if image is None:
            raise InputError("docker validation needs the task image")
        result = run_matrix_docker(image, memory_mb=memory_mb, client=client, **common)
    elif backend == "local":
        if git_dir is None:
            raise InputError("local validation needs the snapshot's git dir")
        result = run_matrix_local(git_dir, **common)
    else:
        raise InputError(f"unknown validation backend {backend!r}; use docker or local")
    v = judge(instance_id, result, runs)
    v.wall_seconds = round(time.perf_counter() - t0, 4)
    return v
