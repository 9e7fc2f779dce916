"""Exact-match math verifier: final-number extraction edge cases and scoring."""

from __future__ import annotations

import pytest

from coevo.problems.math_verifier import MathVerifier, canonical_number, check_answer, extract_final_number
from coevo.types import Reward


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("46", "46"),
        ("-22", "-22"),  # negative at the start
        ("the answer is -22.", "-22"),
        ("x = -5", "-5"),
        ("- 5", "-5"),  # sign followed by a space
        ("=- 5", "-5"),
        ("(-3)", "-3"),
        ("answer: -4", "-4"),
        ("answer:-4", "-4"),
        ("12-5", "5"),  # binary minus: '-' after a digit is not a sign
        ("3 - 5", "-5"),  # documented rule: '-' after whitespace is a sign
        ("−7", "-7"),  # unicode minus
        ("= −7", "-7"),
        ("+5", "5"),
        ("  46  ", "46"),
        ("46 apples", "46"),
        ("46\n", "46"),
        ("1 then 2 then 3", "3"),  # last number wins
        ("12+34=46", "46"),
        ("1,234", "1234"),
        ("total 1,234,567 items", "1234567"),
        ("1,2,3", "3"),  # not thousands groups: separate numbers
        ("2.50", "2.5"),
        ("3.0", "3"),
        ("1,234.50", "1234.5"),
        ("0.5", "0.5"),
        ("007", "7"),
        ("-0", "0"),
        ("-0.00", "0"),
        ("000", "0"),
        ("5.", "5"),
        (r"so \boxed{42} and later 7", "42"),  # boxed beats the last number
        (r"\boxed{-12}", "-12"),
        (r"\boxed{1} then \boxed{2}", "2"),  # the last box
        (r"\boxed{\text{{x}} 9}", "9"),  # nested braces
        (r"\boxed{x}", None),
        ("", None),
        ("no digits here", None),
        ("-", None),
    ],
)
def test_extract_final_number(text, expected):
    assert extract_final_number(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("46", "46"),
        (" -22 ", "-22"),
        ("−3", "-3"),
        ("- 5", "-5"),
        ("1,000", "1000"),
        ("2.50", "2.5"),
        ("x", None),
        ("1/2", None),
    ],
)
def test_canonical_number(text, expected):
    assert canonical_number(text) == expected


def test_check_answer_pass_and_fail():
    assert check_answer("46", "46") == Reward(1.0, True, "math_exact", "extracted=46 expected=46")
    assert check_answer("12-34=-22", "-22").passed
    assert check_answer("  0046 apples", "46").passed
    assert check_answer("2.50", "2.5").passed
    assert check_answer("1,234", "1234").passed
    wrong = check_answer("47", "46")
    assert wrong == Reward(0.0, False, "math_exact", "extracted=47 expected=46")


@pytest.mark.parametrize("completion", ["", "   ", "I don't know"])
def test_no_number_fails_with_details(completion):
    reward = check_answer(completion, "46")
    assert (reward.reward, reward.passed, reward.verifier) == (0.0, False, "math_exact")
    assert "no number in completion" in reward.details


def test_non_integer_answer_is_judged_by_math_verify():
    # was "not a plain number" (always wrong) before math-verify; tests/problems/test_symbolic.py has the cases
    reward = check_answer("1/2", "1/2")
    assert (reward.passed, reward.verifier) == (True, "math_verify")


def test_math_verifier_scores_in_order_and_checks_lengths():
    verifier = MathVerifier()
    assert verifier.name == "math_exact"
    rewards = verifier.score(["46", "-22", "7"], ["46", "= -22", ""])
    assert [r.passed for r in rewards] == [True, True, False]
    assert [r.reward for r in rewards] == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="math_exact: 1 answers but 0 completions"):
        verifier.score(["1"], [])
