"""``said`` read as a careful grader reads a conversation (issue 29, item 1): the last statement of a fact
wins, a second candidate value anywhere scores 0, negation is read within its clause both ways, numbers are
compared by value whatever their JSON type, and facts with several values are graded as wholes.

Attacks (each scored 1 before: 28/28 customer-service tasks with a numeric fact) must score 0; the correct
statements a careful agent makes (a refusal that names its reason, a conversation full of order numbers,
dates and prices, tau2-bench's own ``communicate_info`` values said naturally) must score 1. Everything
runs through the kit's dispatch, the verifier process's code.
"""

from __future__ import annotations

import sys

import pytest

from envgen.pack import format as packmod
from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers import verify as kit_verify  # noqa: E402

REFUND = {"expected": 54.2, "name": "refund"}
BARE = 54.2
"""The same amount with no name: only the words around its statements say what it is."""


def said(facts: list, *texts: str) -> dict:
    messages = [{"role": "assistant", "content": t, "turn": k + 1} for k, t in enumerate(texts)]
    return kit_verify({"kind": "said", "args": {"facts": facts}}, answer=texts[-1], calls=[], work_dir="/x",
                      hidden_dir=None, messages=messages)


@pytest.mark.parametrize("fact", [REFUND, BARE])
@pytest.mark.parametrize("texts", [
    # a second candidate, in any frame, anywhere in the agent's messages
    ["Your refund of $54.20 is on its way.", "It may also have been $67.20, I am checking."],
    ["Your refund is $54.20. The system also shows $67.20 for this."],
    ["Your refund is $54.20, or possibly $67.20."],
    ["It may also have been $67.20, I am checking.", "Your refund of $54.20 is on its way."],
    ["Your refund is $54.20. It could also be $41.20 once the fee is taken."],
    ["Your refund is $54.20.", "Other possible amount: $67.20"],
    ["Your refund is $54.20.", "It may also have been 67.2."],
    ["| Refund | $54.20 |\n| Refund | $67.20 |"],
    ["Your refund is $54.20.", "The amount after review is $67.20."],
    # the last statement wins: a later correction or retraction takes the fact back
    ["Your refund of $54.20 is on its way.", "Correction: after a second look, the amount is $67.20."],
    ["Your refund is $54.20. Correction: the amount is $67.20."],
    ["Your refund is $54.20.", "Sorry, it is not $54.20."],
    ["Your refund is $54.20.", "Sorry, I was wrong. Let me look again."],
    ["Your refund is $54.20.", "Your refund is $67.20."],
    # two unmarked statements in one message are two answers, whichever comes last
    ["Your refund is $67.20. Your refund is $54.20."],
    # negated in its clause
    ["Your refund isn't 54.20."],
    ["It is not $54.20."],
])
def test_a_second_value_or_a_taken_back_statement_scores_zero(fact, texts):
    out = said([fact], *texts)
    assert out["reward"] == 0.0, (texts, out)
    assert out["details"]["facts"][0]["ok"] is False and out["details"]["reason"]


@pytest.mark.parametrize("fact", [REFUND, BARE])
@pytest.mark.parametrize("texts", [
    # a wrong value corrected later: the customer is left with the right one
    ["Your refund is $67.20.", "Sorry, I was wrong: your refund is $54.20."],
    ["Your refund is $67.20. Sorry, I misread the order: your refund is $54.20."],
    ["Let me look that up.", "Your refund is $67.20.", "After checking again, your refund is $54.20."],
    # a real conversation has many numbers that are not the fact
    ["Thank you! Order #W4252292 from 2025-05-03 has 3 items; you paid $120.00 for it.",
     "Your refund is $54.20 after the $65.80 restocking fee, back to Visa ending 1234 within 5 business days."],
    ["Your refund is $54.20, not $60.00."],
    ["You mentioned $60, but the refund is actually $54.20."],
    ["The item price is $60.00, minus a $5.80 restocking fee, so you'll get $54.20 back."],
    ["Your other order cost $12.50. Your refund is $54.20."],
    ["No, your refund is $54.20."],
])
def test_a_committed_last_statement_scores_one(fact, texts):
    out = said([fact], *texts)
    assert out["reward"] == 1.0, (texts, out)


@pytest.mark.parametrize("texts, reward", [
    (["Unfortunately I can't cancel it because your order has already shipped."], 1.0),
    (["I'm sorry, but order W1 has already shipped (tracking number 1Z98062167), so I cannot cancel it."], 1.0),
    (["I cannot cancel it, as your order already shipped yesterday."], 1.0),
    (["Your order has not shipped yet."], 0.0),
    (["Your order has shipped.", "Sorry, I was wrong, your order has not shipped."], 0.0),
])
def test_negation_governs_its_own_clause(texts, reward):
    """A refusal that names its reason conveys the reason: the negation governs the action, not the fact."""
    assert said([{"expected": "shipped", "name": "reason"}], *texts)["reward"] == reward, texts


@pytest.mark.parametrize("fact, text", [
    ({"expected": "8276.23"}, "The total comes to $8,276.23."),
    (8276.23, "The total comes to 8,276.23."),
    ({"expected": "$8,276.23"}, "The total comes to 8276.23 USD."),
    ({"expected": "481.5"}, "The camera costs $481.50."),
    ({"expected": "10"}, "There are 10 t-shirt options available."),
    ({"expected": "746342064230"}, "Your tracking number is 746342064230."),
    ({"expected": "64GB"}, "The new one has 64 GB of storage."),
    ({"expected": "20 hours"}, "Delivery takes 20 hours from now."),
    ({"expected": "mastercard"}, "It was paid with your Mastercard."),
])
def test_tau2_communicate_info_said_naturally_passes(fact, text):
    """tau2-bench's ``communicate_info`` values (strings, even for amounts) said as an agent would say them."""
    assert said([fact], text)["reward"] == 1.0, (fact, text)


def test_the_parts_of_an_address_said_as_one_address_are_each_conveyed():
    """tau2 retail task 43 asserts an address in parts: said together they are no list of alternatives; a
    city the agent was not asked to say, listed beside the right one, still is."""
    facts = ["840887978435", "943 Maple Drive", "Suite 356", "Chicago", "IL", "60621", "64GB"]
    text = ("Done! It now ships to 943 Maple Drive, Suite 356, Chicago, IL 60621; the tracking number is "
            "840887978435 and the new tablet has 64GB of storage.")
    assert said(facts, text)["reward"] == 1.0
    assert said(["1093.34", "943 Maple Drive"], "Done: $1,093.34, 943 Maple Drive.")["reward"] == 1.0
    assert said(["Chicago", "IL"], "It ships to Chicago, Springfield or Peoria, IL.")["reward"] == 0.0
    assert said(["Chicago", "IL"], "It ships to Chicago, Springfield, IL.")["reward"] == 0.0


def test_several_amounts_the_agent_is_to_say_are_no_second_candidates():
    """tau2 airline task 14 asserts three amounts: said together they are each conveyed; one of them hedged
    still fails its own fact."""
    assert said(["327", "1000", "1786"], "You will get $327 and $1,000, so $1,786 in all.")["reward"] == 1.0
    two = [REFUND, {"expected": 99.0, "name": "total"}]
    assert said(two, "Your total was $99.00 and your refund is $54.20.")["reward"] == 1.0
    out = said(two, "Your total was $99.00 and your refund is $54.20.", "It may also have been $99.00.")
    assert out["reward"] == 0.0 and [f["ok"] for f in out["details"]["facts"]] == [True, False]


def test_a_long_digit_string_is_an_id_not_an_amount():
    """"746342064230" is matched as written: a neighbouring number is another value, not a close one."""
    assert said([{"expected": "746342064230"}], "Your tracking number is 746342064231.")["reward"] == 0.0
    assert said([{"expected": "746342064230"}],
                "Your tracking number is 746342064230. The system also shows 746342064231.")["reward"] == 0.0


@pytest.mark.parametrize("facts, text, reward", [
    ([["polyester", "cotton"]], "The shirt is made of cotton and polyester.", 1.0),
    ([["polyester", "cotton"]], "The shirt is made of cotton.", 0.0),
    ([{"expected": ["polyester", "cotton"], "candidates": ["wool", "silk"]}],
     "The shirt is made of cotton, polyester and wool.", 0.0),
    ([["180.1", "189.57", "208.6"]], "The three items cost $180.10, $189.57 and $208.60.", 1.0),
    ([["180.1", "189.57"]], "The two items cost $180.10, $189.57 and $208.60.", 0.0),
    ([{"expected": "123 Main St, Springfield, IL 62704"}], "It now ships to 123 Main St. Springfield, IL 62704.", 1.0),
    ([{"expected": "123 Main St, Springfield, IL 62704"}],
     "It now ships to 123 Main St, Springfield, IL 62704, as you asked.", 1.0),
    ([{"expected": "123 Main St, Springfield, IL 62704"}], "It now ships to 123 Main St, Springfield.", 0.0),
])
def test_facts_with_several_values_are_graded_as_wholes(facts, text, reward):
    assert said(facts, text)["reward"] == reward, (facts, text)


def test_names_the_same_way():
    lisbon = {"expected": "Lisbon"}
    assert said([lisbon], "Thanks, Ana, it ships from Lisbon.")["reward"] == 1.0
    assert said([lisbon], "It ships from Lisbon. It may also ship from Porto.")["reward"] == 0.0
    assert said([lisbon], "It ships from Lisbon.", "Correction: it is Porto.")["reward"] == 0.0
    assert said([lisbon], "It ships from Porto.", "Sorry, my mistake: it ships from Lisbon.")["reward"] == 1.0
    date = {"expected": "2025-05-03", "name": "delivery date"}
    assert said([date], "It was ordered on 2025-04-20 and delivered on 2025-05-03.")["reward"] == 1.0
    assert said([date], "It was delivered on 2025-05-03. The system also shows 2025-05-04.")["reward"] == 0.0


def test_the_reason_names_the_statement_that_counts():
    out = said([REFUND], "Your refund is $54.20.", "Correction: the amount is $67.20.")
    assert "67.2" in out["details"]["reason"] and "last statement" in out["details"]["reason"]
    out = said([REFUND], "Your refund is $54.20.", "It may also have been $67.20, I am checking.")
    assert "second candidate" in out["details"]["reason"]
    ok = said([REFUND], "Checking.", "Your refund is $54.20.", "Anything else?")
    assert ok["details"]["facts"][0]["turn"] == 2


@pytest.mark.parametrize("args, where", [
    ({"facts": [[]]}, "args.facts[0]: a fact with several values"),
    ({"facts": [{"expected": ["a", True]}]}, "args.facts[0]: a fact is"),
    ({"facts": [{"expected": "about ten", "mode": "numeric"}]}, "args.facts[0].expected: mode numeric"),
    ({"facts": [{"expected": 1, "rel_tol": -1}]}, "args.facts[0].rel_tol"),
])
def test_bad_fact_arguments_are_named_on_load(args, where):
    with pytest.raises(ValueError, match=where.replace("[", r"\[").replace("]", r"\]")):
        packmod.Verifier(kind="said", args=args)
    packmod.Verifier(kind="said", args={"facts": [["a", 1], {"expected": "$8,276.23", "mode": "numeric"}]})


def test_the_gate_probes_numeric_strings_and_lists_and_their_probes_score_zero():
    """The gate's slots follow the kit's reading: a numeric string is a number, a list gives its first value
    the text states; each of its said probes (and the no-write mutation) scores 0 under the kit."""
    from envgen.build import gate

    facts = [{"expected": "8276.23", "name": "total"}, ["polyester", "cotton"], "746342064230"]
    answer = ("Your total is $8,276.23; the shirt is cotton and polyester; tracking number 746342064230. "
              "Anything else?")
    task = packmod.Task.model_validate({
        "id": "t", "prompt": [{"role": "user", "content": "Tell me."}], "difficulty": 1,
        "verifier": {"kind": "said", "args": {"facts": facts}},
        "reference": {"calls": [], "answer": answer}})
    slots = gate._slots(task, None)
    assert [(k, answer[a:b]) for k, a, b, _ in slots] == [("number", "8,276.23"), ("name", "polyester"),
                                                         ("name", "746342064230")]
    assert slots[2][3][0] == "746342064231"  # a wrong value of the same shape
    assert said(facts, answer)["reward"] == 1.0
    made = [(k, name, p) for k, a, b, wrong in slots for name, p in gate._said_probes(task, answer, a, b, k, wrong, "")]
    skipped = [(k, name) for k, name, p in made if isinstance(p, str)]
    assert skipped == [("name", "restated")]  # "polyester": a lowercase word, no other value to tell apart
    probes = [p for _, _, p in made if not isinstance(p, str)]
    for p in probes + [gate.said_mutation(task)]:
        assert said(facts, p.answer)["reward"] == 0.0, p.answer


def test_two_facts_told_in_the_same_words_are_two_facts_not_one_restated():
    """tau2's communicate_info told one by one in one frame (as `envgen import tau2`'s reference does): the
    second sentence tells the other fact, it does not correct the first."""
    facts = [{"expected": "cotton", "name": "information 1"}, {"expected": 481.5, "name": "information 2"}]
    assert said(facts, "Here is what you asked about: cotton.", "Here is what you asked about: 481.50.")["reward"] == 1.0
    # a value that is no other fact's still corrects it
    assert said(facts[:1], "Here is what you asked about: cotton.", "Here is what you asked about: wool.",
                "Here is what you asked about: 481.50.")["reward"] == 0.0


def test_an_amount_whose_digits_start_like_a_year_is_an_amount():
    assert said([1939.05], "Here is what you asked about: 1939.05.")["reward"] == 1.0
    assert said([1939.05], "The total refund is $1,939.05.")["reward"] == 1.0
    assert said([54.2], "Your refund of $54.20 was issued in 2024.")["reward"] == 1.0  # a year beside it: no rival
