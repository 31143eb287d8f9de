"""The verifier kit, called as the runtime calls it (in-process here: it is plain stdlib code)."""

from __future__ import annotations

import sqlite3
import sys

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import verify  # noqa: E402
from envgen_verifiers.answer import normalize  # noqa: E402


def answer(expected, got, *, prompt: str = "", calls=(), hidden_dir=None, **kw):
    return verify({"kind": "answer", "args": {"expected": expected, **kw}}, answer=got, calls=list(calls),
                  work_dir=".", hidden_dir=hidden_dir, prompt=[{"role": "user", "content": prompt}])["reward"]


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
    assert answer(3, "I think 5, no wait, 3") == 0.0  # two numbers: a hedge, whatever the order


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


# ----------------------------------------------------------------------------- one final answer (issue 12, class 7)


def test_exactly_one_answer_line_is_graded():
    """A later "Answer:" line must not override an earlier one, nor a hedge hide after the line."""
    line = {"extract": "answer-line"}
    assert answer(54420, "Answer: 276990\nAnswer: 54420", **line) == 0.0
    assert answer(54420, "Answer: 54420\nAnswer: 276990", **line) == 0.0
    assert answer("Lima", "**Answer:** Quito\n**Final answer:** Lima", **line) == 0.0
    assert answer(54420, "Answer: 54420\n...so, to repeat:\nAnswer: 54,420\nHope this helps.", **line) == 1.0
    assert answer(54420, "Answer: 54420\nAnswer: 54420\n(or 276990)", **line) == 0.0
    assert answer("Montevideo", "Answer: Montevideo\n(or Buenos Aires if that fails)", **line) == 0.0
    assert answer(5, "\\boxed{4} or \\boxed{5}", **line) == 0.0
    assert answer(5, "Reasoning: A has 2 and B 3.\nAnswer: 5", **line) == 1.0  # numbers before the line are work


def test_numeric_answers_hold_exactly_one_number():
    assert answer(54420, "Answer: 54420 or 276990", extract="answer-line") == 0.0
    assert answer(54420, "between 54,420 and 276,990") == 0.0
    assert answer(54420, "54420-276990") == 0.0
    assert answer(54420, "54420\u2013276990") == 0.0  # an en dash range
    assert answer(500, "Its entry fee is one of: 0 1 2 ... 500") == 0.0
    assert answer(54420, "54420 (maybe 54421)") == 0.0
    for written in ("54,420", "54.420", "54 420", "54\u202f420", "54420 inhabitants", "\uff15\uff14\uff14\uff12\uff10"):
        assert answer(54420, f"Answer: {written}", extract="answer-line") == 1.0, written
    assert answer(-3, "Answer: \u22123", extract="answer-line") == 1.0  # a Unicode minus sign


def test_numbers_restated_from_the_prompt_are_not_candidates():
    ask = "Town A has 10,250 inhabitants and town B has 7,000. How many more does A have?"
    assert answer(3250, "10,250 - 7,000 = 3,250", prompt=ask) == 1.0
    assert answer(3250, "3,250 or 3,251", prompt=ask) == 0.0
    # the expected value is itself in the prompt: restating the others is offering them
    ask = "Which is larger, 10,250 or 7,000?"
    assert answer(10250, "10,250", prompt=ask) == 1.0
    assert answer(10250, "10,250 or 7,000", prompt=ask) == 0.0


def test_names_natural_phrasing_but_no_second_candidate():
    cities = ["Buenos Aires", "Lima", "Guatemala City", "Asunción"]
    assert answer("Montevideo", "The capital is Montevideo.", candidates=cities) == 1.0
    assert answer("Montevideo", "It is Montevideo, on the Río de la Plata.", candidates=cities) == 1.0
    assert answer("Montevideo", "the capital is MONTEVIDEO", candidates=cities) == 1.0
    for hedge in ("Montevideo or Buenos Aires", "either Buenos Aires or Montevideo", "Montevideo/Buenos Aires",
                  "Montevideo, Buenos Aires, Lima", "montevideo buenos aires lima", "Montevideo (else Asuncion)",
                  "one of Montevideo", "Montevideo oder Lima", "Montevideo ou Lima", "Montevideo-x"):
        assert answer("Montevideo", hedge, candidates=cities, accents=False) == 0.0, hedge
    # leftmost-longest: "Guatemala City" is another name, not the expected "Guatemala" with a word after it
    assert answer("Guatemala", "Guatemala City", candidates=cities) == 0.0
    # a name the question itself mentions is a restatement, not a second answer
    ask = "Which city is nearest to Lima?"
    assert answer("Montevideo", "The city nearest to Lima is Montevideo.", prompt=ask, candidates=cities) == 1.0
    assert answer("Montevideo", "Montevideo, or maybe Lima", prompt=ask, candidates=cities) == 0.0  # "or" still is
    # ... unless the expected name is in the question too: then the others are the choices offered
    ask = "Which has more inhabitants, Lima or Montevideo?"
    assert answer("Lima", "Lima", prompt=ask, candidates=cities) == 1.0
    assert answer("Lima", "Lima has more than Montevideo", prompt=ask, candidates=cities + ["Montevideo"]) == 0.0


def test_names_without_candidates_fall_back_to_capitalised_words():
    """With no list of names, a capitalised word outside the prompt, or a list around the name, is a second one."""
    assert answer("Montevideo", "The capital is Montevideo.") == 1.0
    assert answer("Montevideo", "Montevideo, the capital.") == 1.0
    assert answer("Montevideo", "Montevideo, Buenos Aires") == 0.0
    assert answer("Montevideo", "montevideo, buenos aires") == 0.0
    assert answer("Montevideo", "Probably Montevideo but Asunción is close") == 0.0
    assert answer("Montevideo", "Montevideo " + "and then some more words that pad it out a lot " * 2) == 0.0


def test_aliases_and_candidates_from_a_hidden_file(tmp_path):
    (tmp_path / "names").mkdir()
    (tmp_path / "names" / "city.txt").write_text("# city names\nDurban\nDurbana\nQacha’s Nek\nLima\n", encoding="utf-8")
    spec = dict(aliases=["Durbana"], candidates="names/city.txt", accents=False, extract="answer-line")
    assert answer("Durban", "Answer: Durbana", hidden_dir=str(tmp_path), **spec) == 1.0
    assert answer("Durban", "Answer: Durban or Qacha's Nek", hidden_dir=str(tmp_path), **spec) == 0.0
    assert answer("Durban", "Answer: Durban (Qachas Nek is close)", hidden_dir=str(tmp_path), **spec) == 0.0
    assert answer("Qacha’s Nek", "Answer: qacha's nek", hidden_dir=str(tmp_path), **spec) == 1.0
    with pytest.raises(ValueError, match="leaves hidden"):
        answer("Durban", "Durban", hidden_dir=str(tmp_path), candidates="../city.txt")
    with pytest.raises(ValueError, match="no hidden"):
        answer("Durban", "Durban", candidates="names/city.txt")


def test_rubric_passes_candidates_and_prompt_to_its_answer_check(tmp_path):
    (tmp_path / "names.txt").write_text("Lima\nQuito\n")
    spec = {"kind": "rubric", "args": {"criteria": [{"id": "c1", "text": "Names Lima", "weight": 1}],
                                       "answer": {"expected": "Lima", "candidates": "names.txt",
                                                  "extract": "answer-line"}}}

    def run(text):
        return verify(spec, answer=text, calls=[], work_dir=".", hidden_dir=str(tmp_path),
                      prompt=[{"role": "user", "content": "Is it Quito?"}])["reward"]

    assert run("Answer: It is Lima, not Quito.") == 1.0  # Quito is the question's word
    assert run("Answer: Lima or Quito") == 0.0


def test_evidence_must_come_from_a_tool_result():
    """An answer recalled without the lookup scores 0 where the task names the facts it rests on."""
    page = '{"text": "Qacha\\u2019s Nek has a population of 25,573."}'  # JSON-escaped, as a tool may return it
    ok = [{"tool": "open", "args": {}, "ok": True, "content": page}]
    failed = [{"tool": "open", "args": {}, "ok": False, "content": "population of 25,573"}]
    spec = dict(evidence=["Qacha’s Nek", "25,573"])
    assert answer(25573, "25,573", calls=ok, **spec) == 1.0
    assert answer(25573, "25,573", calls=[], **spec) == 0.0
    assert answer(25573, "25,573", calls=failed, **spec) == 0.0
    assert answer(25574, "25,573", calls=ok, **spec) == 0.0


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown verifier kind"):
        verify({"kind": "vibes"}, answer="", calls=[], work_dir=".", hidden_dir=None)
