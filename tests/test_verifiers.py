"""The verifier kit, called as the runtime calls it (in-process here: it is plain stdlib code)."""

from __future__ import annotations

import json
import shutil
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


def _db(path, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(script)
    con.commit()
    con.close()


def _pair(tmp_path, script: str) -> tuple:
    """A pristine db (env/state.db) and a copy in the work dir (work/state.db), as a sandbox episode starts."""
    env, work = tmp_path / "env", tmp_path / "work"
    _db(env / "state.db", script)
    work.mkdir()
    shutil.copyfile(env / "state.db", work / "state.db")
    return env, work


def test_state_checks_sit_on_the_whole_database_check(tmp_path):
    env, work = _pair(tmp_path, "CREATE TABLE t (a INTEGER PRIMARY KEY, b); INSERT INTO t VALUES (1, 'x'), (2, 'y');")
    _db(work / "state.db", "UPDATE t SET b = 'z' WHERE a = 2;")
    spec = {"kind": "state", "args": {"db": "state.db", "checks": [
        {"query": "SELECT a, b FROM t", "expected": [[2, "z"], [1, "x"]]},
        {"query": "SELECT count(*) FROM t WHERE b = ?", "params": ["x"], "expected": [[1]]}]}}
    def run() -> dict:
        return verify(spec, answer="", calls=[], work_dir=str(work), hidden_dir=None, env_dir=str(env))

    # no recorded expectation: never passes by default, and says why
    out = run()
    assert out["reward"] == 0.0 and "no expected change set" in out["details"]["reason"]
    spec["args"]["changes"] = {"expected": out["details"]["changes"]["actual"]}
    assert run()["reward"] == 1.0
    spec["args"]["checks"][0]["ordered"] = True
    out = run()
    assert out["reward"] == 0.0 and out["details"]["passed"] == 1
    spec["args"]["partial"] = True
    assert run()["reward"] == 0.5
    # a write the task did not make: 0 whatever the checks say, naming the row
    _db(work / "state.db", "UPDATE t SET b = 'w' WHERE a = 1;")
    spec["args"]["checks"] = []
    out = run()
    assert out["reward"] == 0.0
    assert out["details"]["changes"]["differences"] == ['t a=1: changed (b="x" -> b="w"), the task does not change it']


MESSY = """
CREATE TABLE kv (k TEXT PRIMARY KEY, v) WITHOUT ROWID;
CREATE TABLE pairs (a INTEGER, b TEXT, w REAL, PRIMARY KEY (a, b));
CREATE TABLE log (msg TEXT, at REAL);
CREATE TABLE items (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT, data BLOB, updated_at TEXT);
CREATE TABLE loose (code TEXT PRIMARY KEY, n INTEGER);
CREATE VIRTUAL TABLE docs USING fts5(body);
INSERT INTO kv VALUES ('a', 1), ('b', NULL), ('c', x'00ff');
INSERT INTO pairs VALUES (1, 'x', 0.1), (1, 'y', NULL), (2, 'x', -0.0);
INSERT INTO log VALUES ('hi', 1.5), ('hi', 1.5), (NULL, NULL);
INSERT INTO items (name, data, updated_at) VALUES ('one', x'00ff', 't0'), ('two', NULL, 't0');
INSERT INTO loose VALUES (NULL, 1), (NULL, 2), ('k', 3);
INSERT INTO docs VALUES ('hello world');
"""


def test_change_set_of_messy_shapes(tmp_path):
    from envgen_verifiers.state import changeset, digest

    env, work = _pair(tmp_path, MESSY)
    before, after = str(env / "state.db"), str(work / "state.db")
    assert changeset(before, after) == {"schema": [], "tables": {}}
    _db(work / "state.db", """
        UPDATE kv SET v = '1' WHERE k = 'a';                       -- text '1' is not integer 1
        UPDATE kv SET v = x'00fe' WHERE k = 'c';                   -- blobs compare by bytes
        UPDATE pairs SET w = 0.30000000000000004 WHERE b = 'x' AND a = 1;
        UPDATE pairs SET w = 0 WHERE a = 2;                        -- -0.0 -> 0: no change
        DELETE FROM log WHERE rowid = 1;                           -- one of two equal rows (no key: a multiset)
        INSERT INTO items (name, data, updated_at) VALUES ('three', x'01', 't1');
        UPDATE loose SET n = 20 WHERE n = 2;                       -- NULL keys: the table is a multiset
        INSERT INTO docs VALUES ('more');
        CREATE VIEW v AS SELECT * FROM kv;
        CREATE TRIGGER tr AFTER INSERT ON kv BEGIN SELECT 1; END;
        PRAGMA user_version = 7;
    """)
    cs = changeset(before, after)
    assert [o["object"] for o in cs["schema"]] == ["trigger tr", "view v", "pragma user_version"]
    assert cs["schema"][1] == {"object": "view v", "before": None, "after": "CREATE VIEW v AS SELECT * FROM kv"}
    t = cs["tables"]
    assert set(t) == {"kv", "pairs", "log", "items", "loose", "docs"}
    assert t["kv"]["changed"] == [{"key": ["a"], "before": {"v": 1}, "after": {"v": "1"}},
                                  {"key": ["c"], "before": {"v": {"blob": "00ff"}}, "after": {"v": {"blob": "00fe"}}}]
    assert t["pairs"] == {"key": ["a", "b"], "added": [], "removed": [],
                          "changed": [{"key": [1, "x"], "before": {"w": 0.1}, "after": {"w": 0.3}}]}
    assert t["log"] == {"key": [], "added": [], "removed": [{"at": 1.5, "msg": "hi"}], "changed": []}
    # the id the database assigned is not part of an added row
    assert t["items"]["added"] == [{"data": {"blob": "01"}, "name": "three", "updated_at": "t1"}]
    assert t["loose"]["added"] == [{"code": None, "n": 20}] and t["loose"]["removed"] == [{"code": None, "n": 2}]
    assert t["docs"]["added"] == [{"body": "more"}]
    assert digest(json.loads(json.dumps(cs))) == digest(cs)  # survives tasks.jsonl

    # volatile columns and tables are ignored by pattern
    _db(work / "state.db", "UPDATE items SET updated_at = 't9' WHERE id = 1;")
    ignored = changeset(before, after, ignore=["*.UPDATED_AT", "log.*"])
    assert "log" not in ignored["tables"] and ignored["tables"]["items"]["changed"] == []
    assert changeset(before, after)["tables"]["items"]["changed"][0]["key"] == [1]
    # text that is not UTF-8 (a tool wrote raw bytes as TEXT) is still read and compared
    _db(work / "state.db", "INSERT INTO log VALUES (CAST(x'ff41' AS TEXT), 2);")
    assert {"at": 2, "msg": "\\xffA"} in changeset(before, after)["tables"]["log"]["added"]


def test_net_change_only_and_insert_order(tmp_path):
    from envgen_verifiers.state import changeset

    env, work = _pair(tmp_path, MESSY)
    before, after = str(env / "state.db"), str(work / "state.db")
    # touched then restored: a row updated and put back, a row deleted and re-inserted with its key
    _db(work / "state.db", """
        UPDATE kv SET v = 99 WHERE k = 'a'; UPDATE kv SET v = 1 WHERE k = 'a';
        DELETE FROM pairs WHERE a = 1 AND b = 'y'; INSERT INTO pairs VALUES (1, 'y', NULL);
        INSERT INTO items (name) VALUES ('tmp'); DELETE FROM items WHERE name = 'tmp';   -- bumps sqlite_sequence
        VACUUM;
    """)
    assert changeset(before, after) == {"schema": [], "tables": {}}
    # the same two inserts in either order are the same change, though their ids differ
    one, two = tmp_path / "one", tmp_path / "two"
    for d, order in ((one, ("a", "b")), (two, ("b", "a"))):
        d.mkdir()
        shutil.copyfile(env / "state.db", d / "state.db")
        _db(d / "state.db", "".join(f"INSERT INTO items (name) VALUES ('{n}');" for n in order))
    assert changeset(before, str(one / "state.db")) == changeset(before, str(two / "state.db"))
    assert len(changeset(before, str(one / "state.db"))["tables"]["items"]["added"]) == 2


def test_a_case_change_under_a_nocase_collation_is_a_change(tmp_path):
    from envgen_verifiers.state import changeset

    env, work = _pair(tmp_path, "CREATE TABLE u (id INTEGER PRIMARY KEY, name TEXT COLLATE NOCASE);"
                                "INSERT INTO u VALUES (1, 'smith'), (2, 'Jones');")
    _db(work / "state.db", "UPDATE u SET name = 'SMITH' WHERE id = 1;")
    assert changeset(str(env / "state.db"), str(work / "state.db"))["tables"]["u"]["changed"] == [
        {"key": [1], "before": {"name": "smith"}, "after": {"name": "SMITH"}}]


def test_schema_changes_are_changes(tmp_path):
    from envgen_verifiers.state import changeset

    env, work = _pair(tmp_path, MESSY)
    _db(work / "state.db", "ALTER TABLE loose ADD COLUMN extra TEXT DEFAULT 'x'; DROP TABLE log; "
                           "CREATE INDEX ix ON kv (v); CREATE TABLE audit (id INTEGER PRIMARY KEY, what TEXT); "
                           "INSERT INTO audit (what) VALUES ('x');")
    cs = changeset(str(env / "state.db"), str(work / "state.db"))
    objects = {o["object"]: o for o in cs["schema"]}
    assert set(objects) == {"table audit", "table log", "index ix", "table loose"}
    assert objects["table log"]["after"] is None and objects["table audit"]["before"] is None
    assert len(cs["tables"]["log"]["removed"]) == 3 and cs["tables"]["audit"]["added"] == [{"what": "x"}]
    # a new column changes every row of the table (a multiset here: its key holds NULLs)
    loose = cs["tables"]["loose"]
    assert len(loose["added"]) == len(loose["removed"]) == 3 and {"code": None, "extra": "x", "n": 1} in loose["added"]


def test_whole_db_check_explains_and_fails_closed(tmp_path):
    from envgen_verifiers.state import INLINE_LIMIT, whole_db

    env, work = _pair(tmp_path, "CREATE TABLE m (id TEXT PRIMARY KEY, fines INTEGER, note TEXT);"
                                "INSERT INTO m VALUES ('M-1', 5, ''), ('M-2', 3, ''), ('M-3', 0, '');")
    def check(spec: dict) -> dict:
        return whole_db({"db": "state.db", **spec}, work_dir=str(work), env_dir=str(env))

    _db(work / "state.db", "UPDATE m SET fines = 0 WHERE id = 'M-1';")
    expected = check({})["actual"]
    assert check({"expected": expected})["ok"]
    _db(work / "state.db", "UPDATE m SET fines = 0 WHERE id = 'M-2'; INSERT INTO m VALUES ('M-4', 1, '');")
    out = check({"expected": expected})
    assert not out["ok"] and out["differences"] == [
        'm: row {"fines":1,"id":"M-4","note":""} was inserted, the task does not do that',
        'm id="M-2": changed (fines=3 -> fines=0), the task does not change it']
    assert out["reason"].startswith("the database differs from the expected end state: m: row")
    _db(work / "state.db", "DELETE FROM m WHERE id = 'M-4'; UPDATE m SET fines = 3 WHERE id = 'M-2';"
                           "UPDATE m SET fines = 1 WHERE id = 'M-1';")
    assert check({"expected": expected})["differences"] == ['m id="M-1": expected fines=0, got fines=1 (was fines=5)']
    # a large change set is recorded as digest + counts, and still compared exactly
    _db(work / "state.db", f"UPDATE m SET fines = 0, note = '{'n' * INLINE_LIMIT}' WHERE id = 'M-1';")
    big = check({})
    assert set(big["actual"]) == {"digest", "summary"} and check({"expected": big["actual"]})["ok"]
    _db(work / "state.db", "UPDATE m SET note = 'other' WHERE id = 'M-3';")
    assert not check({"expected": big["actual"]})["ok"]
    # never passes by default: no expectation, no pristine db, a missing or corrupt db
    assert "no expected change set" in check({})["error"] and not check({})["ok"]
    assert not whole_db({"db": "state.db", "expected": expected}, work_dir=str(work), env_dir=None)["ok"]
    (work / "state.db").write_bytes(b"SQLite format 3\x00" + b"garbage" * 100)
    assert "cannot be read" in check({"expected": expected})["error"]
    (work / "state.db").unlink()
    assert "missing" in check({"expected": expected})["error"]
    with pytest.raises(ValueError, match="leaves the"):
        check({"db": "../env/state.db"})


def test_program_verifier_gets_the_pristine_db_and_the_whole_db_check(tmp_path):
    env, work = _pair(tmp_path, "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO t VALUES (1, 'a');")
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "verify.py").write_text(
        "def verify(ctx):\n"
        "    was = ctx.pristine('state.db').execute('SELECT v FROM t WHERE id = 1').fetchone()[0]\n"
        "    now = ctx.db('state.db').execute('SELECT v FROM t WHERE id = 1').fetchone()[0]\n"
        "    return now == 'b', {'was': was, 'tables': sorted(ctx.changes('state.db')['tables'])}\n")
    spec = {"kind": "program", "args": {"changes": {"db": "state.db"}}}
    def run() -> dict:
        return verify(spec, answer="", calls=[], work_dir=str(work), hidden_dir=str(hidden), env_dir=str(env))

    _db(work / "state.db", "UPDATE t SET v = 'b';")
    out = run()
    assert out["reward"] == 0.0 and out["details"]["was"] == "a" and out["details"]["tables"] == ["t"]
    spec["args"]["changes"]["expected"] = out["details"]["changes"]["actual"]
    assert run()["reward"] == 1.0
    _db(work / "state.db", "INSERT INTO t (v) VALUES ('extra');")
    out = run()
    assert out["reward"] == 0.0 and out["details"]["reason"].startswith("the database differs")
    # report-only: the change set is measured, the function's reward stands
    spec["args"]["changes"] = {"db": "state.db", "report": True}
    out = run()
    assert out["reward"] == 1.0 and out["details"]["changes"]["summary"]["tables"]["t"] == {
        "added": 1, "removed": 0, "changed": 1}


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


def test_program_verifier_sees_the_prompt(tmp_path):
    """A program verifier may set aside what the question itself says (numbers it restates)."""
    (tmp_path / "verify.py").write_text(
        "def verify(answer, prompt):\n"
        "    asked = prompt[-1]['content']\n"
        "    return [w for w in answer.split() if w.isdigit() and w not in asked] == ['42']\n")
    spec = {"kind": "program", "args": {}}
    prompt = [{"role": "user", "content": "Of the 7 boxes, how many hold 6 apples?"}]
    run = lambda a: verify(spec, answer=a, calls=[], work_dir=".", hidden_dir=str(tmp_path), prompt=prompt)["reward"]
    assert run("Of the 7 boxes, 42 hold 6 apples") == 1.0
    assert run("42 or 43") == 0.0


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
