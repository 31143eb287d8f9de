"""The kit's built-in policy checks (issue 29): ``confirmed``, ``transferred`` and ``identified``, judged
through the kit's dispatch (the verifier process's code) on episodes shaped as the episode driver records
them (an assistant message and its calls share a turn; a user reply carries the turn it answers). The
attacks on them are in ``tests/adversarial/test_procedure_attacks.py``."""

from __future__ import annotations

import json
import sys

import pytest

from envgen.pack import format as packmod
from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import verify as kit_verify  # noqa: E402

ORDER = {"order_id": "W1234567", "status": "delivered",
         "payment_method": {"id": "PM-0007", "label": "Visa ending 4242"},
         "items": [{"item_id": "IT-00012", "product": "Desk Lamp", "options": {"color": "white", "finish": "matte"}},
                   {"item_id": "IT-00013", "product": "Yoga Mat", "options": {"color": "blue", "thickness": "4mm"}}]}
WRITES = {"cancel_order": ["order_id"], "return_items": ["order_id", "item_ids", "payment_method_id"],
          "modify_order_address": ["order_id", "address"], "pay": ["amount"]}
CONFIRMED = {"kind": "confirmed", "args": {"writes": WRITES}}


def episode(*steps):
    """(messages, calls) from steps: ("a", text) an assistant message, ("u", text) the user's reply to it,
    ("c", tool, args[, result]) a call of its own turn."""
    messages, calls, turn = [], [], 0
    for step in steps:
        if step[0] == "a":
            turn += 1
            messages.append({"role": "assistant", "content": step[1], "turn": turn})
        elif step[0] == "u":
            messages.append({"role": "user", "content": step[1], "turn": turn})
        else:
            turn += 1
            result = step[3] if len(step) > 3 else {"ok": True}
            calls.append({"tool": step[1], "args": step[2], "ok": True, "content": json.dumps(result), "error": None,
                          "seconds": 0.0, "turn": turn})
    return messages, calls


def run(spec, messages, calls):
    return kit_verify(spec, answer="", calls=calls, work_dir="/nonexistent", hidden_dir=None, messages=messages)


def test_a_natural_description_and_yes_confirm_the_change():
    m, c = episode(("a", "I'll cancel order #W1234567 for the reason 'no longer needed'; the refund of $54.20 goes to "
                          "your Visa. Is that OK with you?"), ("u", "Yes."),
                   ("c", "cancel_order", {"order_id": "W1234567", "reason": "no longer needed"}))
    out = run(CONFIRMED, m, c)
    assert out["reward"] == 1.0, out
    assert out["details"]["writes"] == [{"call": 0, "tool": "cancel_order", "ok": True, "described": 1, "agreed": 1}]


def test_items_and_payment_methods_are_described_by_the_names_a_tool_showed():
    steps = [("c", "get_order", {"order_id": "W1234567"}, ORDER),
             ("a", "To confirm: I will return the Desk Lamp from order W1234567, refunded to Visa ending 4242. "
                   "Would you like me to do that?"), ("u", "Sure, do it"),
             ("c", "return_items", {"order_id": "W1234567", "item_ids": ["IT-00012"], "payment_method_id": "PM-0007"})]
    assert run(CONFIRMED, *episode(*steps))["reward"] == 1.0
    # the other item named: not this call's description
    steps[1] = ("a", "I will return the Yoga Mat from order W1234567, refunded to Visa ending 4242. OK?")
    out = run(CONFIRMED, *episode(*steps))
    assert out["reward"] == 0.0 and "item_ids" in out["details"]["reason"]


def test_amounts_are_named_by_value_and_objects_by_each_value():
    m, c = episode(("a", "I'll pay the balance of $1,250.50 now. Shall I proceed?"), ("u", "Go ahead."),
                   ("c", "pay", {"amount": 1250.5}))
    assert run(CONFIRMED, m, c)["reward"] == 1.0
    address = {"street": "12 Oak Street", "city": "Austin", "state": "TX", "zip_code": "73301"}
    steps = [("a", "I will change the shipping address of order W1234567 to 12 Oak Street, Austin, TX 73301. "
                   "Does that work for you?"), ("u", "That's fine"),
             ("c", "modify_order_address", {"order_id": "W1234567", "address": address})]
    assert run(CONFIRMED, *episode(*steps))["reward"] == 1.0
    steps[0] = ("a", "I will change the shipping address of order W1234567 to 12 Oak Street, Austin, TX. OK?")
    assert run(CONFIRMED, *episode(*steps))["reward"] == 0.0  # the zip code never said


def test_each_change_needs_its_own_confirmation_after_the_previous_one():
    cancel = ("c", "cancel_order", {"order_id": "W1234567", "reason": "no longer needed"})
    m, c = episode(("a", "I'll cancel order W1234567. Is that OK?"), ("u", "Yes"), cancel, cancel)
    out = run(CONFIRMED, m, c)
    assert out["reward"] == 0.0 and out["details"]["reason"].startswith("call 1")


def test_reads_and_unlisted_tools_need_no_confirmation_and_failed_writes_change_nothing():
    m, c = episode(("c", "get_order", {"order_id": "W1234567"}, ORDER))
    c.append({"tool": "cancel_order", "args": {"order_id": "W1234567"}, "ok": False, "content": "no", "error": {},
              "turn": 2})
    assert run(CONFIRMED, m, c)["reward"] == 1.0


def test_a_call_without_a_turn_cannot_be_placed():
    m, c = episode(("a", "I'll cancel order W1234567. OK?"), ("u", "Yes"),
                   ("c", "cancel_order", {"order_id": "W1234567"}))
    c[0]["turn"] = None
    assert run(CONFIRMED, m, c)["reward"] == 0.0


def test_transferred_needs_the_hand_off_call_with_its_arguments_silent_or_not():
    spec = {"kind": "transferred", "args": {"tool": "transfer_to_human_agent", "args": {"topic": "Damaged_Item"}}}
    _, calls = episode(("c", "transfer_to_human_agent", {"order_id": "W1", "topic": "damaged_item"}))
    assert run(spec, [], calls)["reward"] == 1.0  # no message at all: still transferred
    _, other = episode(("c", "transfer_to_human_agent", {"order_id": "W1", "topic": "billing"}))
    assert run(spec, [], other)["reward"] == 0.0
    assert run(spec, [], [])["details"]["reason"] == "no successful transfer_to_human_agent call"
    calls[0]["ok"] = False
    assert run(spec, [], calls)["reward"] == 0.0


IDENT = {"kind": "identified", "args": {"auth": ["authenticate"], "access": ["get_order", "cancel_order"],
                                        "customer": "C-0001", "told": ["email", "zip_code", "order_id"]}}
AUTH = ("c", "authenticate", {"email": "ana@example.com", "zip_code": "30312"},
        {"verified": True, "customer_id": "C-0001"})


def test_identified_verifies_the_customer_first_with_what_they_told():
    told = [("a", "Your email and zip code?"), ("u", "ana@example.com, 30312"), AUTH, ("a", "Which order?"),
            ("u", "W1234567"), ("c", "get_order", {"order_id": "W1234567"}, ORDER)]
    assert run(IDENT, *episode(*told))["reward"] == 1.0
    early = [told[5], *told[:5]]
    assert "before their identity" in run(IDENT, *episode(*early))["details"]["reason"]
    guessed = told[:3] + [told[5]]
    assert "never gave" in run(IDENT, *episode(*guessed))["details"]["reason"]
    other = told[:2] + [("c", "authenticate", AUTH[2], {"verified": True, "customer_id": "C-0002"})]
    assert run(IDENT, *episode(*other))["reward"] == 0.0
    assert "never verified" in run(IDENT, *episode(*told[:2]))["details"]["reason"]


def test_identified_reads_a_bare_id_result_and_an_unverifiable_customer():
    spec = {"kind": "identified", "args": {"auth": ["find_user_id_by_email"], "access": ["get_user_details"],
                                           "customer": "sara_doe_496", "id_key": "user_id"}}
    steps = [("c", "find_user_id_by_email", {"email": "s@x.com"}, "sara_doe_496"),
             ("c", "get_user_details", {"user_id": "sara_doe_496"}, {})]
    assert run(spec, *episode(*steps))["reward"] == 1.0
    nobody = {"kind": "identified", "args": {**IDENT["args"], "customer": None}}
    failed = ("c", "authenticate", AUTH[2], {"verified": False})
    assert run(nobody, *episode(("u", "ana@example.com 30312"), failed))["reward"] == 1.0
    assert run(nobody, *episode(failed, ("c", "get_order", {"order_id": "W1"}, {})))["reward"] == 0.0


@pytest.mark.parametrize("kind, args, field", [
    ("confirmed", {}, "args.writes"),
    ("confirmed", {"writes": {"cancel_order": "order_id"}}, "args.writes.cancel_order"),
    ("confirmed", {"writes": {"cancel_order": []}, "verbs": {"refund": ["refund"]}}, "args.verbs.refund"),
    ("confirmed", {"writes": {"cancel_order": []}, "tools": []}, "unknown field(s) tools"),
    ("transferred", {"args": {}}, "args.tool"),
    ("identified", {"auth": [], "access": []}, "args.auth"),
    ("identified", {"auth": ["a"], "access": ["b"], "customer": 7}, "args.customer"),
    ("identified", {"auth": ["a"], "access": ["b"], "told": "email"}, "args.told"),
])
def test_the_pack_format_names_the_wrong_field(kind, args, field):
    with pytest.raises(ValueError, match=field.replace("(", r"\(").replace(")", r"\)")):
        packmod.Verifier(kind=kind, args=args)
    composite = {"parts": [{"kind": kind, "args": args}]}
    with pytest.raises(ValueError, match=r"args\.parts\[0\]\."):
        packmod.Verifier(kind="composite", args=composite)
