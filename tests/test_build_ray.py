"""Builds on a real Ray cluster (a head and a second worker node on this machine), in Docker, with a real
registry (Debian's docker-registry, started here on a free loopback port) and the state on a real
PostgreSQL server (``postgres_url``, tests/postgres.py).

- a code build whose candidates are Ray tasks makes the same packs as a local build (content hash, the
  measured timings left out) and the same report;
- a worker killed in the middle of a candidate loses nothing and repeats nothing: its candidate is run
  again (its stage's second attempt), every other one once, every stage and candidate once in the store;
  a driver that lost its output folder gets the packs back from the store without running anything;
- pushed images are recorded by digest in the pack; after ``docker rmi`` the sandbox pulls that digest
  instead of rebuilding, and builds when the registry lacks it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from envgen.families.code import build_code
from envgen.pack import load
from envgen.pack.format import content_hash
from envgen.store import Store

try:
    from .code_repo import make_calc_repo
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import make_calc_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]
REGISTRY_BIN = Path("/usr/bin/docker-registry")
IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def _missing(reason: str):
    """Skip with the reason, except under CI=true, where a missing component fails the test."""
    (pytest.fail if IN_CI else pytest.skip)(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _quiet(msg: str) -> None:
    pass


@pytest.fixture(scope="module", autouse=True)
def _gc_killed_workers_containers():
    """After the module: remove the containers of the worker the kill test ended (their owner is dead)."""
    yield
    from envgen.sandbox.docker import gc

    gc()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """Debian's docker-registry on a free 127.0.0.1 port (Docker talks plain HTTP to 127.0.0.0/8)."""
    if not REGISTRY_BIN.is_file():
        _missing("docker-registry is not installed; run .ci/setup-ray.sh")
    root = tmp_path_factory.mktemp("registry")
    port = _free_port()
    (root / "config.yml").write_text(
        f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen([str(REGISTRY_BIN), "serve", str(root / "config.yml")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"docker-registry did not start on 127.0.0.1:{port}")
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-code")
    shas = make_calc_repo(root / "calc")
    return root, shas


@pytest.fixture(scope="module")
def local_build(repo):
    root, _ = repo
    report = build_code(f"git:{root / 'calc'}", root / "local", backend="docker", store=root / "local.sqlite",
                        runs=2, log=_quiet)
    return report


def scrub(value):
    """``value`` with every measured timing (a key ending in ``seconds``) zeroed and log tails (which name
    the validation's random canary test) left out."""
    if isinstance(value, dict):
        return {k: 0 if k.endswith("seconds") else scrub(v) for k, v in value.items() if k != "tail"}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def identity(path: Path) -> str:
    """The pack's content hash with the measured timings of its tasks zeroed: everything a build decides,
    nothing the clock does."""
    pack = load(path)
    copy = path.parent / f".identity-{path.name}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    try:
        lines = [json.dumps(scrub(json.loads(line))) for line in (copy / "tasks.jsonl").read_text().splitlines()]
        (copy / "tasks.jsonl").write_text("\n".join(lines) + "\n")
        return content_hash(copy, pack.manifest)
    finally:
        shutil.rmtree(copy)


def _ray_build(root: Path, out: str, store, **kw):
    return build_code(f"git:{root / 'calc'}", root / out, backend="docker", store=store, runs=2, log=_quiet,
                      executor="ray", **kw)


def _stage_rows(store) -> list:
    s = Store(store)
    (run,) = [r for r in _runs(s)]
    return s.stages(run)


def _runs(s: Store) -> list[str]:
    from sqlalchemy import select

    from envgen.store import Run

    with s.session() as sess:
        return list(sess.scalars(select(Run.id).where(Run.kind == "build-code")))


def test_ray_build_makes_the_local_build_s_packs_and_records_pushed_digests(ray_cluster, registry, repo,
                                                                            local_build):
    root, shas = repo
    report = _ray_build(root, "ray", root / "ray.sqlite", registry=registry)
    assert sorted(report.packs) == sorted(local_build.packs) == [f"calc-{shas['fix'][:12]}",
                                                                 f"calc-{shas['power'][:12]}"]
    for name in report.packs:
        assert identity(root / "ray" / name) == identity(root / "local" / name), name
    assert scrub(report.rejections) == scrub(local_build.rejections)
    assert report.rejected_by_reason == local_build.rejected_by_reason
    assert report.details["tasks"].keys() == local_build.details["tasks"].keys()
    assert report.proposed == local_build.proposed == 5 and report.kept == 2
    build_json = json.loads((root / "ray" / "build.json").read_text())
    assert build_json["kept"] == 2 and sorted(build_json["packs"]) == sorted(report.packs)

    stages = _stage_rows(root / "ray.sqlite")
    assert len(stages) == 5 and {s.status for s in stages} == {"done"} and {s.attempts for s in stages} == {1}
    for name in report.packs:  # pushed, and the registry holds what the pack records
        image = load(root / "ray" / name).manifest.image
        assert image.repo_digest.startswith(f"{registry}/envgen/pack@sha256:"), image
        repo_name, digest = image.repo_digest.split("/", 1)[1].split("@")
        req = urllib.request.Request(f"http://{registry}/v2/{repo_name}/manifests/{digest}", method="HEAD",
                                     headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200 and r.headers["Docker-Content-Digest"] == digest
    assert load(root / "local" / report.packs[0]).manifest.image.repo_digest is None  # no registry, no digest


def _titled_workers() -> list[int]:
    """Pids of the Ray worker processes running a code candidate now (Ray titles a busy worker
    ``ray::FUNCTION``)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            title = cmdline.read_bytes().split(b"\0", 1)[0]
        except OSError:  # the process is gone
            continue
        if title.startswith(b"ray::remote_candidate"):
            pids.append(int(cmdline.parent.name))
    return pids


def test_a_worker_killed_mid_candidate_loses_and_repeats_nothing(ray_cluster, repo, local_build, postgres_url):
    root, shas = repo
    store = postgres_url  # the state every worker shares, on a real PostgreSQL server
    box: dict = {}

    def run():
        try:
            box["report"] = _ray_build(root, "kill", store, lease_s=3.0)  # a dead worker's lease ends soon
        except BaseException as e:  # handed to the test's thread below
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    killed = None
    deadline = time.monotonic() + 120
    while t.is_alive() and killed is None and time.monotonic() < deadline:
        # a candidate that has been running for a second is one that builds and validates (the filtered ones
        # take milliseconds): kill the Ray worker process running it
        busy = [s for s in (_stage_rows(store) if _runs(Store(store)) else []) if s.status == "running"]
        if busy:
            time.sleep(1.0)
            workers = _titled_workers()
            if workers and any(s.status == "running" for s in _stage_rows(store)):
                killed = workers[0]
                os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    t.join(300)
    assert killed is not None, "no candidate was seen running"
    assert "error" not in box, box.get("error")
    report = box["report"]

    assert sorted(report.packs) == sorted(local_build.packs)
    for name in report.packs:
        assert identity(root / "kill" / name) == identity(root / "local" / name), name
    assert scrub(report.rejections) == scrub(local_build.rejections)
    stages = _stage_rows(store)
    assert len(stages) == len({s.key for s in stages}) == 5 and {s.status for s in stages} == {"done"}
    attempts = Counter(s.attempts for s in stages)
    assert attempts == {1: 4, 2: 1}, attempts  # the killed candidate ran again, nothing else did
    s = Store(store)
    (run,) = _runs(s)
    claims = s.claims(run)  # the retry took the dead worker's lease over once its lease ran out
    assert len(claims) == 5 and {c.status for c in claims} == {"done"}
    assert Counter(c.attempts for c in claims) == {1: 4, 2: 1}
    assert s.candidates(run) == []  # the code family keeps its results in the stages
    assert len(s.errors(run)) == 0

    # the driver lost its output folder (killed, a new machine): the packs come back from the store
    for name in report.packs:
        shutil.rmtree(root / "kill" / name)
    again = _ray_build(root, "kill", store)
    assert again.details["resumed"] == 5 and sorted(again.packs) == sorted(report.packs)
    for name in again.packs:
        assert identity(root / "kill" / name) == identity(root / "local" / name)
    assert Counter(s.attempts for s in _stage_rows(store)) == {1: 4, 2: 1}  # nothing ran again


def test_an_image_removed_locally_is_pulled_by_its_digest_not_rebuilt(ray_cluster, registry, repo, capfd):
    import docker

    from envgen.episodes.gym import PackEnv
    from envgen.policies.builtin import OraclePolicy, rollout
    from envgen.sandbox import docker as docker_backend

    root, shas = repo
    name = f"calc-{shas['fix'][:12]}"
    path = root / "ray" / name
    if not path.is_dir():
        pytest.skip("needs the registry build of test_ray_build_makes_the_local_build_s_packs...")
    image = load(path).manifest.image
    client = docker.from_env()

    def forget():
        for ref in (image.tag, f"{registry}/{image.tag}"):
            try:
                client.images.remove(ref, force=True)
            except docker.errors.ImageNotFound:
                pass
        docker_backend._image_ids.clear()
        docker_backend._pack_tags.clear()

    forget()
    capfd.readouterr()
    env = PackEnv(path, sandbox="docker")
    try:
        assert rollout(env, OraclePolicy()).reward == 1.0
    finally:
        env.close()
    log = capfd.readouterr().err
    assert f"pulled {image.repo_digest} as {image.tag}" in log and "building" not in log, log
    assert image.repo_digest in client.images.get(image.tag).attrs["RepoDigests"]

    # a digest the registry does not have: the sandbox builds the image instead
    manifest = json.loads((path / "pack.json").read_text())
    missing = image.repo_digest.split("@")[0] + "@sha256:" + "0" * 64
    copy = root / "missing-digest"
    shutil.copytree(path, copy)
    manifest["image"]["repo_digest"] = missing
    (copy / "pack.json").write_text(json.dumps(manifest, indent=2) + "\n")
    forget()
    env = PackEnv(copy, sandbox="docker")
    try:
        assert rollout(env, OraclePolicy()).reward == 1.0
    finally:
        env.close()
    log = capfd.readouterr().err
    assert f"not pulled {missing}" in log and f"building {image.tag}" in log, log


def test_an_offline_category_built_on_ray_from_the_cli_is_the_local_pack_and_resumes_from_the_store(
        ray_cluster, tmp_path):
    from typer.testing import CliRunner

    from envgen.build.offline import build
    from envgen.cli import app

    local = build("general", "customer_service", tmp_path / "local", tasks=6, workers=2)
    store = tmp_path / "state.sqlite"
    args = ["build", "general", "-c", "customer_service", "-n", "6", "-o", str(tmp_path / "ray"), "--executor", "ray",
            "--store", str(store), "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output[res.output.index("{"):])
    assert (summary["proposed"], summary["kept"]) == (local.proposed, local.kept) == (6, 6)
    assert summary["rejected_by_reason"] == local.rejected_by_reason
    assert load(tmp_path / "ray").manifest.version == load(tmp_path / "local").manifest.version

    s = Store(store)
    from sqlalchemy import select

    from envgen.store import Run

    with s.session() as sess:
        (run,) = sess.scalars(select(Run.id).where(Run.kind == "build-offline"))
    assert [(st.status, st.attempts) for st in s.stages(run)] == [("done", 1)] * 6
    shutil.rmtree(tmp_path / "ray")
    again = CliRunner().invoke(app, args)  # a rerun gates nothing: every task's outcome is in the store
    assert again.exit_code == 0, again.output
    assert [(st.status, st.attempts) for st in s.stages(run)] == [("done", 1)] * 6
    assert load(tmp_path / "ray").manifest.version == load(tmp_path / "local").manifest.version
