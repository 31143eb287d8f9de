"""The LLM-agent build pipelines on a real Ray cluster (a head and a second worker node on this machine), the
models faked at the HTTP boundary (tests/fake_llm.py, the scripted agents of the families' own tests):

- an interpreter build whose problems are Ray tasks, stopped by a model outage on one problem, fails with the
  local build's error and leaves no lease behind; its rerun writes the pack a local build writes (same
  content hash) from the same model requests, each paid once, and reports the same paid calls;
- a search build whose entities are Ray tasks writes the local build's pack, through the CLI's family entry
  (``--executor ray`` is no longer refused);
- a general build runs its stages (database, tools, each level) one after another as Ray tasks and writes
  the local build's pack from the same requests;
- a worker killed in the middle of a problem, with the state on a real PostgreSQL server, loses and repeats
  nothing: its problem is taken over once its lease runs out (that stage's second attempt, every other
  one's first), its answered model calls are replayed from the store, not asked again, and the pack is the
  local one.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from envgen.build.family import get_family
from envgen.errors import SynthesisError
from envgen.families.interpreter.writer import synthesize_problems
from envgen.llm.client import LLMConfig
from envgen.pack import load
from envgen.store import Store

try:
    from .fake_llm import Fail, FakeLLM
    from .general_script import GeneralScript
    from .interpreter_script import InterpreterScript, problem_number, submissions
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from fake_llm import Fail, FakeLLM
    from general_script import GeneralScript
    from interpreter_script import InterpreterScript, problem_number, submissions

pytestmark = pytest.mark.timeout(300)
DOMAIN = "number theory"
RUN_ID = "interpreter/number-theory/seed0"


def llm(fake: FakeLLM) -> LLMConfig:
    return LLMConfig(name="scripted", base_url=fake.url, model="fake-model", api_key="sk-test", timeout=60,
                     max_retries=0, price_input=0.28, price_output=0.42)


def _interpreter(out: Path, fake: FakeLLM, store: str, work: Path, ticks: list | None = [1, 1, 1], **kw):
    """An interpreter build of 3 problems; ``ticks``: the progress calls it must make (None: not checked)."""
    got: list[int] = []
    report = synthesize_problems(DOMAIN, out, llm=llm(fake), problems=3, store_url=store, work_dir=work, workers=2,
                                 progress=got.append, **kw)
    assert ticks is None or got == ticks
    return report


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    d = tmp_path_factory.mktemp("llm-local")
    with FakeLLM(InterpreterScript()) as fake:
        report = _interpreter(d / "pack", fake, f"sqlite:///{d / 'state.sqlite'}", d / "work")
        assert fake.errors == []
        keys = sorted(r.key for r in fake.log if r.status == 200)
    return report, d / "pack", keys


def test_an_interpreter_build_on_ray_stopped_by_an_outage_resumes_to_the_local_build(ray_cluster, local, tmp_path):
    report, pack, keys = local
    store, work = f"sqlite:///{tmp_path / 'state.sqlite'}", tmp_path / "work"
    script = InterpreterScript()
    outage = lambda body: Fail(500, message="overloaded") if problem_number(body) == 3 else script(body)  # noqa: E731
    with FakeLLM(outage) as fake:
        with pytest.raises(SynthesisError, match=r"interpreter pipeline stopped: .*HTTP 500.*Rerun the same command"):
            _interpreter(tmp_path / "pack", fake, store, work, executor="ray", ticks=None)
        first = [r.key for r in fake.log if r.status == 200]
    assert not (tmp_path / "pack").exists()
    assert {st.key: st.status for st in Store(store).stages(RUN_ID)}["p0002"] == "failed"
    assert [e.stage for e in Store(store).errors(RUN_ID)] == ["p0002"]
    deadline = time.monotonic() + 10  # the interrupted stages give their leases up, well before they would end
    while any(c.status == "claimed" for c in Store(store).claims(RUN_ID)):
        assert time.monotonic() < deadline, Store(store).claims(RUN_ID)
        time.sleep(0.05)

    t0 = time.monotonic()
    with FakeLLM(InterpreterScript()) as fake:
        got = _interpreter(tmp_path / "pack", fake, store, work, executor="ray", ticks=None)
        assert fake.errors == []
        again = [r.key for r in fake.log if r.status == 200]
    assert time.monotonic() - t0 < 30  # no stage waited for a lease (60 s) to run out
    assert sorted(first + again) == keys  # the local build's requests, each paid once over both runs
    assert load(tmp_path / "pack").manifest.version == load(pack).manifest.version
    assert (got.proposed, got.kept, got.rejected_by_reason) == (report.proposed, report.kept, report.rejected_by_reason)
    assert got.details["llm"]["spent"] == report.details["llm"]["spent"]  # the store's count: 5 calls, same cost
    # the workers' usage reaches the driver's report: this session paid for what the first one did not
    assert got.details["llm"]["session"]["calls"] == len(again) > 0
    assert got.details["models"] == ["fake-model"]
    claims = Store(store).claims(RUN_ID)  # every problem finished under a lease
    assert [(c.key, c.status) for c in claims] == [(f"p000{i}", "done") for i in range(3)]
    # the transcripts are where a local build writes them
    assert sorted(p.name for p in (work / "transcripts").iterdir()) == \
        sorted(p.name for p in (pack.parent / "work" / "transcripts").iterdir())

    # a rerun finds everything done: no model call, no Ray task
    with FakeLLM() as fake:  # answers 500 to anything
        rerun = _interpreter(tmp_path / "again", fake, store, work, executor="ray")
        assert fake.log == []
    assert rerun.details["llm"]["session"]["calls"] == 0
    assert load(tmp_path / "again").manifest.version == load(pack).manifest.version


def _busy_units() -> list[int]:
    """Pids of Ray worker processes running a pipeline stage now (Ray titles a busy worker ``ray::FUNCTION``)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            title = cmdline.read_bytes().split(b"\0", 1)[0]
        except OSError:
            continue
        if title.startswith(b"ray::run_stage_unit"):
            pids.append(int(cmdline.parent.name))
    return pids


def test_a_worker_killed_mid_problem_loses_and_repeats_nothing(ray_cluster, local, postgres_url, tmp_path):
    _, pack, keys = local
    script, blocked, release = InterpreterScript(), threading.Event(), threading.Event()

    def responder(body):
        # problem 1's second request (its first, answered, is in the store): hold it until its worker is killed
        if problem_number(body) == 1 and submissions(body) == 1 and not blocked.is_set():
            blocked.set()
            release.wait(60)
            return Fail(500, message="nobody is listening any more")
        return script(body)

    box: dict = {}
    with FakeLLM(responder) as fake:
        def run():
            try:
                box["report"] = _interpreter(tmp_path / "pack", fake, postgres_url, tmp_path / "work",
                                             executor="ray", lease_s=2.0)
            except BaseException as e:  # handed to the test's thread
                box["error"] = e

        t = threading.Thread(target=run)
        t.start()
        try:
            assert blocked.wait(90), "problem 1 never asked its second request"
            deadline = time.monotonic() + 30
            while True:  # the other problems finish in a moment: then the one busy worker is problem 1's
                done = [s for s in Store(postgres_url).stages(RUN_ID) if s.status == "done"]
                busy = _busy_units()
                if len(done) == 2 and len(busy) == 1:
                    break
                assert time.monotonic() < deadline, (done, busy)
                time.sleep(0.05)
            os.kill(busy[0], signal.SIGKILL)
        finally:
            release.set()
            t.join(120)
        assert "error" not in box, box.get("error")
        assert fake.errors == []
        paid = Counter(r.key for r in fake.log if r.status == 200)
        unpaid = [r for r in fake.log if r.status != 200]
    assert sorted(paid) == keys and set(paid.values()) == {1}  # no paid call was made twice
    # the held request, which the dead worker never got an answer to, is the only one asked again
    assert [(problem_number(r.body), submissions(r.body), r.key in paid) for r in unpaid] == [(1, 1, True)]

    assert load(tmp_path / "pack").manifest.version == load(pack).manifest.version
    s = Store(postgres_url)
    stages = {st.key: (st.status, st.attempts) for st in s.stages(RUN_ID)}
    assert stages == {"p0000": ("done", 2), "p0001": ("done", 1), "p0002": ("done", 1)}  # problem 1 is p0000
    assert {c.key: (c.status, c.attempts) for c in s.claims(RUN_ID)} == stages
    assert sorted(c.key for c in s.candidates(RUN_ID)) == ["p0000", "p0001", "p0002"]
    assert s.llm_spend(RUN_ID)["calls"] == 5 == box["report"].details["llm"]["spent"]["calls"]


def test_a_search_build_on_ray_from_the_family_entry_is_the_local_build(ray_cluster, tmp_path, monkeypatch):
    try:
        from .test_search import Script, small_corpus
    except ImportError:
        from test_search import Script, small_corpus
    from envgen.retrieval.corpus import build_index, mine_entities, read_docs, sample_entities, shipped_corpus

    monkeypatch.setenv("ENVGEN_CACHE", str(tmp_path / "cache"))  # the family's default work dir
    docs = list(read_docs(shipped_corpus()))
    corpus = small_corpus(tmp_path, docs)
    index = tmp_path / "index.sqlite"
    build_index(read_docs(corpus), index)
    ents = sample_entities([e for e in mine_entities(index, spans=False) if e.domain == "city"], 3, seed=5)
    facts = {d.id: d.facts for d in docs}
    truth = {e.name: facts[f"country/{facts[e.doc_id]['country']}"]["capital"] for e in ents}
    scenario = dict(zip(truth, ["keep", "easy", "keep"]))
    config = tmp_path / "search.yaml"
    config.write_text("domains: [city]\nverify_passes: 1\nanswerers:\n"
                      "  - {name: closed-book, tools: false, max_turns: 1}\n"
                      "  - {name: deep-search, max_turns: 4, note: You are the deep searcher.}\n")
    family = get_family("search")
    packs, requests = {}, {}
    for executor in ("local", "ray"):
        with FakeLLM(Script(truth, scenario)) as fake:
            opts = family.options(out=tmp_path / executor, index=index, tasks=3, seed=5, search_config=config,
                                  llm_model="fake-model", llm_base_url=fake.url, llm_api_key="sk-test",
                                  store=f"sqlite:///{tmp_path / executor}.sqlite", executor=executor, workers=2)
            ticks: list[int] = []
            report = family.build(opts, progress=ticks.append)
            assert fake.errors == [] and ticks == [1, 1, 1]
            requests[executor] = sorted(r.key for r in fake.answered())
        packs[executor] = report
    assert requests["ray"] == requests["local"]
    assert load(tmp_path / "ray").manifest.version == load(tmp_path / "local").manifest.version
    assert packs["ray"].kept == packs["local"].kept == 2
    for key in ("dropped_by_reason", "search"):
        assert packs["ray"].details[key] == packs["local"].details[key], key
    assert packs["ray"].details["llm"]["session"]["calls"] == packs["local"].details["llm"]["session"]["calls"] > 0


def test_a_general_build_on_ray_runs_its_stages_in_order_and_is_the_local_build(ray_cluster, tmp_path):
    from envgen.families.general.pipeline import synthesize

    builds = {}
    for executor in ("local", "ray"):
        ticks: list[int] = []
        store = f"sqlite:///{tmp_path / executor}.sqlite"
        with FakeLLM(GeneralScript()) as fake:
            report = synthesize("travel planning", tmp_path / executor, llm=llm(fake), store_url=store,
                                work_dir=tmp_path / f"work-{executor}", max_levels=2, progress=ticks.append,
                                executor=executor)
            assert fake.errors == []
            keys = [r.key for r in fake.log if r.status == 200]
        assert ticks == [1] * 5  # database, tools, two levels, the pack
        builds[executor] = (report, keys, Store(store))
    (local, local_keys, _), (ray, ray_keys, store) = builds["local"], builds["ray"]
    assert ray_keys == local_keys  # the same requests, in the same order: the stages ran one after another
    assert load(tmp_path / "ray").manifest.version == load(tmp_path / "local").manifest.version
    assert ray.kept == local.kept == 2
    assert ray.details["llm"]["session"]["calls"] == local.details["llm"]["session"]["calls"] == len(keys)
    run = "general/travel-planning/seed0"
    assert [(c.key, c.status, c.attempts) for c in store.claims(run)] == \
        [(k, "done", 1) for k in ("c0/l1", "c0/l2", "database", "tools")]
