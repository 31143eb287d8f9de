"""Candidate quality and SWE-bench evaluation without Docker: statement filters, squash-noise cleaning,
repositories named by their origin, the spec judge (a scripted model at the HTTP boundary), predictions
parsing, ``envgen eval swebench --sandbox local`` and the SWE-bench export round trip."""

from __future__ import annotations

import json
import subprocess

import pytest
from typer.testing import CliRunner

from envgen.cli import app
from envgen.errors import EnvgenError, JudgeError
from envgen.families.code import build_code, export_swebench
from envgen.families.code.candidates import (
    Filters,
    Rejection,
    make_candidate,
    split_patch,
    statement_problem,
)
from envgen.families.code.python import Python
from envgen.families.code.sources import (
    LocalGitSource,
    RawInstance,
    clean_commit_message,
    issue_text,
    load_issues,
    remote_repo,
)
from envgen.families.code.spec_judge import SpecJudge, meets, parse_spec_reply
from envgen.families.code.swebench_eval import read_predictions
from envgen.llm.client import LLMConfig
from envgen.pack import load

try:
    from .code_repo import _git, diff, make_calc_repo
    from .fake_llm import FakeLLM, Reply
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from code_repo import _git, diff, make_calc_repo
    from fake_llm import FakeLLM, Reply

PY = Python()


# ---------------------------------------------------------------- statement filters


@pytest.mark.parametrize("text, reason", [
    ("https://github.com/acme/calc/issues/41", "problem statement is only a link"),
    ("see <https://example.com/bug/7> and https://example.com/bug/8", "problem statement is only a link"),
    ("![screenshot](https://user-images.example.com/1.png)", "problem statement is only an image"),
    ('<img width="600" src="https://example.com/shot.png"> here', "problem statement is only an image"),
    ("```\nTraceback (most recent call last):\n  File \"calc/core.py\", line 9, in subtract\n    return b - a\n"
     "TypeError: unsupported operand type(s)\n```", "problem statement is mostly code or logs (100% of its lines)"),
    ("2024-01-02 12:00:01 ERROR calc: subtract failed\n2024-01-02 12:00:02 ERROR calc: retry failed\n"
     "2024-01-02 12:00:03 INFO calc: giving up", "problem statement is mostly code or logs (100% of its lines)"),
    ("Функция subtract возвращает неверный знак для положительных чисел, например 5 - 3 = -2",
     "problem statement is not in English (12% of its letters are Latin)"),
    ("La fonction subtract renvoie un résultat faux pour des nombres positifs, car les opérandes sont inversés "
     "dans le module core, donc chaque différence calculée par calc sort négative depuis la version deux",
     "problem statement is not in English (0% English function words)"),
])
def test_statements_that_cannot_specify_a_task_are_rejected_with_their_reason(text, reason):
    assert statement_problem(text, Filters()) == reason


@pytest.mark.parametrize("text", [
    "subtract returns the wrong sign for positive operands, e.g. 5 - 3 = -2",
    "subtract(5, 3) gives -2, see https://github.com/acme/calc/issues/41 for the discussion",
    "Calling subtract raises:\n```\nTraceback (most recent call last):\n  File \"x.py\", line 1\nTypeError: bad\n```\n"
    "when the second operand is None; it should return the first operand unchanged.",
])
def test_ordinary_statements_pass(text):
    assert statement_problem(text, Filters()) is None


@pytest.fixture(scope="module")
def calc(tmp_path_factory):
    root = tmp_path_factory.mktemp("quality") / "calc"
    shas = make_calc_repo(root)
    return root, shas


def _raw(calc, which="fix", **kw):
    root, shas = calc
    parent = {"fix": "initial", "docs": "float", "power": "docs"}[which]
    base = dict(instance_id=f"calc-{which}", repo="acme/calc", base_commit=shas[parent],
                patch=diff(root, shas[parent], shas[which]), repo_path=root,
                problem_statement="subtract returns the wrong sign for positive operands, e.g. 5 - 3 = -2",
                source="github", issues=[7])
    base.update(kw)
    return RawInstance(**base)


def test_candidate_filters_name_link_only_statements_and_non_code_gold_patches(calc):
    rej = make_candidate(_raw(calc, problem_statement="https://github.com/acme/calc/issues/7  " * 2), PY)
    assert isinstance(rej, Rejection) and rej.reason == "problem statement is only a link"
    assert rej.key == "problem statement is only a link"
    root, shas = calc
    gold, test, _, _ = split_patch(diff(root, shas["initial"], shas["fix"]), PY)
    readme_only = ("diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1 +1,2 @@\n # calc\n"
                   "+Subtract now returns a - b.\n")
    rej = make_candidate(_raw(calc, patch=readme_only, test_patch=test), PY)
    assert rej.reason == "gold patch changes only non-code files" and rej.details["files"] == ["README.md"]
    only_removes = ("diff --git a/tests/test_core.py b/tests/test_core.py\n--- a/tests/test_core.py\n"
                    "+++ b/tests/test_core.py\n@@ -5,2 +5,1 @@\n \n-def test_add():\n")
    rej = make_candidate(_raw(calc, patch=gold, test_patch=only_removes), PY)
    assert rej.reason.startswith("test patch only removes lines")
    assert not isinstance(make_candidate(_raw(calc, patch=gold, test_patch=test), PY), Rejection)


# ---------------------------------------------------------------- statements from history, names from origin


SQUASHED = """Fix subtract returning the wrong sign (#123)

subtract(5, 3) returned -2 instead of 2: the operands were swapped.

* Fix subtract returning the wrong sign

* Add changelog

* fix typo
in the docstring

* Merge branch 'main' into fix-subtract

---------

Co-authored-by: Ada <ada@example.com>
Signed-off-by: Dev <dev@example.com>"""


def test_squash_merge_noise_is_cleaned_from_commit_messages():
    assert clean_commit_message(SQUASHED) == ("Fix subtract returning the wrong sign\n\n"
                                              "subtract(5, 3) returned -2 instead of 2: the operands were swapped.")
    plain = "Add power()\n\nWhat changed:\n* power(a, n) for integer n\n\nReviewed-by: Bo <b@x>"
    assert clean_commit_message(plain) == "Add power()\n\nWhat changed:\n* power(a, n) for integer n"
    assert issue_text({"title": "subtract is wrong", "body": "<!-- Describe the bug -->\n5 - 3 gives -2"}) == \
        "subtract is wrong\n5 - 3 gives -2"


@pytest.mark.parametrize("url, name", [
    ("git@github.com:acme/calc.git", "acme/calc"), ("https://github.com/acme/calc", "acme/calc"),
    ("https://github.com/acme/calc.git/", "acme/calc"), ("ssh://git@github.com/acme/calc.git", "acme/calc"),
    ("https://oauth2:tok@gitlab.example.com/group/acme/calc.git", "acme/calc"),
    ("ssh://git@gitlab.example.com:2222/acme/calc.git", "acme/calc"),
    ("/srv/git/calc.git", None), ("file:///srv/git/calc.git", None), ("../calc", None),
    ("https://github.com/calc", None),
])
def test_remote_urls_give_owner_and_name(url, name):
    assert remote_repo(url) == name


def test_local_history_is_named_by_origin_and_uses_known_issue_text(calc, tmp_path):
    root, shas = calc
    clone = tmp_path / "checkout"  # a clone in a folder named unlike the project, as on a developer's machine
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    assert LocalGitSource(clone, PY).name == "checkout"  # origin is a local path: the folder's name
    _git(clone, "remote", "set-url", "origin", "git@github.com:acme/calc.git")
    issues = {7: {"title": "subtract(5, 3) returns -2", "body": "<!-- template -->\nExpected 2: the sign is wrong."}}
    raws = {r.meta["commit"]: r for r in LocalGitSource(clone, PY, issues=issues).instances()}
    fix = raws[shas["fix"]]
    assert fix.repo == "acme/calc" and fix.instance_id == f"acme__calc-{shas['fix'][:12]}"
    assert fix.problem_statement == "subtract(5, 3) returns -2\nExpected 2: the sign is wrong."
    assert fix.meta["statement_from"] == "issue" and fix.meta["issue"] == 7
    power = raws[shas["power"]]
    assert power.meta["statement_from"] == "commit message"
    assert power.problem_statement.startswith("Add power() for integer exponents")


def test_issue_files_are_read_as_json_or_jsonl(tmp_path):
    p = tmp_path / "issues.json"
    p.write_text(json.dumps({"7": "subtract is wrong"}))
    assert load_issues(p) == {7: "subtract is wrong"}
    p.write_text('{"number": 7, "title": "t", "body": "b"}\n{"number": 9, "title": "u", "body": ""}\n')
    assert sorted(load_issues(p)) == [7, 9]
    p.write_text('{"seven": "x"}')
    with pytest.raises(EnvgenError, match="issue numbers must be integers"):
        load_issues(p)


# ---------------------------------------------------------------- the spec judge


def test_spec_replies_parse_and_a_bad_reply_is_asked_again():
    assert parse_spec_reply('<think>hmm {"score": 3}</think> ok: {"score": 1, "reason": "blanks"}') == (1, "blanks")
    with pytest.raises(ValueError, match="must be 0, 1, 2 or 3"):
        parse_spec_reply('{"score": 7}')
    assert meets("well-specified", "needs-interpretation") and not meets("underspecified", "needs-interpretation")
    with FakeLLM() as fake:
        fake.script(Reply("It seems fine."), Reply('```json\n{"score": 2, "reason": "tests check a message"}\n```'))
        judge = SpecJudge(LLMConfig(model="judge", base_url=fake.url, max_retries=0))
        got = judge.judge("t-1", "subtract is wrong", ["tests/test_core.py::test_subtract"], "diff ...")
        assert (got.label, got.score, got.attempts) == ("underspecified", 2, 2)
        assert "FAIL_TO_PASS tests" in fake.log[0].body["messages"][1]["content"]
        assert "could not be used" in fake.log[1].body["messages"][-1]["content"]
        fake.script(Reply("no"), Reply("still no"), Reply("never"))
        with pytest.raises(JudgeError, match="no usable score in 3 replies"):
            judge.judge("t-2", "x", [], "")


def _spec_responder(body):
    text = body["messages"][-1]["content"]
    if "power" in text.split("</issue>")[0]:
        return Reply('{"score": 1, "reason": "power of what for negative n is left open"}')
    return Reply('{"score": 0, "reason": "the sign and the example pin down the fix"}')


@pytest.fixture(scope="module")
def judged(tmp_path_factory, calc):
    """calc cloned under another folder name with a GitHub origin, built locally with the spec judge."""
    root, shas = calc
    work = tmp_path_factory.mktemp("judged")
    clone = work / "src"
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    _git(clone, "remote", "set-url", "origin", "https://github.com/acme/calc.git")
    fake = FakeLLM(_spec_responder)
    cfg = LLMConfig(model="judge", base_url=fake.url, max_retries=0)
    report = build_code(f"git:{clone}", work / "out", backend="local", gate=False, store=work / "s.sqlite",
                        judge_llm=cfg, min_spec="well-specified", log=lambda m: None)
    yield work, clone, shas, report, fake, cfg
    fake.close()


def test_the_spec_judge_scores_validated_tasks_and_filters_by_level(judged):
    work, _, shas, report, fake, _ = judged
    fix_id, power_id = f"acme__calc-{shas['fix'][:12]}", f"acme__calc-{shas['power'][:12]}"
    assert report.packs == [f"acme-calc-{shas['fix'][:12]}"]
    task = load(work / "out" / report.packs[0]).tasks[0]
    assert task.id == fix_id and task.meta["repo"] == "acme/calc"
    assert "in the repository acme/calc" in task.prompt[0].content
    assert task.meta["spec"]["label"] == "well-specified" and task.meta["spec"]["score"] == 0
    assert report.details["tasks"][fix_id]["spec"] == "well-specified"
    rej = next(r for r in report.rejections if r["task"] == power_id)
    assert rej["stage"] == "spec" and rej["reason"].startswith("problem statement needs-interpretation (--min-spec "
                                                               "well-specified)")
    assert report.rejected_by_reason["spec: problem statement needs-interpretation"] == 1
    # judged after validation: the judge saw each task's validated FAIL_TO_PASS tests and its test patch
    asked = [r.body["messages"][1]["content"] for r in fake.log]
    assert len(asked) == 2 and all("<test_patch>" in a for a in asked)
    assert any("tests/test_power.py::test_power" in a for a in asked)


def test_a_rerun_makes_no_model_call_for_judged_tasks(judged):
    work, clone, _, first, fake, cfg = judged
    n = len(fake.log)
    again = build_code(f"git:{clone}", work / "out", backend="local", gate=False, store=work / "s.sqlite",
                       judge_llm=cfg, min_spec="well-specified", log=lambda m: None)
    assert again.packs == first.packs and again.details["resumed"] == first.proposed
    # a new output folder redoes validation, but the judge's answers come from the store's call cache
    other = build_code(f"git:{clone}", work / "out2", backend="local", gate=False, store=work / "s.sqlite",
                       judge_llm=cfg, min_spec="well-specified", log=lambda m: None)
    assert other.packs == first.packs
    assert len(fake.log) == n


def test_min_spec_needs_a_model():
    with pytest.raises(EnvgenError, match="--min-spec needs a model"):
        build_code("git:/nonexistent", "/tmp/never", min_spec="well-specified", backend="local")


# ---------------------------------------------------------------- SWE-bench predictions and evaluation


def test_predictions_are_read_from_jsonl_json_lists_and_objects(tmp_path):
    p = tmp_path / "preds.jsonl"
    p.write_text('{"instance_id": "a", "model_patch": "d", "model_name_or_path": "m"}\n\n'
                 '{"instance_id": "b", "model_patch": null, "model_name_or_path": "m"}\n'
                 '{"instance_id": "a", "model_patch": "d2", "model_name_or_path": "m"}\n')
    got = read_predictions(p)
    assert [(x.instance_id, x.model_patch) for x in got] == [("a", "d2"), ("b", None)]  # the last one counts
    p.write_text(json.dumps([{"instance_id": "a", "model_patch": "", "model_name_or_path": "org/m"}]))
    assert read_predictions(p)[0].model_name_or_path == "org/m"
    p.write_text(json.dumps({"a": {"model_patch": "d", "model_name_or_path": "m"}}))
    assert read_predictions(p)[0].instance_id == "a"
    for bad, msg in [('{"model_patch": "d"}\n', r"preds.jsonl:1: instance_id: missing"),
                     ('{"instance_id": "a", "model_patch": 3}\n', "model_patch: expected a string"),
                     ('{"instance_id": "a"\n', r"preds.jsonl:1: invalid JSON"), ("\n", "no predictions")]:
        p.write_text(bad)
        with pytest.raises(EnvgenError, match=msg):
            read_predictions(p)


def test_eval_swebench_local_grades_every_kind_of_prediction(judged, tmp_path):
    work, _, shas, report, _, _ = judged
    pack = load(work / "out" / report.packs[0])
    iid = pack.tasks[0].id
    gold = pack.tasks[0].reference.patch
    wrong = gold.replace("return a - b", "return a - b + 0 * 1 - 0 if False else b - a")
    preds = [{"instance_id": iid, "model_patch": gold, "model_name_or_path": "org/gold"},
             {"instance_id": f"acme__calc-{shas['power'][:12]}", "model_patch": gold,
              "model_name_or_path": "org/gold"},
             {"instance_id": iid, "model_patch": "", "model_name_or_path": "empty"},
             {"instance_id": iid, "model_patch": "not a diff at all\n", "model_name_or_path": "garbled"},
             {"instance_id": iid, "model_patch": gold.replace("-    return b - a", "-    return b - a + 1"),
              "model_name_or_path": "stale"},
             {"instance_id": iid, "model_patch": wrong, "model_name_or_path": "wrong"}]
    src = tmp_path / "preds.jsonl"
    src.write_text("".join(json.dumps(p) + "\n" for p in preds))
    res = CliRunner().invoke(app, ["eval", "swebench", "--sandbox", "local", "--predictions", str(src),
                                   str(work / "out"), "--out", str(tmp_path / "eval"), "--run-id", "r1", "--json"])
    assert res.exit_code == 0, res.output
    reports = {r["model_name_or_path"]: r for r in json.loads(res.stdout)}
    g = reports["org/gold"]
    assert (g["total_instances"], g["submitted_instances"], g["completed_instances"], g["resolved_ids"]) == \
        (1, 1, 1, [iid])
    assert g["unknown_ids"] == [f"acme__calc-{shas['power'][:12]}"] and g["schema_version"] == 2
    on_disk = json.loads((tmp_path / "eval" / "org__gold.r1.json").read_text())
    assert {k: v for k, v in g.items() if k not in ("instances", "report_file")} == on_disk
    per = json.loads((tmp_path / "eval" / "logs" / "run_evaluation" / "r1" / "org__gold" / iid / "report.json")
                     .read_text())[iid]
    assert per["resolved"] and per["patch_successfully_applied"]
    assert per["tests_status"]["FAIL_TO_PASS"] == {"success": ["tests/test_core.py::test_subtract"], "failure": []}
    assert per["tests_status"]["PASS_TO_PASS"]["failure"] == []
    assert reports["empty"]["empty_patch_ids"] == [iid] and reports["empty"]["completed_instances"] == 0
    for model in ("garbled", "stale"):
        r = reports[model]
        assert r["error_ids"] == [iid] and r["completed_instances"] == 0, r
        assert r["instances"][iid]["reason"].startswith("the patch was refused")
    w = reports["wrong"]
    assert w["unresolved_ids"] == [iid] and w["resolved_instances"] == 0
    assert w["instances"][iid]["tests_status"]["FAIL_TO_PASS"]["failure"] == ["tests/test_core.py::test_subtract"]
    assert "--sandbox local runs the tests with this machine's Python" in res.stderr


def test_eval_keeps_the_pass_at_k_command_as_its_default(judged):
    work, _, _, report, _, _ = judged
    res = CliRunner().invoke(app, ["eval", str(work / "out" / report.packs[0]), "--policy", "oracle", "--sample", "1",
                                   "--k", "1", "--store", str(work / "eval.sqlite"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["policies"]["oracle"]["pass@1"] == 1.0


# ---------------------------------------------------------------- export round trip


def test_a_swebench_file_round_trips_field_by_field(calc, tmp_path):
    root, shas = calc
    gold, test, _, _ = split_patch(diff(root, shas["initial"], shas["fix"]), PY)
    row = {"repo": "acme/calc", "instance_id": "acme__calc-2", "base_commit": shas["initial"], "patch": gold,
           "test_patch": test, "problem_statement": "\nsubtract(5, 3) returns -2\n\nExpected 2.  \n",
           "hints_text": "The operands look swapped.\n", "created_at": "2024-01-02T12:00:00Z", "version": "0.1",
           "FAIL_TO_PASS": json.dumps(["tests/test_core.py::test_subtract"]),
           "PASS_TO_PASS": json.dumps(["tests/test_core.py::test_add", "tests/test_core.py::test_divide",
                                       "tests/test_core.py::test_multiply_int"]),
           "environment_setup_commit": shas["initial"], "difficulty": "<15 min fix", "license": "MIT"}
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(row) + "\n")
    report = build_code(f"swebench:{src}", tmp_path / "out", repo_path=root, backend="local", gate=False,
                        store=tmp_path / "s.sqlite", log=lambda m: None)
    assert report.kept == 1, report.rejections
    (back,) = export_swebench(tmp_path / "out", tmp_path / "back.jsonl")
    # the record's fields, and envgen's own ids beside the harness's (here the same: no id has a space)
    assert set(back) == set(row) | {"envgen_FAIL_TO_PASS", "envgen_PASS_TO_PASS"}
    for key, value in row.items():
        assert back[key] == value, key
    assert back["envgen_FAIL_TO_PASS"] == row["FAIL_TO_PASS"] and back["envgen_PASS_TO_PASS"] == row["PASS_TO_PASS"]
    assert json.loads((tmp_path / "back.jsonl").read_text()) == back
