"""The seam between Ray and the state store (envgen.build.distributed), on a real SQLite store, without Ray:
units run under leases (once, however many workers ask; a dead holder's unit taken over when its lease
runs out; an unfinished one released for a rerun), and packs carried through the store byte for byte."""

from __future__ import annotations

import threading
import time

import pytest

from envgen.build.distributed import Lost, Unfinished, pack_bytes, publish, run_unit, unpack
from envgen.pack import load
from envgen.sandbox.registry import registry_of, remote_name
from envgen.errors import InputError
from envgen.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "state.sqlite")
    s.open_run("r", "test", {})
    return s


def _body(store, key, calls, result, delay=0.0):
    def body(lease):
        calls.append(lease.owner)
        time.sleep(delay)
        store.start_stage("r", key)
        publish(lease)
        store.finish_stage("r", key, result)
        return result
    return body


def test_a_unit_asked_for_by_several_workers_at_once_runs_once_and_all_get_its_result(store):
    calls: list[str] = []
    got: list[dict] = []
    body = _body(store, "u", calls, {"n": 1}, delay=0.3)
    threads = [threading.Thread(target=lambda: got.append(run_unit(Store(store.url), "r", "u", body, lease_s=5)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(calls) == 1 and got == [{"n": 1}] * 4
    assert [(c.status, c.attempts) for c in store.claims("r")] == [("done", 1)]


def test_a_dead_workers_unit_is_taken_over_when_its_lease_runs_out_and_a_done_one_is_not_rerun(store):
    assert store.claim("r", "u", owner="dead-worker", lease_s=0.5)  # then it dies: no heartbeat, no release
    store.start_stage("r", "u")
    calls: list[str] = []
    t0 = time.monotonic()
    assert run_unit(store, "r", "u", _body(store, "u", calls, {"n": 2}), lease_s=0.5) == {"n": 2}
    assert len(calls) == 1 and time.monotonic() - t0 >= 0.3
    (claim,) = store.claims("r")
    assert (claim.status, claim.attempts) == ("done", 2)
    assert store.stage("r", "u").attempts == 2

    again: list[str] = []
    assert run_unit(store, "r", "u", _body(store, "u", again, {"n": 3})) == {"n": 2}  # the stored result
    assert again == []


def test_an_unfinished_unit_is_released_so_a_rerun_runs_it_again(store):
    def failing(lease):
        raise Unfinished({"status": "rejected", "reason": "docker went away"})

    assert run_unit(store, "r", "u", failing, lease_s=5) == {"status": "rejected", "reason": "docker went away"}
    assert store.claims("r") == []
    calls: list[str] = []
    assert run_unit(store, "r", "u", _body(store, "u", calls, {"n": 4}), lease_s=5) == {"n": 4}
    assert len(calls) == 1


def test_a_unit_whose_lease_was_lost_publishes_nothing_and_returns_the_new_holders_result(store):
    def lost_then_other_finishes(lease):
        store.start_stage("r", "u")
        lease.lost.set()  # as the heartbeat does when another worker took the key over
        store.finish_stage("r", "u", {"by": "other"})
        publish(lease)
        store.finish_stage("r", "u", {"by": "me"})  # never reached
        return {"by": "me"}

    assert run_unit(store, "r", "u", lost_then_other_finishes, lease_s=5) == {"by": "other"}
    assert store.stage("r", "u").result == {"by": "other"}
    with pytest.raises(Lost):
        from envgen.store import Lease

        lease = Lease("r", "k", "me")
        lease.lost.set()
        publish(lease)


def test_a_pack_carried_through_the_store_keeps_its_content_hash(tiny_pack, tmp_path, store):
    blob = pack_bytes(tiny_pack.root)
    store.finish_stage("r", "k", {}, artifacts={"pack:k": blob})
    out = unpack(store.artifact("r", "pack:k"), tmp_path / "out" / "tiny")
    assert load(out).manifest.version == tiny_pack.manifest.version
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == \
        sorted(p.relative_to(tiny_pack.root).as_posix() for p in tiny_pack.root.rglob("*"))
    assert pack_bytes(out) == blob  # deterministic: owners and order fixed


def test_registry_names(monkeypatch):
    monkeypatch.delenv("ENVGEN_REGISTRY", raising=False)
    assert registry_of(None) is None
    monkeypatch.setenv("ENVGEN_REGISTRY", "127.0.0.1:5000")
    assert registry_of(None) == "127.0.0.1:5000" and registry_of("reg.example:443/") == "reg.example:443"
    assert remote_name("127.0.0.1:5000", "envgen/pack:calc-abc") == ("127.0.0.1:5000/envgen/pack", "calc-abc")
    with pytest.raises(InputError, match="without a scheme"):
        registry_of("http://127.0.0.1:5000")
    with pytest.raises(InputError, match="no tag"):
        remote_name("127.0.0.1:5000", "envgen/pack")


def test_an_unreachable_ray_address_is_one_clear_error_at_once(monkeypatch):
    import socket

    import ray

    from envgen.passcheck.executors import connect_ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh driver, whatever ran before

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(InputError, match=rf"--ray-address 127.0.0.1:{port}: no Ray cluster answers there"):
        connect_ray(f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 10


def test_a_worker_killed_between_finishing_its_stage_and_its_lease_leaves_no_claim_held(store):
    """finish_stage marks the stage's claim done in its own transaction: a worker that dies right after it
    (before its lease's ``done``) leaves a finished stage with a finished claim, which a rerun resumes."""
    assert store.claim("r", "u", owner="killed-worker", lease_s=600)
    store.start_stage("r", "u")
    store.finish_stage("r", "u", {"n": 7})  # ... and the worker is killed here
    assert [(c.key, c.status, c.owner, c.attempts) for c in store.claims("r")] == [("u", "done", "killed-worker", 1)]
    assert store.done("r", "u", "killed-worker") and not store.done("r", "u", "another-worker")
    calls: list[str] = []
    assert run_unit(store, "r", "u", _body(store, "u", calls, {"n": 8})) == {"n": 7}
    assert calls == [] and not store.claim("r", "u", owner="late-worker")
