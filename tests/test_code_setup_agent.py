"""The environment-setup agent: a scripted model at the HTTP boundary sets up repositories the recipe cannot run.

Without Docker: the session's tools, recording and replay, budgets and malformed calls over ``HostBench``, a
``Bench`` on this machine (the environment is a folder on PYTHONPATH; the tests run through the kit exactly as
local validation runs them). With Docker (one module-scoped build): a repository whose tests import a package
it declares nowhere (only its CI workflow installs it) becomes a validated task, and a rerun over the same
store replays the recorded recipe without a model call.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from envgen.errors import EnvironmentFailed, InputError
from envgen.families.code import build_code
from envgen.families.code.candidates import Candidate
from envgen.families.code.execution import judge, run_matrix_local
from envgen.families.code.lang import Recipe, Step
from envgen.families.code.repo_image import StepResult, make_snapshot
from envgen.families.code import setup_agent
from envgen.families.code.setup_agent import RecipeBook, SetupAgent, SetupBudgets, truncated
from envgen.llm.client import LLMConfig
from envgen.store import Store

try:
    from .code_repo import _commit, _git, _write, diff
    from .fake_llm import FakeLLM, Reply
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _commit, _git, _write, diff
    from fake_llm import FakeLLM, Reply

RUN_ID = "code:test-setup"


# ---------------------------------------------------------------- a repository whose tests need an undeclared module


def make_greet_repo(root: Path, module: str, ci_install: str, deps: str = "") -> dict[str, str]:
    """``greet``: pyproject declares no dependencies, the tests import ``module`` at the top (a test dependency
    only the CI workflow installs, as real projects do). The fix adds ``shout`` and its test."""
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main")
    tests = (f"import {module}\nfrom greet import greet\n\n\ndef test_greet():\n    assert greet('Ada') == 'Hello, Ada'\n\n\n"
             f"def test_helper_loaded():\n    assert {module} is not None\n")
    _write(root, {"pyproject.toml": '[project]\nname = "greet"\nversion = "0.3.0"\nrequires-python = ">=3.9"\n'
                                    f'{deps}\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
                  ".github/workflows/ci.yml": "jobs:\n  test:\n    steps:\n      - uses: actions/checkout@v4\n"
                                              f"      - run: {ci_install}\n      - run: pytest\n",
                  "greet/__init__.py": "def greet(name):\n    return 'Hello, ' + name\n",
                  "tests/test_greet.py": tests, "README.md": "# greet\n"})
    shas = {"initial": _commit(root, "Initial greet package", 1)}
    _write(root, {"greet/__init__.py": "def greet(name):\n    return 'Hello, ' + name\n\n\n"
                                       "def shout(name):\n    return greet(name).upper() + '!'\n",
                  "tests/test_greet.py": tests + "\n\ndef test_shout():\n    from greet import shout\n"
                                                 "    assert shout('Ada') == 'HELLO, ADA!'\n"})
    shas["fix"] = _commit(root, "Add shout(), which greets a name loudly with an exclamation mark", 2)
    return shas


def llm(fake: FakeLLM) -> LLMConfig:
    return LLMConfig(name="scripted", base_url=fake.url, model="fake-model", api_key="sk-test", timeout=60,
                     max_retries=1, backoff_base=0.01, backoff_max=0.05)


def scripted(*turns):
    """A responder playing ``turns`` by position: the N-th model turn of a session answers turns[N]
    (a function of the request, so a replayed request gets the same answer)."""
    def respond(body):
        n = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return turns[min(n, len(turns) - 1)]
    return respond


def call(name, args=None) -> Reply:
    return Reply(calls=[(name, {} if args is None else args)])


# ---------------------------------------------------------------- the host bench (no Docker)


class HostBench:
    """A ``Bench`` on this machine: the environment is ``site`` (on PYTHONPATH), the working tree a checkout with
    the test patch, the tests the kit's matrix through ``run_matrix_local``; ``replay`` empties ``site`` and runs
    the steps in a fresh checkout without the test patch, as the task layer does."""

    def __init__(self, root: Path, cand: Candidate, files: list[str]):
        self.root, self.cand, self.files = root, cand, files
        self.site = root / "site"
        self.site.mkdir(parents=True, exist_ok=True)
        self.git_dir = root / "repo.git"
        self.base = make_snapshot(cand.repo_path, cand.base_commit, self.git_dir)
        self.tree = self._checkout(root / "tree", patch=True)
        self.closed = False

    def _checkout(self, dest: Path, *, patch: bool) -> Path:
        shutil.rmtree(dest, ignore_errors=True)
        subprocess.run(["git", "clone", "-q", str(self.git_dir), str(dest)], check=True)
        if patch:
            subprocess.run(["git", "-C", str(dest), "apply", "-"], input=self.cand.test_patch.encode(), check=True)
        return dest

    def shell(self, command, timeout, *, posix_sh):
        env = {**os.environ, "SITE": str(self.site)}
        try:
            out = subprocess.run(["/bin/sh" if posix_sh else "bash", "-c", command], cwd=self.tree, env=env,
                                 capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124, ""
        return out.returncode, (out.stdout + out.stderr).decode(errors="replace")

    def tests(self, timeout):
        return run_matrix_local(self.git_dir, base=self.base, framework="pytest", files=self.files, python=None,
                                pythonpath=[".", str(self.site)], gold=self.cand.gold_patch, test=self.cand.test_patch,
                                runs=1, timeout_s=timeout)

    def replay(self, commands, timeout):
        shutil.rmtree(self.site)
        self.site.mkdir()
        fresh = self._checkout(self.root / "replay", patch=False)
        for c in commands:
            out = subprocess.run(["/bin/sh", "-c", c], cwd=fresh, env={**os.environ, "SITE": str(self.site)},
                                 capture_output=True, timeout=timeout)
            if out.returncode != 0:
                return f"`{c}` exited with {out.returncode}", None
        return None, self.tests(timeout)

    def close(self):
        self.closed = True


@pytest.fixture()
def host(tmp_path):
    module = "envgen_fixture_helper_mod"
    shas = make_greet_repo(tmp_path / "greet", module, f"pip install {module}")
    repo = tmp_path / "greet"
    whole = diff(repo, shas["initial"], shas["fix"])
    gold = diff(repo, shas["initial"], shas["fix"]).split("diff --git a/tests/")[0]
    test = whole[len(gold):]
    cand = Candidate(instance_id="greet-1", repo="greet", repo_path=repo, base_commit=shas["initial"],
                     gold_patch=gold, test_patch=test, problem_statement="Add shout()", language="python",
                     test_files=["tests/test_greet.py"])
    store = Store(tmp_path / "state.sqlite")
    store.open_run(RUN_ID, "build-code", {})
    benches: list[HostBench] = []

    def bench(base, files):
        b = HostBench(tmp_path / "bench", cand, files)
        benches.append(b)
        return b

    recipe = Recipe(language="python", suite="bookworm", toolchains=("python",), steps=[Step("venv", "true")],
                    framework="pytest", python=None, pythonpath=["."])
    return {"cand": cand, "store": store, "bench": bench, "benches": benches, "recipe": recipe, "module": module,
            "tmp": tmp_path}


INSTALL = "mkdir -p \"$SITE\" && printf 'VERSION = 1\\n' > \"$SITE/{module}.py\""


def rescue(h, fake, budgets=None):
    agent = SetupAgent(h["store"], run_id=RUN_ID, llm=llm(fake), work=h["tmp"] / "work", budgets=budgets,
                       log=lambda m: None)
    res = agent.rescue(h["cand"], h["recipe"], h["cand"].base_commit, ["tests/test_greet.py"],
                       why="validation: no FAIL_TO_PASS test", bench_factory=h["bench"])
    return agent, res


def tool_results(body) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_the_agent_records_only_successful_steps_and_survives_a_malformed_call(host):
    install = INSTALL.format(module=host["module"])
    turns = [call("run_tests"), call("bash", {"command": "cat .github/workflows/ci.yml"}),
             call("step", {"command": "pip-that-does-not-exist install x"}),
             Reply(calls=[("step", '{"command": "oops'),]),  # malformed JSON arguments
             call("step", {"command": install}), call("run_tests"), call("done", {"summary": "helper installed"})]
    with FakeLLM(scripted(*turns)) as fake:
        agent, res = rescue(host, fake)
        bodies = [r.body for r in fake.log]
    assert res.reason == "" and res.recipe is not None
    assert [s.run for s in res.recipe.task_steps] == [install]  # the failed step and exploration are not in it
    assert res.recipe.steps == host["recipe"].steps
    first = tool_results(bodies[1])[0]
    assert "Target tests ran: NO for tests/test_greet.py" in first and host["module"] in first
    assert "pip install envgen_fixture_helper_mod" in tool_results(bodies[2])[-1]
    assert "NOT recorded (it failed)" in tool_results(bodies[3])[-1]
    malformed = tool_results(bodies[4])[-1]
    assert "not valid JSON" in malformed  # a clear error observation; the session goes on
    after = tool_results(bodies[6])[-1]
    assert "Target tests ran: yes" in after and "tests/test_greet.py::test_shout: failed -> passed" in after
    info = res.info
    assert (info["source"], info["turns"], info["malformed"], info["outcome"]) == ("agent", 7, 1, "stopped")
    assert [(c["tool"], c["rc"]) for c in info["commands"]] == [
        ("run_tests", 1), ("bash", 0), ("step", 127), ("step", 0), ("run_tests", 0), ("done", 0)]
    assert info["tokens"] > 0 and Path(info["transcript"]).is_file()
    runs = host["store"].agent_runs(RUN_ID)
    assert [(r.role, r.outcome, r.malformed) for r in runs] == [("env-setup", "stopped", 1)]
    assert all(b.closed for b in host["benches"])
    # recorded under repository + setup commit + the original recipe's key, replayed without a model
    book = SetupAgent(host["store"], run_id=RUN_ID)
    rec, provenance = book.replay("greet", host["cand"].base_commit, host["recipe"])
    assert rec.to_dict() == res.recipe.to_dict() and provenance["source"] == "replay"
    assert provenance["recorded"]["steps"] == [install]
    assert book.replay("greet", "0" * 40, host["recipe"]) is None
    other = Recipe(**{**host["recipe"].__dict__, "steps": [Step("venv", "false")]})
    assert book.replay("greet", host["cand"].base_commit, other) is None


def test_changes_made_with_bash_are_caught_by_the_replay_at_done(host):
    install = INSTALL.format(module=host["module"])
    turns = [call("bash", {"command": install}), call("run_tests"), call("done", {"summary": "done"}),
             call("step", {"command": install}), call("done", {"summary": "now as a step"})]
    with FakeLLM(scripted(*turns)) as fake:
        _, res = rescue(host, fake)
        refused = tool_results(fake.log[3].body)[-1]
    assert "Target tests ran: yes" in tool_results(fake.log[2].body)[-1]  # the bash install works in the sandbox...
    assert "replay_failed" in refused and "bash instead of step" in refused  # ...but not from the recipe alone
    assert [s.run for s in res.recipe.task_steps] == [install]


def test_a_model_that_never_finishes_stops_at_its_budget(host):
    with FakeLLM(scripted(call("bash", {"command": "true"}))) as fake:
        _, res = rescue(host, fake, SetupBudgets(max_tool_calls=3))
        calls = len(fake.log)
    assert res.recipe is None
    assert res.reason == "set-up agent: stopped at its tool-call budget (3 calls) before the target tests ran"
    assert calls == 4 and res.info["reason"] == res.reason
    with FakeLLM(scripted(call("bash", {"command": "true"}))) as fake:
        _, res = rescue(host, fake, SetupBudgets(max_turns=2))
    assert res.reason == "set-up agent: stopped at its turn budget (2 model turns) before the target tests ran"
    assert res.info["turns"] == 2 and res.info["outcome"] == "turn_budget"
    assert len(fake.log) == 0  # the same requests as the first session's: answered from the store's LLM cache
    assert RecipeBook(host["store"]).get("greet", host["cand"].base_commit, host["recipe"].key) is None


def test_a_model_that_gives_up_is_nudged_then_rejected(host):
    with FakeLLM(scripted(Reply(content="I cannot do this."))) as fake:
        _, res = rescue(host, fake)
    assert len(fake.log) == 3  # the answer, then two nudges
    assert res.reason == "set-up agent: gave up without making the target tests run: I cannot do this."


def test_when_the_agent_takes_over():
    ran = {"mode": "gold", "run": 1, "outcomes": {"t.py::a": "failed"}}
    nothing = {"mode": "gold", "run": 1, "outcomes": {}}
    errored = {"mode": "gold", "run": 1, "outcomes": {"t.py::a": "error"}}
    base = {"mode": "base", "run": 1, "outcomes": {}}
    assert setup_agent.tests_did_not_run(judge("x", {"runs": [base, nothing]}, 1))
    assert setup_agent.tests_did_not_run(judge("x", {"runs": [base, errored]}, 1))  # every test errored at setup
    assert not setup_agent.tests_did_not_run(judge("x", {"runs": [base, ran]}, 1))  # they ran: a task problem, not set-up
    unapplied = {"mode": "gold", "run": 1, "outcomes": {}, "error": "the gold patch does not apply"}
    assert not setup_agent.tests_did_not_run(judge("x", {"runs": [base, unapplied]}, 1))
    failed = EnvironmentFailed("step 'dependencies' exited with 1", [StepResult("venv", "a", 0),
                                                                     StepResult("dependencies", "b", 1),
                                                                     StepResult("package", "c", None)])
    recipe = Recipe(language="python", suite="bookworm", toolchains=("python",), framework="pytest",
                    steps=[Step("venv", "a"), Step("dependencies", "b"), Step("package", "c")],
                    task_steps=[Step("install", "d")])
    cut = truncated(recipe, failed)
    assert [s.name for s in cut.steps] == ["venv"] and cut.task_steps == []


def test_the_agent_needs_the_docker_sandbox(tmp_path):
    with pytest.raises(InputError, match="--sandbox docker"):
        build_code(f"git:{tmp_path}", tmp_path / "out", backend="local", store=tmp_path / "s.sqlite",
                   llm=LLMConfig(name="x", base_url="http://127.0.0.1:9/v1", model="m", api_key="k"))


# ---------------------------------------------------------------- in Docker: a validated task, then a replay


@pytest.fixture(scope="module")
def docker_built(tmp_path_factory):
    root = tmp_path_factory.mktemp("setup-agent")
    shas = make_greet_repo(root / "greet", "six", "pip install six pytest")
    venv_pip = "python3 -m venv --system-site-packages /opt/envgen/venv"
    install = "/opt/envgen/venv/bin/python -m pip install --no-cache-dir --progress-bar off 'six>=1.16'"
    turns = [call("run_tests"), call("bash", {"command": "cat .github/workflows/ci.yml; ls /opt/envgen/setup"}),
             call("step", {"command": venv_pip}), call("step", {"command": install}), call("run_tests"),
             call("done", {"summary": "six, a test dependency only the CI installs"})]
    logs: list[str] = []
    with FakeLLM(scripted(*turns)) as fake:
        first = build_code(f"git:{root / 'greet'}", root / "out", backend="docker", store=root / "state.sqlite",
                           runs=1, gate=False, llm=llm(fake), log=logs.append)
        requests_first = len(fake.log)
        bodies = [r.body for r in fake.log]
        second = build_code(f"git:{root / 'greet'}", root / "out2", backend="docker", store=root / "state.sqlite",
                            runs=1, gate=False, llm=llm(fake), log=logs.append)
        requests_second = len(fake.log) - requests_first
    # a pin to a release the index does not have: the environment image fails at its dependencies step
    pinned = make_greet_repo(root / "pinned", "six", "pip install six pytest", deps='dependencies = ["six==0.0.1"]\n')
    with FakeLLM(scripted(call("run_tests"), call("step", {"command": install}), call("done", {"summary": "six"}))) as fake:
        third = build_code(f"git:{root / 'pinned'}", root / "out-pinned", backend="docker",
                           store=root / "state.sqlite", runs=1, gate=False, llm=llm(fake), log=logs.append)
        pinned_bodies = [r.body for r in fake.log]
    return {"third": third, "pinned": pinned, "pinned_bodies": pinned_bodies, "root": root, "shas": shas, "first": first, "second": second, "bodies": bodies,
            "requests": (requests_first, requests_second), "install": install, "venv_pip": venv_pip, "logs": logs}


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_the_agent_turns_an_unrunnable_repository_into_a_validated_task(docker_built):
    d = docker_built
    first = d["first"]
    assert first.kept == 1, first.rejections
    name = first.packs[0]
    summary = first.details["tasks"][f"greet-{d['shas']['fix'][:12]}"]
    assert (summary["FAIL_TO_PASS"], summary["PASS_TO_PASS"]) == (1, 2)
    pack = json.loads((d["root"] / "out" / name / "tasks.jsonl").read_text().splitlines()[0])
    args = pack["verifier"]["args"]
    assert args["FAIL_TO_PASS"] == ["tests/test_greet.py::test_shout"]
    assert args["PASS_TO_PASS"] == ["tests/test_greet.py::test_greet", "tests/test_greet.py::test_helper_loaded"]
    setup = summary["setup"]
    assert setup["source"] == "agent" and setup["steps"] == [d["venv_pip"], d["install"]]
    assert setup["turns"] == 6 and setup["tokens"] > 0 and setup["trigger"].startswith("validation:")
    first_answer = [m["content"] for m in d["bodies"][1]["messages"] if m["role"] == "tool"][0]
    assert "No module named 'six'" in first_answer and "Target tests ran: NO" in first_answer
    listing = [m["content"] for m in d["bodies"][2]["messages"] if m["role"] == "tool"][-1]
    assert "pip install six pytest" in listing and "test.patch" in listing
    assert "gold.patch" not in listing  # the fix is in the container only while the tests run
    dockerfile = (d["root"] / "out" / name / "env" / "Dockerfile").read_text()
    assert d["install"] in dockerfile  # the recorded step is the task layer's, replayed in the image build
    assert first.details["llm"]["spent"]["calls"] == 6
    report = json.loads((d["root"] / "out" / "build.json").read_text())
    assert report["details"]["tasks"][f"greet-{d['shas']['fix'][:12]}"]["setup"]["source"] == "agent"


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_a_rerun_replays_the_recorded_recipe_without_a_model_call(docker_built):
    d = docker_built
    assert d["requests"] == (6, 0)
    second = d["second"]
    assert second.kept == 1, second.rejections
    summary = second.details["tasks"][f"greet-{d['shas']['fix'][:12]}"]
    assert summary["setup"]["source"] == "replay" and summary["setup"]["recorded"]["steps"] == [d["venv_pip"],
                                                                                                d["install"]]
    assert (summary["FAIL_TO_PASS"], summary["PASS_TO_PASS"]) == (1, 2)
    assert any("replaying the set-up agent's recorded recipe" in line for line in d["logs"])



@pytest.mark.docker
@pytest.mark.timeout(900)
def test_an_environment_that_fails_to_build_is_set_up_from_its_venv_step(docker_built):
    d = docker_built
    third = d["third"]
    assert third.kept == 1, third.rejections
    summary = third.details["tasks"][f"pinned-{d['pinned']['fix'][:12]}"]
    assert (summary["FAIL_TO_PASS"], summary["PASS_TO_PASS"]) == (1, 2)
    assert summary["setup"]["source"] == "agent" and summary["setup"]["steps"] == [d["install"]]
    assert "dependencies" in summary["setup"]["trigger"] and "exited with" in summary["setup"]["trigger"]
    brief = d["pinned_bodies"][0]["messages"][1]["content"]
    assert "dependencies (exit 1)" in brief and "six==0.0.1" in brief
    (key, env), = [(k, e) for k, e in third.details["environments"].items() if e.get("tag")]
    assert [s["name"] for s in env["steps"]] == ["venv"]  # the failed step and what followed are gone


def test_the_code_family_takes_the_llm_options_and_the_set_up_budgets():
    from envgen.families.code.family import FAMILY

    names = {o.name: o.flags for o in FAMILY.describe_options()}
    assert names["llm_model"] == ("--llm-model",) and "llm_config" in names
    assert {"--setup-max-turns", "--setup-max-tool-calls", "--setup-max-tokens", "--setup-max-minutes"} <= \
        {f for flags in names.values() for f in flags}
    opts = FAMILY.options(out="x", source="git:.", setup_max_tool_calls=5)
    assert not opts.uses_llm and opts.setup_max_tool_calls == 5  # without a model the build is unchanged
    with pytest.raises(InputError, match="--setup-max-tool-calls"):
        FAMILY.options(out="x", source="git:.", setup_max_tool_calls=0)
