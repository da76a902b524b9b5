"""MCQ and label extraction: the documented reply shapes, and what stays unparseable."""

from __future__ import annotations

import pytest

from eval.metrics.answers import parse_choice, parse_label

OPTIONS = ["a cat", "a dog", "a bird", "a fish"]


@pytest.mark.parametrize(
    "reply, letter",
    [
        ("(B)", "B"), ("B.", "B"), ("B", "B"), ("b", "B"), ("答案是B", "B"), ("答案：（C）", "C"), ("Answer: b", "B"),
        ("The answer is a dog", "B"), ("a fish", "D"), ("I think the answer is C because of the hat.", "C"),
        ("Because of the hat, I pick (D).", "D"), ("**C.** a bird", "C"), ("Final answer: (d).", "D"),
        ("Let me think. Option A looks close, but the answer is B.", "B"),
    ],
)
def test_choice_shapes(reply, letter):
    parsed = parse_choice(reply, OPTIONS)
    assert (parsed.answer, parsed.status) == (letter, "ok")


@pytest.mark.parametrize(
    "reply, status",
    [
        ("I am not sure.", "unparseable"), ("", "unparseable"), ("E", "out_of_range"), ("Answer: E", "out_of_range"),
        ("a cat or a dog", "ambiguous"), (None, "missing"),
    ],
)
def test_choice_unparseable(reply, status):
    parsed = parse_choice(reply, OPTIONS)
    assert parsed.answer is None and parsed.status == status


def test_labels():
    affect = ("Consistent", "Inconsistent")
    assert parse_label("Inconsistent", affect).answer == "Inconsistent"  # "Consistent" is not a word inside it
    assert parse_label("The affect is consistent with the meaning.", affect).answer == "Consistent"
    assert parse_label("Label: Inconsistent. It only looks consistent.", affect).answer == "Inconsistent"
    assert parse_label("consistent or inconsistent?", affect).status == "ambiguous"
    assert parse_label("stance: deny", ("Support", "Deny", "Extension")).answer == "Deny"
    assert parse_label("Here the context explains the meme.", ("CEM", "MEC")).answer == "CEM"
    assert parse_label("no idea", ("CEM", "MEC")).status == "unparseable"
