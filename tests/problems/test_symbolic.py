"""math-verify beyond plain integers (coevo/problems/symbolic.py) and the integer fast path beside it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

from coevo.config import Config
from coevo.problems.math_verifier import check_answer
from coevo.problems.symbolic import NAME, check_symbolic
from coevo.verification.stage import family_verdicts


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("\\boxed{\\frac{3}{4}}", "3/4"),  # fractions, LaTeX against plain
        ("so it is 3/4", "\\frac{3}{4}"),
        ("The answer is \\(\\frac34\\)", "0.75"),  # a decimal answer
        ("2.50", "2.5"),
        ("0.5", "1/2"),
        ("\\boxed{\\sqrt{2}}", "\\sqrt{2}"),
        ("We get \\boxed{x + 1}.", "1+x"),
        ("\\boxed{\\frac{6}{2}}", "3"),  # an integer answer, boxed as an expression
        ("\\boxed{2^{10}}", "1024"),
    ],
)
def test_equal_answers_pass(completion, answer):
    reward = check_answer(completion, answer)
    assert (reward.reward, reward.passed, reward.verifier) == (1.0, True, NAME)


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("\\boxed{\\frac{4}{3}}", "3/4"),
        ("0.333", "1/3"),  # rounded too early
        ("\\boxed{x - 1}", "x+1"),
        ("\\boxed{\\frac{7}{2}}", "3"),
        ("no answer here", "3/4"),
        ("", "0.75"),
    ],
)
def test_wrong_answers_fail(completion, answer):
    reward = check_answer(completion, answer)
    assert (reward.reward, reward.passed, reward.verifier) == (0.0, False, NAME)
    assert "expected=" in reward.details


def test_unparseable_reference_answer_fails_with_the_reason():
    reward = check_answer("\\boxed{1}", "\\text{}")
    assert not reward.passed and "could not be parsed" in reward.details


@pytest.mark.parametrize(
    "completion", ["\\boxed{9^{9^{9^{9}}}}", "\\boxed{10^{10^{10}}}", "\\boxed{5000!}", "9**9**9**9"]
)
def test_costly_answers_are_refused_without_comparing(completion):
    # math-verify's verify() runs for minutes on 9^{9^{9^9}} without a time-out; the guard is deterministic
    reward = check_answer(completion, "3/4")
    assert not reward.passed and reward.details.endswith("too costly to compare")


# (completion, integer answer): answers stated as a number, boxed or not, with the text instruct models write
INTEGER_PAIRS = [
    ("46", "46"),
    ("47", "46"),
    ("-22", "-22"),
    ("= -22", "-22"),
    ("22", "-22"),
    ("The answer is 1,234.", "1234"),
    ("\\boxed{12}", "12"),
    ("\\boxed{13}", "12"),
    ("so 23 + 45 = 68", "68"),
    ("so 23 + 45 = 68", "69"),
    ("46 apples", "46"),
    ("3.0", "3"),
    ("0", "0"),
    ("I think \\boxed{-7}", "-7"),
]


@pytest.mark.parametrize(("completion", "answer"), INTEGER_PAIRS)
def test_integer_fast_path_agrees_with_math_verify(completion, answer):
    fast = check_answer(completion, answer)
    assert fast.verifier == "math_exact"  # these take the fast path
    assert fast.passed == check_symbolic(completion, answer).passed


def test_math_verify_runs_in_worker_threads_and_repeats_its_verdicts():
    # Prefect runs tasks in worker threads, where math-verify's signal-based time-outs would raise
    pairs = [("\\boxed{\\frac{3}{4}}", "3/4"), ("\\boxed{\\frac{4}{3}}", "3/4"), ("0.5", "1/2")] * 4
    check_symbolic.cache_clear()
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda pair: check_answer(*pair), pairs))
    check_symbolic.cache_clear()
    assert threaded == [check_answer(*pair) for pair in pairs]
    assert [r.passed for r in threaded[:3]] == [True, False, True]


@pytest.mark.parametrize(
    ("completion", "passed"),
    [
        ("\\boxed{92 \\times 86}", False),  # the question restated: math-verify would evaluate it to 7912
        ("\\boxed{92*86}", False),
        ("92 * 86 = \\boxed{92 \\cdot 86}", False),
        ("92 * 86 = \\boxed{7912}", True),
        ("\\boxed{92 \\times 86 = 7912}", True),
        ("92 * 86 = 7,912", True),
    ],
)
def test_arithmetic_families_need_the_answer_stated_as_a_number(completion, passed):
    # SmolLM2-135M under GRPO learned to box the question's expression (docs/benchmarks/methods-smollm2.md: "GRPO vs
    # skill bank vs PMD on SmolLM2-135M-Instruct, on the lent GPU")
    problems = pd.DataFrame({"family": ["mul"], "answer": ["7912"], "prompt": ["What is 92 * 86?"]})
    (reward,) = family_verdicts(problems, [completion], Config())
    assert (reward.passed, reward.verifier) == (passed, "math_exact")
    assert check_answer("\\boxed{92 \\times 86}", "7912").passed  # a user's math family keeps math-verify's reading
