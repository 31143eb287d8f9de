"""The gate knows the built-in procedure kinds (issue 29, item 5): a silent but correct hand-off graded by
``transferred`` is kept (a hand-written part is probed as grading words, so the same task graded by a
program is "fooled" by the empty answer), and the ``blanket-consent`` forgery probe (every question and one
pre-emptive "Shall I proceed with whatever is needed?" up front, then the writes undescribed) scores 0 on
tasks with a ``confirmed`` part, and drops a task where that part weighs too little to matter.

Replayed on a real local sandbox over the small shop of ``test_gate_shapes`` plus a hand-off tool.
"""

from __future__ import annotations

import sqlite3
import textwrap

import pytest

from envgen.build.gate import BLANKET, blanket_consent
from envgen.build.offline import record_and_gate
from envgen.pack import format as packmod
from envgen.sandbox.local import describe_tools

from test_gate_shapes import ASK, DB, OPENING, REFUND, STATE, TOOLS, USER, _task

HAND_OFF = '''

def transfer_to_human(order_id: str, summary: str) -> str:
    """Hand the conversation over to a human agent.

    Args:
        order_id: the order it is about
        summary: what the human needs to know
    """
    return "Transfer successful"
'''

CHECKS = '''

def handed_off(calls):
    return float(any(c["tool"] == "transfer_to_human" and c["ok"] for c in calls))
'''

CONFIRMED = {"kind": "confirmed", "args": {"writes": {"refund": ["order_id", "method"]}}}
HANDOFF = [{"tool": "get_order", "args": {"order_id": "O-101"}},
           {"tool": "transfer_to_human", "args": {"order_id": "O-101", "summary": "refund above my limit"}}]
NOTHING = {"kind": "no_write", "args": {"db": DB}}
CONSENT_USER = {**USER, "facts": [*USER["facts"], {"name": "confirmation", "value": "yes",
                                                   "ask": r"proceed|go ahead|confirm|shall i|should i",
                                                   "reply": "Yes, please go ahead."}]}
DESCRIBED = [*ASK, {"after": 1, "content": "I will refund order O-101 in full to your card. Shall I proceed?"}]

TASKS = {
    # a hand-off and nothing said: right, and graded so (the confirmed part has no write to judge)
    "silent-transfer": dict(verifier={"kind": "composite", "args": {"parts": [
        NOTHING, {"kind": "transferred", "args": {"tool": "transfer_to_human", "args": {"order_id": "O-101"}}},
        CONFIRMED]}}, calls=HANDOFF, answer=""),
    # the same, graded by a hand-written part: it may grade words, so the empty answer "fools" it
    "silent-transfer-program": dict(verifier={"kind": "composite", "args": {"parts": [
        NOTHING, {"kind": "program", "args": {"file": "checks.py", "function": "handed_off"}}]}},
        calls=HANDOFF, answer=""),
    # a refund described and agreed to
    "confirmed": dict(verifier={"kind": "composite", "args": {"parts": [STATE, CONFIRMED]}}, calls=REFUND,
                      answer="Your order O-101 is refunded to your card.", prompt=OPENING, user=CONSENT_USER,
                      reference={"messages": DESCRIBED}),
    # the consent counts for too little: the end state alone passes the threshold, so the blanket yes buys it
    "confirmed-light": dict(verifier={"kind": "composite", "args": {"mode": "weighted", "threshold": 0.7, "parts": [
        {**STATE, "weight": 3}, {**CONFIRMED, "weight": 1}]}}, calls=REFUND,
        answer="Your order O-101 is refunded to your card.", prompt=OPENING, user=CONSENT_USER,
        reference={"messages": DESCRIBED}),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate-procedure")
    src = root / "src"
    (src / "env" / "state").mkdir(parents=True)
    (src / "hidden").mkdir()
    (src / "env" / "tools.py").write_text(textwrap.dedent(TOOLS) + HAND_OFF)
    (src / "hidden" / "checks.py").write_text(CHECKS)
    con = sqlite3.connect(src / "env" / "state" / "shop.db")
    con.executescript("CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT, total REAL, note TEXT);"
                      "CREATE TABLE refunds (id INTEGER PRIMARY KEY, order_id TEXT, amount REAL, method TEXT);"
                      "INSERT INTO orders VALUES ('O-101', 'delivered', 54.2, NULL), "
                      "('O-102', 'delivered', 12.5, NULL);")
    con.commit()
    con.close()
    tasks = [_task(tid, **spec) for tid, spec in TASKS.items()]
    manifest = packmod.Manifest(name="gate-procedure", family="test", tools=describe_tools(src / "env"),
                                limits=packmod.Limits(step_timeout_s=5, max_turns=8))
    pack = packmod.save(packmod.Pack(manifest, tasks), root / "pack", env_from=src / "env", hidden_from=src / "hidden")
    return {task.id: r for task, r in record_and_gate(pack, workers=1)}


def test_a_silent_but_correct_transfer_is_kept(results):
    r = results["silent-transfer"]
    assert r.passed, r.reason
    assert "empty" not in r.probes and r.probes["noop"] == 0.0  # no words graded; the hand-off call is needed
    assert r.not_applicable["blanket-consent"] == "the reference makes no change the confirmed part lists"


def test_a_hand_written_part_is_probed_as_grading_words(results):
    r = results["silent-transfer-program"]
    assert not r.passed and r.reason.startswith("empty scored 1"), r.reason


def test_a_described_and_agreed_change_is_kept_and_the_blanket_yes_scores_0(results):
    r = results["confirmed"]
    assert r.passed, r.reason
    assert r.probes["blanket-consent"] == 0.0 and r.probes["reference"] == 1.0


def test_a_consent_check_of_too_little_weight_is_dropped(results):
    r = results["confirmed-light"]
    assert not r.passed and r.reason.startswith("blanket-consent scored 1"), r.reason


def test_the_blanket_probe_keeps_the_questions_and_drops_every_description():
    """Pure: a description phrased as a question of its own ("Do you still want ... refunded?") goes too, so
    the one opening message never describes the write it consents to."""
    messages = [*ASK, {"after": 1, "content": "Do you still want order O-101 refunded to your card?"},
                {"after": 1, "content": "Thanks. Shall I proceed?"}]
    task = _task("blanket", {"kind": "composite", "args": {"parts": [STATE, CONFIRMED]}}, REFUND, "Done.",
                 prompt=OPENING, user=CONSENT_USER, reference={"messages": messages})
    probe = blanket_consent(task)
    assert [(m.after, m.content) for m in probe.messages] == [(0, f"{ASK[0]['content']} {BLANKET}")]
    assert probe.calls == task.reference.calls and probe.want == 0.0


def test_gates_in_threads_share_one_whole_kit(monkeypatch):
    """`envgen validate --workers N` runs gates in threads: each must see the kit's submodules (a racy load gave
    "module 'envgen_kit' has no attribute 'procedure'" on 104 of 114 imported tau2 tasks)."""
    import concurrent.futures as cf

    from envgen.build import gate, sdk

    kit_path = gate.bundled("verifiers") / "envgen_verifiers" / "__init__.py"
    monkeypatch.delitem(sdk._MODULES, kit_path.resolve(), raising=False)  # a fresh load, as in a new process
    with cf.ThreadPoolExecutor(8) as ex:
        kits = list(ex.map(lambda _: gate._kit(), range(8)))
    assert len({id(k) for k in kits}) == 1
    assert all(callable(k.procedure.describes) and callable(k.dialogue.asks_agreement) for k in kits)
