"""Importance of sentences and statements a later one supersedes (pure text rules)."""

from __future__ import annotations

from app.core.trim.importance import claims, importance, superseded


def test_facts_decisions_and_corrections_score_above_plain_talk():
    plain = importance("We talked about the weather for a while.", "user")
    fact = importance("The invoice total was 4,310 euros.", "assistant")
    decision = importance("We decided to ship the Lisbon build first.", "user")
    correction = importance("Actually, my badge number is now 5521.", "user")
    assert plain == 0
    assert 0 < fact < decision < correction


def test_the_users_my_is_the_assistants_your_and_not_its_my():
    user = claims("My name is Ana.", "user")
    reply = claims(
        "Hello Ana, your name is lovely and my name is Swapless.", "assistant"
    )
    assert user[0].subject == reply[0].subject == "user: name"
    assert reply[1].subject == "assistant: name"
    assert user[0].value == "ana"


def test_the_newest_value_of_a_subject_supersedes_older_ones():
    texts = [
        ("user", "My locker number is 42. I like tea."),
        ("assistant", "Noted: your locker number is 42."),
        ("user", "Tell me about rivers."),
        ("user", "Update: my locker number is now 17."),
        ("assistant", "Noted: your locker number is 17."),
        ("assistant", "My name is Bot."),  # the assistant's name: another subject
    ]
    assert superseded(texts) == [{0}, {0}, set(), set(), set(), set()]


def test_a_bare_correction_corrects_the_last_stated_value():
    texts = [("user", "My cat is called Tom. Actually, it's Tim."), ("user", "Hi.")]
    assert superseded(texts) == [{0}, set()]
    # Restating the same value supersedes nothing.
    same = [("user", "My pin is 12."), ("assistant", "Your pin is 12.")]
    assert superseded(same) == [set(), set()]
