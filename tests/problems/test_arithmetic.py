"""Built-in arithmetic: determinism, correct answers, operand sizes, disjoint and evenly spread splits."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from coevo.problems.arithmetic import arithmetic_splits, generate_arithmetic, train_only_cells, write_splits
from schemas import read_problems, validate_problems

FAMILIES = ["add", "sub", "mul"]
PROMPT = re.compile(r"^(\d+)([+\-*])(\d+)=$")


def content(frame: pd.DataFrame) -> set[tuple[str, str]]:
    return set(zip(frame["family"], frame["prompt"]))


def classes(frame: pd.DataFrame) -> set[tuple]:
    """(family, operands), those of + and * sorted: a problem and its commuted twin are one class."""
    out = set()
    for family, prompt in zip(frame["family"], frame["prompt"]):
        a, op, b = PROMPT.match(prompt).groups()
        pair = (int(a), int(b))
        out.add((family, *(sorted(pair) if op in "+*" else pair)))
    return out


def test_same_seed_same_frames_different_seed_different():
    a = generate_arithmetic(FAMILIES, [1, 2], 300, 60, seed=3)
    b = generate_arithmetic(FAMILIES, [1, 2], 300, 60, seed=3)
    c = generate_arithmetic(FAMILIES, [1, 2], 300, 60, seed=4)
    pd.testing.assert_frame_equal(a[0], b[0])
    pd.testing.assert_frame_equal(a[1], b[1])
    assert not a[0].equals(c[0])
    assert not a[1].equals(c[1])


def test_frames_match_the_schema():
    train, test = generate_arithmetic(FAMILIES, [1, 2, 3, 4], 120, 24, seed=0)
    validate_problems(train, "train")
    validate_problems(test, "test")


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_answers_are_exact_and_operands_have_level_digits(level):
    train, test = generate_arithmetic(FAMILIES, [level], 150, 30, seed=1)  # 50 a cell: level 1 stays open
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    symbol = {"add": "+", "sub": "-", "mul": "*"}
    for row in pd.concat([train, test]).itertuples():
        a, op, b = PROMPT.match(row.prompt).groups()
        assert op == symbol[row.family]
        assert len(a) == len(b) == level  # exactly `level` digits, no leading zeros
        assert row.answer == str(ops[op](int(a), int(b)))
        assert row.level == level


def test_sub_answers_can_be_negative():
    train, _ = generate_arithmetic(["sub"], [2], 200, 10, seed=0)
    assert any(answer.startswith("-") for answer in train["answer"])


def test_open_cells_keep_test_and_train_content_disjoint():
    # 60 training problems per cell: level 1 (100 pairs) is open too at this quota
    train, test = generate_arithmetic(FAMILIES, [1, 2, 3], 540, 150, seed=7)
    assert not classes(train) & classes(test)  # not even a commuted twin (3+4= vs 4+3=)
    assert len(classes(test)) == len(test)  # test problems are distinct up to commutation


def test_closed_cell_is_train_only():
    # 1000 training problems against 100 level-1 pairs: the fact table is closed, so it holds no
    # test problem (it would be a training problem) and the whole test split comes from level 2
    train, test = generate_arithmetic(["mul"], [1, 2], 2000, 40, seed=3)
    assert set(test["level"]) == {2} and len(test) == 40
    assert len(content(train[train["level"] == 1])) > 90  # the table is trained on
    assert not classes(train) & classes(test)
    assert train_only_cells(["mul"], [1, 2], 2000) == [("mul", 1)]


def test_only_closed_cells_is_an_error():
    with pytest.raises(ValueError, match=r"no cell of \[\('add', 1\)\] can be held out.*problems.max_digits"):
        generate_arithmetic(["add"], [1], 100, 10, seed=0)


def test_validation_is_disjoint_from_test_and_train_and_leaves_test_alone():
    splits = arithmetic_splits(FAMILIES, [1, 2], 540, 60, 30, seed=2)
    train, val, test = splits["train"], splits["val"], splits["test"]
    assert len(val) == 30 and val["id"].str.startswith("v-").all()
    assert not classes(val) & classes(train) and not classes(val) & classes(test)
    pd.testing.assert_frame_equal(
        test, generate_arithmetic(FAMILIES, [1, 2], 540, 60, seed=2)[1]
    )  # every cell holds both even shares here, so n_val moves no test problem


def test_validation_covers_every_cell_test_covers_where_test_would_empty_the_small_ones():
    """The frontier mix: test's even share (45) would take every held-out 1-digit problem (25 of add
    and mul, 50 of sub), leaving validation none. Validation takes each cell's part in the ratio
    n_val : n_test instead; the held-out problems, and so training, are the same either way."""
    args = (FAMILIES, [1, 2, 3], 450, 405, 90)
    splits, earlier = arithmetic_splits(*args, seed=0), arithmetic_splits(*args, seed=0, val_split="after_test")
    train, val, test = splits["train"], splits["val"], splits["test"]
    per_cell = val.groupby(["family", "level"]).size()
    assert len(per_cell) == 9 and (per_cell[[("add", 1), ("mul", 1), ("sub", 1)]] == [5, 5, 10]).all()
    assert len(val) == 90 and len(test) == 405
    assert not classes(val) & classes(test) and not classes(val) & classes(train)
    assert 1 not in set(earlier["val"]["level"])  # test first: no 1-digit validation problem
    pd.testing.assert_frame_equal(train, earlier["train"])
    assert classes(val) | classes(test) == classes(earlier["val"]) | classes(earlier["test"])


def test_small_cell_gives_at_most_half_to_test_and_train_reuses_the_rest():
    # add is commutative: 25 held-out classes take up to 50 of the 100 ordered pairs
    with pytest.warns(UserWarning, match="only 25"):
        train, test = generate_arithmetic(["add"], [1], 90, 80, seed=0)
    assert len(test) == 25 and len(classes(test)) == 25
    assert len(train) == 90
    assert train["id"].is_unique  # distinct ids ...
    assert len(content(train)) <= 75  # ... repeated content, all from the pairs left
    assert not classes(train) & classes(test)


def test_splits_are_spread_evenly_over_cells():
    train, test = generate_arithmetic(FAMILIES, [1, 2], 540, 60, seed=0)  # 90 a cell: level 1 open
    assert test.groupby(["family", "level"]).size().tolist() == [10] * 6
    assert train.groupby(["family", "level"]).size().tolist() == [90] * 6
    uneven = generate_arithmetic(FAMILIES, [2, 3], 601, 61, seed=0)
    sizes = uneven[1].groupby(["family", "level"]).size()
    assert sizes.max() - sizes.min() <= 1 and sizes.sum() == 61


def test_capped_small_cells_shift_test_quota_to_larger_ones():
    _, test = generate_arithmetic(["add"], [1, 2], 10, 200, seed=0)
    sizes = test.groupby("level").size()
    assert sizes[1] == 25 and sizes[2] == 175  # level 1: 25 commutation classes (half its pairs)


def test_ids_are_stable_strings():
    train, test = generate_arithmetic(["add"], [2], 20, 5, seed=0)
    assert train["id"].iloc[17] == "add-2-000017"
    assert test["id"].iloc[3] == "t-add-2-000003"


def test_a_cell_does_not_depend_on_the_other_families():
    alone, _ = generate_arithmetic(["add"], [2], 50, 10, seed=5)
    mixed, _ = generate_arithmetic(["sub", "add"], [2], 100, 20, seed=5)
    # same quotas per cell (50 train, 10 test) -> identical add problems
    pd.testing.assert_frame_equal(alone, mixed[mixed["family"] == "add"].reset_index(drop=True))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([], [1], 1, 1), r"families must be a non-empty subset of \['add', 'mul', 'sub'\]; got \[\]"),
        ((["div"], [1], 1, 1), r"families must be a non-empty subset of .*; got \['div'\]"),
        ((["add"], [0], 1, 1), r"levels must be non-empty and within 1\.\.9; got \[0\]"),
        ((["add"], [10], 1, 1), r"levels must be non-empty and within 1\.\.9; got \[10\]"),
        ((["add", "add"], [1], 1, 1), r"families and levels must not repeat; got \['add', 'add'\]"),
    ],
)
def test_bad_arguments_raise(args, message):
    with pytest.raises(ValueError, match=message):
        generate_arithmetic(*args, seed=0)


def test_write_splits_writes_validated_parquet(tmp_path):
    train, test = generate_arithmetic(FAMILIES, [1, 2], 60, 12, seed=0)
    paths = write_splits(tmp_path / "data", train, test)
    assert paths == {"train": str(tmp_path / "data" / "train.parquet"), "test": str(tmp_path / "data" / "test.parquet")}
    pd.testing.assert_frame_equal(read_problems(paths["train"]), train)
    pd.testing.assert_frame_equal(read_problems(paths["test"]), test)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["test.parquet", "train.parquet"]


def test_words_style_asks_the_same_problems_as_questions():
    equation = generate_arithmetic(FAMILIES, [2], 90, 30, seed=5)
    words = generate_arithmetic(FAMILIES, [2], 90, 30, seed=5, style="words")
    for eq, wd in zip(equation, words):
        pd.testing.assert_frame_equal(eq.drop(columns="prompt"), wd.drop(columns="prompt"))
        asked = wd["prompt"].str.extract(r"^What is (\d+) ([+\-*]) (\d+)\?$")
        assert not asked.isna().any().any()
        assert (asked[0] + asked[1] + asked[2] + "=").tolist() == eq["prompt"].tolist()


def test_unknown_question_style_is_rejected():
    with pytest.raises(ValueError, match="question style must be one of"):
        generate_arithmetic(FAMILIES, [1], 10, 2, seed=0, style="latex")
