"""Constraint problems: the gold checkers on a table of positive and negative cases, the splits
(seeded, topic-disjoint, valid problems tables) and the gold check as family verifier and eval metric."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from coevo.evaluation import gold_metrics
from coevo.problems.constraints import (
    KINDS,
    TOPICS,
    ConstraintSpecError,
    count_sentences,
    demonstration,
    generate_constraints,
    gold_check,
    parse_spec,
    topic_of,
)
from coevo.verification.stage import family_verdicts
from schemas.problems import validate_problems

CASES = [
    # (spec, response, expected)
    ({"kind": "include_word", "word": "stone"}, "The river runs over a stone.", True),
    ({"kind": "include_word", "word": "stone"}, "STONE walls are cold.", True),
    ({"kind": "include_word", "word": "stone"}, "Stones are heavy.", False),  # a whole word, not a prefix
    ({"kind": "include_word", "word": "stone"}, "The river is cold.", False),
    ({"kind": "n_sentences", "n": 2}, "Bees hum. They make honey!", True),
    ({"kind": "n_sentences", "n": 2}, "Bees hum. They make honey. Yes.", False),
    ({"kind": "n_sentences", "n": 1}, "Bees hum", True),  # a trailing piece without a terminator counts
    ({"kind": "n_sentences", "n": 1}, "Bees hum... really?!", False),  # "really" is a second piece
    (
        {
            "kind": "end_question",
        },
        "Do you like tea?  ",
        True,
    ),
    ({"kind": "end_question"}, "Is it? No.", False),
    ({"kind": "no_commas"}, "Snow falls softly on the hills.", True),
    ({"kind": "no_commas"}, "Snow falls, softly.", False),
    ({"kind": "no_commas"}, "   ", False),  # no letter: never satisfies a constraint
    ({"kind": "max_words", "n": 5}, "Cats sleep all day.", True),  # 4 words < 5
    ({"kind": "max_words", "n": 5}, "Cats sleep all day long.", False),  # 5 words is not under 5
    ({"kind": "lowercase"}, "i like maps.", True),
    ({"kind": "lowercase"}, "I like maps.", False),
    ({"kind": "lowercase"}, "123.", False),  # no letter
]


@pytest.mark.parametrize(("spec", "text", "expected"), CASES)
def test_gold_checks(spec, text, expected):
    assert gold_check(text, spec) is expected


def test_every_kind_has_cases():
    assert {spec["kind"] for spec, _, _ in CASES} == set(KINDS)


def test_count_sentences():
    assert [count_sentences(t) for t in ["", "A.", "A. B!", "A?! B", "...", "A. 3."]] == [0, 1, 2, 2, 0, 1]


def test_splits_are_seeded_valid_and_topic_disjoint():
    train, test = generate_constraints(list(KINDS), 60, 24, seed=3)
    again, _ = generate_constraints(list(KINDS), 60, 24, seed=3)
    other, _ = generate_constraints(list(KINDS), 60, 24, seed=4)
    pd.testing.assert_frame_equal(train, again)
    assert not train.equals(other)
    validate_problems(train, "train")
    validate_problems(test, "test")
    assert (train["family"].value_counts() == 10).all() and (test["family"].value_counts() == 4).all()
    train_topics, test_topics = set(train["prompt"].map(topic_of)), set(test["prompt"].map(topic_of))
    assert train_topics <= set(TOPICS) and test_topics <= set(TOPICS)
    assert not train_topics & test_topics
    assert all(parse_spec(a)["kind"] == f for a, f in zip(train["answer"], train["family"]))


def test_unknown_kind_and_bad_spec_are_errors():
    with pytest.raises(ValueError, match="constraint kinds"):
        generate_constraints(["include_word", "rhyme"], 4, 2, 0)
    with pytest.raises(ConstraintSpecError, match="problem 'p7'.*not a constraint spec"):
        parse_spec("42x", "p7")
    with pytest.raises(ConstraintSpecError, match="no known 'kind'"):
        parse_spec(json.dumps({"kind": "rhyme"}), "p8")


def test_demonstrations_satisfy_about_half():
    train, _ = generate_constraints(list(KINDS), 300, 6, seed=0)
    rng = np.random.default_rng(0)
    ok = [
        gold_check(demonstration(p, parse_spec(a), rng), parse_spec(a))
        for p, a in zip(train["prompt"], train["answer"])
    ]
    assert 0.3 < np.mean(ok) < 0.7


def test_gold_check_is_the_family_verifier_and_the_eval_metric(tiny_cfg):
    _, test = generate_constraints(["no_commas", "lowercase"], 4, 4, seed=0)
    assert list(test["family"]) == ["no_commas", "lowercase", "no_commas", "lowercase"]
    completions = ["no commas here.", "Upper.", "a, b.", "all lower."]
    verdicts = family_verdicts(test, completions, tiny_cfg)
    assert [v.passed for v in verdicts] == [True, False, False, True]
    assert [v.reward for v in verdicts] == [1.0, 0.0, 0.0, 1.0]
    assert verdicts[2].details == "kind=no_commas gold=fail"
    metrics = gold_metrics(test, completions)
    assert metrics == {"eval/gold_acc": 0.5, "eval/gold_acc/lowercase": 0.5, "eval/gold_acc/no_commas": 0.5}
    assert gold_metrics(pd.DataFrame({"family": ["add"]}), ["3"]) == {}
