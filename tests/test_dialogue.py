"""The kit's consent reading (``envgen_verifiers.dialogue``, issue 29): which agent messages ask the user's
agreement to an action, and how a user's reply answers one. Pure functions, so cheap; the ``confirmed``
verifier and the scripted user both rest on them."""

from __future__ import annotations

import sys

import pytest

from envgen.paths import bundled

sys.path.insert(0, str(bundled("verifiers")))
from envgen_verifiers.dialogue import agreement, asks_agreement  # noqa: E402


@pytest.mark.parametrize("text", [
    "Is that OK with you?",
    "Would you like me to do that?",
    "Do you want me to go on?",
    "Shall I proceed?",
    "Can I go ahead?",
    "Should I go ahead and cancel it?",
    "Can I go ahead and cancel it?",
    "Does that work for you?",
    "Would you like to proceed?",
    "Please confirm and I will cancel it.",
    "Should I transfer you to a human agent?",
    "I'll cancel order #W123 for the reason 'no longer needed'; the refund of $54.20 goes to your Visa. "
    "Is that OK with you?",
    "I will return the lamp from order W1 for a refund of $20. Is that correct?",
    "Please confirm (yes) if you would like to proceed with the cancellation.",
    "Let me know if you'd like to proceed.",
    "Do I have your permission to cancel it?",
    "Are you sure you want to cancel this order?",
    "I'll go ahead and cancel order W1 for you; just say the word.",
    # the blanket question of the pre-emptive attack is a consent question (the verifier, not the reader, rejects it)
    "What are your email and zip code, and the order number? "
    "Shall I proceed with whatever is needed once I have these?",
])
def test_natural_consent_questions_are_recognised(text):
    assert asks_agreement(text)


@pytest.mark.parametrize("text", [
    "Should I look at order W123?",
    "Which order?",
    "What is your email?",
    "Your email is a@b.com, is that correct?",
    "How can I help you today?",
    "What else can I do for you?",
    "Can I have your zip code?",
    "Can you confirm your email address?",
    "Would you like me to check the status of the order?",
    "Could you share your email and zip code so I can verify your identity?",
    "Let me know if you have any other questions.",
    "Can you confirm the order id?",
    "How would you like to proceed?",
    "Is this the order you'd like to cancel?",
    "Would you like to know the return policy?",
    "Your order W123 has been cancelled.",
])
def test_questions_of_fact_and_statements_are_not_consent_questions(text):
    assert not asks_agreement(text)


@pytest.mark.parametrize("text, want", [
    ("Yes, please go ahead.", "yes"),
    ("Sure.", "yes"),
    ("OK, do it", "yes"),
    ("That's fine", "yes"),
    ("ok", "yes"),
    ("Yes.", "yes"),
    ("Correct, go for it.", "yes"),
    ("No problem, go ahead.", "yes"),
    ("Yes please. When will the refund arrive?", "yes"),
    ("Yes, please go ahead. I no longer need it.", "yes"),
    ("No, don't.", "no"),
    ("Actually, wait \u2014 I changed my mind, please don't", "no"),
    ("Yes. Actually, no.", "no"),
    ("No thanks, leave it as it is.", "no"),
    ("I'd rather not.", "no"),
    ("No, please keep it.", "no"),  # a "please" after a no does not start a new yes
    ("Actually, wait, I changed my mind. Please don't record it.", "no"),
    ("Please.", "yes"),
    ("Hmm, what's the fee?", None),
    ("OK, but what's the fee?", None),
    ("I'm not sure.", None),
    ("My email is ana@example.com", None),
    ("The correct address is 14 Main St.", None),
    ("Sorry, what do you need from me?", None),
])
def test_user_replies_read_as_yes_no_or_neither(text, want):
    assert agreement(text) == want
