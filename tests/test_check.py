"""The pass check and pass@k eval: exact early stopping, resume, executors, and a real HTTP policy."""

from __future__ import annotations

import random

import pytest

from envgen.pack import format as packmod
from envgen.passcheck.check import check, evaluate
from envgen.passcheck.rules import (AtLeastOnce, Band, Outcome, Scheduler, pass_at_k, pass_hat_k, rollout_seed, run_check,
                                   wilson)

from conftest import make_tiny_pack
from stub_policy import solves, stub_server

# ----------------------------------------------------------------------------- pure logic


@pytest.mark.parametrize("rule", [AtLeastOnce(30), Band(0.1, 0.5, 30), Band(0.0, 0.2, 30), Band(0.6, 1.0, 30)])
def test_decisions_known_early_equal_the_full_run(rule):
    rng = random.Random(7)
    for _ in range(400):
        p = rng.choice([0, 0.02, 0.1, 0.3, 0.5, 0.9, 1])
        outcomes = [rng.random() < p for _ in range(rule.k)]
        full = rule.decide(sum(outcomes), rule.k)
        order = list(range(rule.k))
        rng.shuffle(order)  # outcomes may finish out of order under concurrency
        seen, early = [], None
        for i in order:
            seen.append(outcomes[i])
            early = rule.decide(sum(seen), len(seen))
            if early is not None:
                break
        assert early == full


def test_pass_hat_k_is_the_chance_that_all_k_drawn_rollouts_pass():
    import itertools

    outcomes = [1, 0, 1, 1, 0, 1, 1]  # n = 7, c = 5
    for k in range(1, 8):
        draws = list(itertools.combinations(outcomes, k))
        assert pass_hat_k(7, 5, k) == pytest.approx(sum(all(d) for d in draws) / len(draws))
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(4, 3, 4) == 0.0 and pass_hat_k(4, 1, 1) == 0.25
    with pytest.raises(ValueError, match=r"pass\^5 needs at least 5"):
        pass_hat_k(4, 4, 5)


def test_pass_at_k_and_wilson():
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - (7 * 6 * 5 * 4) / (10 * 9 * 8 * 7))
    lo, hi = wilson(0, 100)
    assert lo == 0.0 and 0.03 < hi < 0.04
    lo, hi = wilson(50, 100)
    assert lo < 0.5 < hi


class _Sim:
    def __init__(self, probs):
        self.probs, self.pending, self.spent = probs, [], 0

    def submit(self, t, i):
        self.spent += 1
        self.pending.append((t, i))

    def wait(self):
        t, i = self.pending.pop(random.Random(len(self.pending)).randrange(len(self.pending)))
        ok = random.Random(rollout_seed(t, i)).random() < self.probs[t]
        return [Outcome(t, i, float(ok), ok)]

    def close(self):
        pass


def test_scheduler_spreads_workers_over_tasks_and_resumes():
    probs = {f"t{i}": p for i, p in enumerate([0, 0.01, 0.05, 0.3, 0.7] * 8)}
    rule = AtLeastOnce(100)
    full = {t: rule.decide(sum(random.Random(rollout_seed(t, i)).random() < p for i in range(100)), 100)
            for t, p in probs.items()}
    sim = _Sim(probs)
    sched = run_check(Scheduler(probs, rule, workers=8), sim)
    assert {t: s.decision for t, s in sched.tasks.items()} == full
    sequential = sum(min([i + 1 for i in range(100) if random.Random(rollout_seed(t, i)).random() < p] or [100])
                     for t, p in probs.items())
    assert sim.spent <= sequential * 1.15
    # resume: feed half of the recorded outcomes back in; only the rest is spent again
    recorded = [o for s in sched.tasks.values() for o in s.outcomes.values()]
    sim2 = _Sim(probs)
    sched2 = run_check(Scheduler(probs, rule, workers=8, done=recorded[::2]), sim2)
    assert {t: s.decision for t, s in sched2.tasks.items()} == full
    assert sim2.spent < sim.spent


def test_errors_are_retried_and_then_drop_the_task():
    sched = Scheduler(["a"], AtLeastOnce(10), workers=1, max_errors=2)
    t, i = sched.next(0)
    sched.record(Outcome(t, i, 0.0, False, error="endpoint down"))
    assert sched.tasks["a"].decision is None and sched.next(0) == ("a", 0)
    sched.record(Outcome("a", 0, 0.0, False, error="endpoint down"))
    assert sched.tasks["a"].decision is False and sched.tasks["a"].outcomes == {}


# ----------------------------------------------------------------------------- real rollouts


@pytest.fixture
def store(tmp_path):
    return f"sqlite:///{tmp_path / 'state.sqlite'}"


def test_check_oracle_keeps_everything_after_one_rollout(tiny_pack, tmp_path, store):
    r = check(str(tiny_pack.root), "oracle", k=10, out=tmp_path / "kept", workers=2, store_url=store,
              plot=tmp_path / "hist.png")
    assert r.kept == [t.id for t in tiny_pack.tasks]
    # one rollout per task: a task decided by its first rollout never gets a second one started beside it
    assert r.rollouts_spent == len(tiny_pack.tasks)
    assert packmod.load(tmp_path / "kept").manifest.stats["tasks"] == 3
    stats = packmod.load(tmp_path / "kept").tasks[0].stats["check"]["oracle"]
    assert stats["rollouts"] == 1 and stats["passes"] == 1
    assert stats["kept"] is True and stats["sandbox"] == "local"
    assert stats["step_latency_p50_s"] > 0
    assert packmod.load(tiny_pack.root).tasks[0].stats == {}, "without --write-stats the pack itself is untouched"
    check(str(tiny_pack.root), "null", k=2, workers=2, store_url=store, write_stats=True)
    by_policy = packmod.load(tiny_pack.root).tasks[0].stats["check"]
    assert set(by_policy) == {"null"} and by_policy["null"]["passes"] == 0
    assert (tmp_path / "hist.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_check_null_spends_k_and_drops(tiny_pack, store, backend, request):
    if backend == "postgres":
        store = request.getfixturevalue("postgres_url")  # the same ledger on a PostgreSQL server
    r = check(str(tiny_pack.root), "null", k=4, workers=2, store_url=store)
    assert r.kept == [] and r.rollouts_spent == 12
    again = check(str(tiny_pack.root), "null", k=6, workers=2, store_url=store)
    assert again.rollouts_spent == 6 and again.resumed == 12, "a larger k reuses the recorded rollouts"


# ----------------------------------------------------------------------------- a stub policy over real HTTP

PROBS = [0.0, 0.03, 0.15, 0.5, 0.9, 1.0]


def _expected(pack, k):
    out = {}
    for i, t in enumerate(pack.tasks):
        p = PROBS[i % len(PROBS)]
        passes = sum(solves(rollout_seed(t.id, j), p) for j in range(k))
        out[t.id] = AtLeastOnce(k).decide(passes, k)
    return out


@pytest.fixture
def stub(tmp_path):
    pack = make_tiny_pack(tmp_path / "pack12", tasks=12)
    srv = stub_server(pack, PROBS)
    yield pack, f"openai:stub?base_url=http://127.0.0.1:{srv.server_port}/v1&temperature=1.0"
    srv.shutdown()


def test_stub_policy_decisions_equal_full_run_and_resume(stub, store):
    pack, policy = stub
    k = 30
    expected = _expected(pack, k)
    assert set(expected.values()) == {True, False}

    seen = []

    def interrupt_after_15(n):
        seen.append(n)
        if len(seen) == 15:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check(str(pack.root), policy, k=k, workers=3, store_url=store, progress=interrupt_after_15)
    r = check(str(pack.root), policy, k=k, workers=3, store_url=store)
    assert {t: s["kept"] for t, s in r.stats.items()} == expected
    assert r.resumed >= 15
    assert r.stats[pack.tasks[0].id]["tokens"] == 0 or r.stats[pack.tasks[1].id]["tokens"] > 0


@pytest.mark.slow
def test_ray_executor_gives_the_same_decisions(stub, tmp_path):
    pytest.importorskip("ray")
    pack, policy = stub
    k = 20
    local = check(str(pack.root), policy, k=k, workers=2, store_url=f"sqlite:///{tmp_path / 'a.sqlite'}")
    ray_r = check(str(pack.root), policy, k=k, workers=2, executor="ray", store_url=f"sqlite:///{tmp_path / 'b.sqlite'}")
    assert {t: s["kept"] for t, s in ray_r.stats.items()} == {t: s["kept"] for t, s in local.stats.items()} \
        == _expected(pack, k)


def test_eval_pass_at_k(stub, store):
    pack, policy = stub
    rep = evaluate(str(pack.root), [policy, "oracle", "null"], sample=6, k=4, workers=2, store_url=store)
    assert rep.results["oracle"] == {"pass@1": 1.0, "pass@2": 1.0, "pass@4": 1.0, "pass^1": 1.0, "pass^2": 1.0,
                                     "pass^4": 1.0}
    assert rep.results["null"] == dict.fromkeys(rep.results["oracle"], 0.0)
    r = rep.results[policy]
    assert 0.0 < r["pass@1"] <= r["pass@2"] <= r["pass@4"] < 1.0
    assert r["pass^1"] == r["pass@1"] and r["pass^4"] <= r["pass^2"] <= r["pass^1"] and r["pass^2"] < r["pass^1"]
    assert len(rep.sample) == 6 and rep.sample == sorted(rep.sample)


def test_settings_are_documented_config_objects(tiny_pack, tmp_path):
    """Every setting of check, eval and each family's build is documented where it is defined, and a bad value is
    one InputError naming the setting (before any rollout)."""
    from envgen.build.family import families
    from envgen.errors import InputError
    from envgen.passcheck.config import CheckConfig, EvalConfig

    models = [CheckConfig, EvalConfig, *(f.Options for f in families().values())]
    undocumented = [f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items() if not f.description]
    assert undocumented == [] and len(models) >= 5
    with pytest.raises(InputError, match=r"CheckConfig: k: Input should be greater than or equal to 1"):
        check(str(tiny_pack.root), "null", k=0, store_url=str(tmp_path / "s.sqlite"))
    with pytest.raises(InputError, match="CheckConfig: nope: Extra inputs are not permitted"):
        check(str(tiny_pack.root), "null", nope=1)
    config = CheckConfig(k=2, workers=2, store_url=str(tmp_path / "s.sqlite"))
    r = check(str(tiny_pack.root), "null", config, k=3)  # keywords override the config's fields
    assert r.rollouts_spent == 3 * len(tiny_pack.tasks) and config.k == 2
