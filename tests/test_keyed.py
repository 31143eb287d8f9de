"""Results keyed by what they depend on, through the real CLI: modified packs, concurrent checks, one cache dir."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from envgen.pack import format as packmod
from envgen.passcheck.rules import AtLeastOnce, rollout_seed

from conftest import make_tiny_pack
from stub_policy import solves, stub_server

PROBS = [0.0, 0.1, 0.5, 1.0]


def envgen(*args: str, env: dict | None = None, wait: bool = True):
    full = {**os.environ, "COLUMNS": "200", **(env or {})}
    full = {k: v for k, v in full.items() if v is not None}
    proc = subprocess.Popen([sys.executable, "-m", "envgen", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=full)
    return proc.communicate(timeout=600) + (proc.returncode,) if wait else proc


def rows(store):
    con = sqlite3.connect(store)
    try:
        return con.execute("SELECT pack_version, policy, sandbox, task_id, idx, error, passed "
                           "FROM check_rollouts").fetchall()
    finally:
        con.close()


def test_check_refuses_a_pack_edited_after_a_check_and_reruns_it_with_allow_modified(tmp_path):
    pack = make_tiny_pack(tmp_path / "tiny")
    store = str(tmp_path / "s.sqlite")
    args = ("check", str(pack.root), "--policy", "null", "--k", "3", "--workers", "2", "--store", store, "--json")
    out, err, rc = envgen(*args)
    first = json.loads(out)
    assert rc == 0 and first["rollouts_this_run"] == 9 and first["resumed_rollouts"] == 0
    again = json.loads(envgen(*args)[0])
    assert again["rollouts_this_run"] == 0 and again["resumed_rollouts"] == 9, "an unchanged pack resumes"

    tasks = pack.root / "tasks.jsonl"
    tasks.write_text(tasks.read_text().replace('"expected":"value-0"', '"expected":"value-9"'))
    out, err, rc = envgen(*args)
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("error: ") and "modified since it was saved" in lines[0] and "--allow-modified" in lines[0]
    assert "Traceback" not in err

    out, err, rc = envgen(*args, "--allow-modified")
    rerun = json.loads(out)
    assert rc == 0 and "re-hashed" in err
    assert rerun["version"] != first["version"] == pack.manifest.version
    assert rerun["resumed_rollouts"] == 0 and rerun["rollouts_this_run"] == 9, "fresh rollouts, none resumed"
    assert packmod.load(pack.root).tasks[0].verifier.args["params"]["expected"] == "value-9"
    by_version = {}
    for version, *_ in rows(store):
        by_version[version] = by_version.get(version, 0) + 1
    assert by_version == {first["version"]: 9, rerun["version"]: 9}


def test_bytecode_written_into_env_is_not_a_modification(tmp_path):
    pack = make_tiny_pack(tmp_path / "tiny")
    (pack.root / "env" / "__pycache__").mkdir()
    (pack.root / "env" / "__pycache__" / "tools.cpython-312.pyc").write_bytes(b"\x00")
    out, err, rc = envgen("run", str(pack.root), "--task", "tiny-0", "--policy", "oracle", "--json")
    assert rc == 0 and json.loads(out)["reward"] == 1.0, err


def test_two_concurrent_checks_on_one_store_agree_with_one_run_and_record_each_rollout_once(tmp_path):
    pack = make_tiny_pack(tmp_path / "pack8", tasks=8)
    srv = stub_server(pack, PROBS)
    try:
        policy = f"openai:stub?base_url=http://127.0.0.1:{srv.server_port}/v1&temperature=1.0"
        k = 12
        expected = {}
        for i, t in enumerate(pack.tasks):
            passes = sum(solves(rollout_seed(t.id, j), PROBS[i % len(PROBS)]) for j in range(k))
            expected[t.id] = AtLeastOnce(k).decide(passes, k)
        assert set(expected.values()) == {True, False}

        def args(store):
            return ("check", str(pack.root), "--policy", policy, "--k", str(k), "--workers", "3", "--store", store,
                    "--json")

        single = json.loads(envgen(*args(str(tmp_path / "one.sqlite")))[0])
        shared = str(tmp_path / "shared.sqlite")
        procs = [envgen(*args(shared), wait=False) for _ in range(2)]
        results = [p.communicate(timeout=600) + (p.returncode,) for p in procs]
    finally:
        srv.shutdown()
    decisions = {t: s["kept"] for t, s in single["tasks_stats"].items()}
    assert decisions == expected
    for out, err, rc in results:
        assert rc == 0 and "Traceback" not in err, err
        assert {t: s["kept"] for t, s in json.loads(out)["tasks_stats"].items()} == expected
    recorded = [(t, i, passed) for _, _, sandbox, t, i, error, passed in rows(shared) if error is None]
    assert len({(t, i) for t, i, _ in recorded}) == len(recorded), "no rollout recorded twice"
    for tid, kept in expected.items():
        mine = [(i, passed) for t, i, passed in recorded if t == tid]
        if kept:
            assert any(passed for _, passed in mine)
        else:
            assert sorted(i for i, _ in mine) == list(range(k)) and not any(passed for _, passed in mine)


def test_envgen_cache_moves_the_store_work_dirs_and_caches(tmp_path, monkeypatch):
    from envgen import paths, store
    from envgen.pack import hub
    from envgen.sandbox import images
    from envgen.families.code import sources

    cache = tmp_path / "elsewhere"
    monkeypatch.setenv("ENVGEN_CACHE", str(cache))
    monkeypatch.delenv("ENVGEN_STORE", raising=False)
    assert paths.cache_dir() == cache.resolve()
    assert store.store_url() == f"sqlite:///{cache.resolve() / 'state.sqlite'}"
    for where in (images.cache_dir(), hub._packs_dir(), sources._default_cache()):
        assert cache.resolve() in where.parents or where == cache.resolve()

    pack = make_tiny_pack(tmp_path / "tiny")
    env = {"ENVGEN_CACHE": str(cache), "ENVGEN_STORE": None}
    out, err, rc = envgen("check", str(pack.root), "--policy", "oracle", "--k", "1", "--json", env=env)
    assert rc == 0, err
    assert (cache / "state.sqlite").is_file() and len(rows(str(cache / "state.sqlite"))) == 3


@pytest.mark.docker
def test_docker_rollouts_are_keyed_by_the_engines_image_id(docker_tiny_pack, tmp_path):
    """A Docker check records the image it ran in (recipe tag @ engine image id) and resumes only on that image."""
    from envgen.sandbox.engine import engine

    store = str(tmp_path / "s.sqlite")
    args = ("check", str(docker_tiny_pack.root), "--policy", "null", "--k", "2", "--sandbox", "docker",
            "--store", store, "--json")
    out, err, rc = envgen(*args)
    assert rc == 0, err
    con = sqlite3.connect(store)
    images = {r[0] for r in con.execute("SELECT image FROM check_rollouts")}
    con.close()
    tag = docker_tiny_pack.manifest.image.tag
    assert images == {f"{tag}@{engine().images.get(tag).id}"}
    again = json.loads(envgen(*args)[0])
    assert again["rollouts_this_run"] == 0 and again["resumed_rollouts"] == json.loads(out)["rollouts_this_run"]
