"""Breaking collection does not make tests "not count": a submission that leaves a FAIL_TO_PASS file
unable to collect (its folder's conftest does not import) gets the session rerun file by file, the
broken file's tests are missing from the report, and missing means failed: reward 0. Local sandbox."""

from __future__ import annotations

import pytest
from code_repo import make_meter_repo

from envgen.episodes.episode import Episode
from envgen.families.code import build_code
from envgen.pack import load
from envgen.sandbox import open_sandbox

SUBTRACT_ONLY = """diff --git a/src/meter/core.py b/src/meter/core.py
--- a/src/meter/core.py
+++ b/src/meter/core.py
@@ -6,7 +6,7 @@ def add(a, b):
 
 
 def subtract(a, b):
-    return b - a
+    return a - b
 
 
 def halve(x):
"""

BREAK_IMPORT = SUBTRACT_ONLY.replace("+    return a - b\n", "+    return a - b\n+\n+\n+power = None\n+del power\n") \
    .replace("@@ -6,7 +6,7 @@", "@@ -6,7 +6,11 @@")


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("meter-adv")
    make_meter_repo(root / "meter")
    report = build_code(f"git:{root / 'meter'}", root / "out", backend="local", store=root / "s.sqlite", gate=False,
                        runs=1, log=lambda m: None)
    return load(root / "out" / report.packs[0])


@pytest.mark.parametrize("patch", [SUBTRACT_ONLY, BREAK_IMPORT], ids=["fix-one-break-collection", "shadow-name"])
def test_a_file_that_does_not_collect_scores_zero(pack, patch):
    task = pack.tasks[0]
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, task)
        assert ep.call("submit", {"patch": patch}).ok
        verdict = ep.finish("done")
    assert verdict.reward == 0.0, verdict.details
    assert verdict.details["FAIL_TO_PASS"] == "1/3" and verdict.details["PASS_TO_PASS"] == "2/2"
    assert "tests/extra/test_power.py::test_power" in verdict.details["failed"]


def test_the_gold_patch_still_scores_one(pack):
    task = pack.tasks[0]
    with open_sandbox(pack, "local") as sbx:
        ep = Episode(sbx, task)
        assert ep.call("submit", {"patch": task.reference.patch}).ok
        verdict = ep.finish("done")
    assert verdict.reward == 1.0, verdict.details
