"""The verifier kit, called as the runtime calls it (in-process here: it is plain stdlib code)."""

from __future__ import annotations

import sqlite3
import sys

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import verify  # noqa: E402
from envgen_verifiers.answer import normalize  # noqa: E402


def answer(expected, got, **kw):
    return verify({"kind": "answer", "args": {"expected": expected, **kw}}, answer=got, calls=[], work_dir=".",
                  hidden_dir=None)["reward"]


def test_normalised_exact():
    assert normalize("  The  Eiffel-Tower!! ") == "eiffel-tower"
    assert answer("Eiffel Tower", "the eiffel tower.") == 1.0
    assert answer("Eiffel Tower", "Tour Eiffel") == 0.0
    assert answer("Eiffel Tower", "Tour Eiffel", aliases=["tour eiffel"]) == 1.0
    assert answer("x", "   ") == 0.0


def test_numeric_with_tolerance():
    assert answer(1234.5, "The total is 1,234.50 EUR") == 1.0
    assert answer(1234.5, "1234.6") == 0.0
    assert answer(100, "about 101", rel_tol=0.02) == 1.0
    assert answer(3, "I think 5, no wait, 3") == 1.0


def test_math_equivalence():
    assert answer("1/2", "0.5", mode="math") == 1.0
    assert answer("\\frac{\\sqrt{8}}{2}", "$\\sqrt{2}$", mode="math") == 1.0
    assert answer("x^2+2x+1", "(x+1)^2", mode="math") == 1.0
    assert answer("1/3", "0.5", mode="math") == 0.0


def test_state_checks(tmp_path):
    db = tmp_path / "state.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE t (a, b); INSERT INTO t VALUES (1, 'x'), (2, 'y');")
    con.commit()
    spec = {"kind": "state", "args": {"db": "state.db", "checks": [
        {"query": "SELECT a, b FROM t", "expected": [[2, "y"], [1, "x"]]},
        {"query": "SELECT count(*) FROM t WHERE b = ?", "params": ["x"], "expected": [[1]]}]}}
    assert verify(spec, answer="", calls=[], work_dir=str(tmp_path), hidden_dir=None)["reward"] == 1.0
    spec["args"]["checks"][0]["ordered"] = True
    out = verify(spec, answer="", calls=[], work_dir=str(tmp_path), hidden_dir=None)
    assert out["reward"] == 0.0 and out["details"]["passed"] == 1
    spec["args"]["partial"] = True
    assert verify(spec, answer="", calls=[], work_dir=str(tmp_path), hidden_dir=None)["reward"] == 0.5


def test_program_verifier_gets_declared_arguments(tmp_path):
    (tmp_path / "verify.py").write_text(
        "def verify(answer, params):\n    return answer.strip() == params['want'], {'len': len(answer)}\n"
        "def reward_half():\n    return 0.5\n"
        "def bad():\n    return float('nan')\n")
    spec = {"kind": "program", "args": {"params": {"want": "ok"}}}
    out = verify(spec, answer=" ok ", calls=[], work_dir=str(tmp_path), hidden_dir=str(tmp_path))
    assert out == {"reward": 1.0, "details": {"len": 4}}
    spec["args"]["function"] = "reward_half"
    assert verify(spec, answer="", calls=[], work_dir=".", hidden_dir=str(tmp_path))["reward"] == 0.5
    spec["args"]["function"] = "bad"
    with pytest.raises(ValueError, match="non-finite"):
        verify(spec, answer="", calls=[], work_dir=".", hidden_dir=str(tmp_path))


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown verifier kind"):
        verify({"kind": "vibes"}, answer="", calls=[], work_dir=".", hidden_dir=None)
