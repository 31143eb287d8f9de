"""A killed or interrupted build DRIVER on a real Ray cluster (a head and a second node on this machine) that
outlives it, with the state on a real PostgreSQL server (``postgres_url``, tests/postgres.py).

- ``envgen build code ... --executor ray --ray-address ADDR --store URL`` run as a process and SIGKILLed once a
  unit finished and another is in flight: Ray kills the dead job's workers, and the same command run again
  makes the uninterrupted build's packs, resumes every finished unit (one claim, one stage attempt each),
  takes the killed units over at once (their claims' second attempt, owned by the rerun's job) instead of
  waiting out their 60 s leases, and loses or duplicates nothing;
- Ctrl-C (SIGINT) of the driver: one clear line, the in-flight units' leases released in the store, and a
  rerun that resumes at once;
- an offline category's gate unit left running by a dead driver (under an hour's lease) is gated again at once;
- a lease is taken over early only when its owner is provably gone: the owner's Ray job is dead in this
  cluster's job table; a live job's unit (a Ray task holding its lease) is never taken over, nor one of
  another cluster or one not on Ray.

The builds use the local sandbox (the candidates' tests run with this machine's Python) to stay quick; the
Docker path is tests/test_build_ray.py's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from envgen.pack import load
from envgen.store import Run, Store

try:
    from .code_repo import make_calc_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import make_calc_repo

pytestmark = [pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("driver-code")
    shas = make_calc_repo(root / "calc", flaky=False)
    return root, shas


def _cli(root: Path, out: str, store: str, address: str) -> list[str]:
    return [sys.executable, "-m", "envgen.cli", "build", "code", "--from", f"git:{root / 'calc'}", "--executor", "ray",
            "--ray-address", address, "--store", store, "--out", str(root / out), "--sandbox", "local",
            "--runs", "1", "--json"]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _run(cmd: list[str], timeout: float = 120) -> tuple[dict, float]:
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout[res.stdout.index("{"):]), took


def _run_id(store: str) -> str:
    from sqlalchemy import select

    with Store(store).session() as s:
        (run,) = s.scalars(select(Run.id).where(Run.kind == "build-code"))
    return run


def _stages(store: str) -> list:
    s = Store(store)
    from sqlalchemy import select

    with s.session() as sess:
        runs = list(sess.scalars(select(Run.id).where(Run.kind == "build-code")))
    return s.stages(runs[0]) if runs else []


def _start_and_stop(cmd: list[str], store: str, sig: int) -> tuple[subprocess.Popen, set, set]:
    """Start the build, send ``sig`` once a unit is done and another is running; (process, keys done then,
    keys running then)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT)
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, f"the build ended before it could be stopped: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "no moment with a unit done and another in flight"
        stages = _stages(store)
        done = {s.key for s in stages if s.status == "done"}
        running = {s.key for s in stages if s.status == "running"}
        if done and running:
            proc.send_signal(sig)
            return proc, done, running
        time.sleep(0.05)


@pytest.fixture(scope="module")
def reference(ray_cluster, repo):
    """An uninterrupted Ray build of the same repository (its own folder and store)."""
    root, _ = repo
    summary, took = _run(_cli(root, "whole", str(root / "whole.sqlite"), ray_cluster.address))
    assert summary["kept"] == 2
    return summary


def decided(path: Path) -> dict:
    """What a build decides about a pack: every file but the manifest's version and date, and its tasks
    without the validation's per-run records (timings, and the counts of calc's ``test_flaky``, which the
    local sandbox's shared counter makes depend on what ran before)."""
    files = {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*"))
             if p.is_file() and p.name not in ("pack.json", "README.md", "tasks.jsonl")}
    tasks = [json.loads(line) for line in (path / "tasks.jsonl").read_text().splitlines()]
    for t in tasks:
        validation = t["meta"]["validation"]
        validation["runs"] = len(validation["runs"])
        for k in [k for k in validation if k.endswith("seconds")]:
            del validation[k]
    manifest = load(path).manifest.model_dump(mode="json", exclude={"version", "image", "provenance", "stats"})
    return {"files": files, "tasks": tasks, "manifest": manifest}


def _same_packs(root: Path, out: str, reference: dict, summary: dict) -> None:
    assert sorted(summary["packs"]) == sorted(reference["packs"]) and len(summary["packs"]) == 2, json.dumps(summary["rejections"])[:3000]
    for name in summary["packs"]:
        assert decided(root / out / name) == decided(root / "whole" / name), name
    assert summary["rejected_by_reason"] == reference["rejected_by_reason"]
    assert summary["proposed"] == reference["proposed"] == 5


def test_a_killed_driver_s_rerun_takes_its_units_over_at_once_and_repeats_nothing(ray_cluster, repo, reference,
                                                                                   postgres_url):
    root, _ = repo
    cmd = _cli(root, "killed", postgres_url, ray_cluster.address)
    proc, done, running = _start_and_stop(cmd, postgres_url, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    run = _run_id(postgres_url)
    s = Store(postgres_url)
    held = {c.key: c.owner for c in s.claims(run) if c.status == "claimed"}
    assert set(held) >= running  # the killed units' leases outlive the driver (60 s by default)
    (dead_job,) = {o.split(":")[2] for o in held.values()}

    summary, took = _run(cmd)
    _same_packs(root, "killed", reference, summary)
    assert took < 45, f"the rerun took {took:.0f}s: it waited out the dead driver's leases"
    print(f"killed-driver rerun: {took:.1f}s")
    stages = s.stages(run)
    assert len(stages) == len({st.key for st in stages}) == 5 and {st.status for st in stages} == {"done"}
    claims = {c.key: c for c in s.claims(run)}
    assert len(claims) == 5 and {c.status for c in claims.values()} == {"done"}, (
        [(c.key, c.status, c.owner, c.attempts) for c in claims.values()], done, held, running)
    for st in stages:
        if st.key in done:  # finished before the kill: resumed, not run again
            assert (st.attempts, claims[st.key].attempts) == (1, 1), st.key
        if st.key in held:  # in flight at the kill: taken over once by the rerun's job
            assert claims[st.key].attempts == 2 and claims[st.key].owner.split(":")[2] != dead_job, st.key
            assert st.attempts == 2, st.key
    assert Counter(st.attempts for st in stages) == {1: 5 - len(held), 2: len(held)}
    assert s.errors(run) == []


def test_ctrl_c_of_a_driver_releases_its_leases_and_the_rerun_resumes_at_once(ray_cluster, repo, reference,
                                                                              postgres_url):
    root, _ = repo
    cmd = _cli(root, "interrupted", postgres_url, ray_cluster.address)
    proc, done, running = _start_and_stop(cmd, postgres_url, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted: stopped the" in err and "lease(s); rerun the same command to resume" in err, err[-2000:]
    run = _run_id(postgres_url)
    s = Store(postgres_url)
    assert [c.key for c in s.claims(run) if c.status == "claimed"] == []  # every lease given back

    summary, took = _run(cmd)
    _same_packs(root, "interrupted", reference, summary)
    assert took < 45, f"the rerun took {took:.0f}s"
    stages = s.stages(run)
    assert len(stages) == 5 and {st.status for st in stages} == {"done"}
    for st in stages:
        if st.key in done:
            assert st.attempts == 1, st.key
    claims = s.claims(run)
    assert {c.status for c in claims} == {"done"}
    assert all(c.attempts == 1 for c in claims)  # released, not taken over: each claim is a fresh first one


def _finished_job_owner(address: str) -> str:
    """The lease owner name a unit of a driver that has now exited would have had."""
    code = ("import ray; from envgen.build.distributed import unit_owner; "
            f"ray.init(address={address!r}, log_to_driver=False); print(unit_owner(ray))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env())
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.strip().splitlines()[-1]


def test_only_a_dead_job_s_lease_is_taken_over_early_never_a_live_one(ray_cluster, tmp_path):
    import ray

    from envgen.build.distributed import DRIVER_GRACE_S, abandoned, unit_owner

    store = Store(tmp_path / "state.sqlite")
    live = unit_owner(ray)  # this process's job: alive
    gone = _finished_job_owner(ray_cluster.address)
    assert live.split(":")[1] == gone.split(":")[1] and live.split(":")[2] != gone.split(":")[2]
    assert not abandoned(ray, live)
    assert not abandoned(ray, "host:123:abcd")  # not a Ray owner: its lease is waited out
    other_cluster = gone.replace(gone.split(":")[1], "session_2000-01-01_00-00-00_000000_1")
    assert not abandoned(ray, other_cluster)  # job ids restart on another cluster: not this one's job
    unknown = gone.replace(":" + gone.split(":")[2] + ":", ":7f000000:")
    assert not abandoned(ray, unknown)
    deadline = time.monotonic() + DRIVER_GRACE_S + 10
    while not abandoned(ray, gone):
        assert time.monotonic() < deadline, "a finished job's owner is never abandoned"
        time.sleep(0.2)

    def gone_check(holder: str) -> bool:
        return abandoned(ray, holder)

    # a dead job's lease (held for an hour) goes at once; a live job's never does
    assert store.claim("r", "dead", gone, lease_s=3600) and store.claim("r", "live", live, lease_s=3600)
    with store.lease("r", "dead", owner="taker", lease_s=3600, abandoned=gone_check) as lease:
        assert lease is not None
    assert [(c.key, c.owner, c.attempts, c.status) for c in store.claims("r")] == [
        ("dead", "taker", 2, "done"), ("live", live, 1, "claimed")]
    with store.lease("r", "live", owner="taker", lease_s=3600, abandoned=gone_check) as lease:
        assert lease is None
    assert store.holder("r", "live") == live


def test_a_live_unit_on_ray_is_waited_for_not_taken_over(ray_cluster, tmp_path):
    import ray

    def _hold(store_url: str, key: str, seconds: float) -> str:
        """A unit that holds its lease ``seconds``: run_unit on a Ray worker (its owner names the live job).
        Defined here so that it is pickled by value (the workers cannot import this test module)."""
        from envgen.build.distributed import run_unit

        store = Store(store_url)

        def body(lease):
            time.sleep(seconds)
            result = {"owner": lease.owner}
            store.finish_stage("r", key, result)
            return result

        return run_unit(store, "r", key, body, lease_s=3600)["owner"]

    store = Store(tmp_path / "live.sqlite")
    url = str(store.url)
    store.open_run("r", "test", {})
    hold = ray.remote(num_cpus=1)(_hold)
    first = hold.remote(url, "k", 6.0)
    deadline = time.monotonic() + 30
    while store.holder("r", "k") is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = hold.remote(url, "k", 0.0)  # the same unit again, while the first holds it (an hour's lease)
    owners = ray.get([first, second], timeout=60)
    assert owners[0] == owners[1]  # the second got the first's result: it did not run the unit
    (claim,) = store.claims("r")
    assert (claim.owner, claim.attempts, claim.status) == (owners[0], 1, "done")


def test_an_offline_gate_unit_of_a_dead_driver_is_taken_over_at_once(ray_cluster, tmp_path):
    """An offline category's gate units go through the same lease: a unit left 'running' under an hour's
    lease by a driver whose job is dead (the state a SIGKILLed driver leaves) is gated again at once."""
    from sqlalchemy import select, update

    from envgen.build.offline import build
    from envgen.store import Claim, Stage

    store = tmp_path / "state.sqlite"
    first = build("general", "customer_service", tmp_path / "pack", tasks=4, workers=2, executor="ray", store=store)
    s = Store(store)
    with s.session() as sess:
        (run,) = sess.scalars(select(Run.id).where(Run.kind == "build-offline"))
    key = s.stages(run)[0].key
    gone = _finished_job_owner(ray_cluster.address)
    with s.session() as sess:  # what the killed driver left: the unit running under its worker's lease
        sess.execute(update(Stage).where(Stage.run_id == run, Stage.key == key).values(status="running"))
        sess.execute(update(Claim).where(Claim.run_id == run, Claim.key == key).values(
            status="claimed", owner=gone, expires_at=time.time() + 3600))
        sess.commit()
    version = load(tmp_path / "pack").manifest.version
    shutil.rmtree(tmp_path / "pack")
    t0 = time.monotonic()
    again = build("general", "customer_service", tmp_path / "pack", tasks=4, workers=2, executor="ray", store=store)
    took = time.monotonic() - t0
    assert took < 30, f"the rerun took {took:.0f}s: it waited out the dead driver's lease"
    assert (again.proposed, again.kept) == (first.proposed, first.kept) == (4, 4)
    assert load(tmp_path / "pack").manifest.version == version
    claims = {c.key: c for c in s.claims(run)}
    assert {c.status for c in claims.values()} == {"done"}
    assert claims[key].attempts == 2 and claims[key].owner != gone
    assert sorted((c.attempts for k, c in claims.items() if k != key)) == [1, 1, 1]  # the others: not redone
    assert [st.attempts for st in s.stages(run) if st.key != key] == [1, 1, 1]

