"""Held-out splits are unseen: for every built-in source and for user files, no validation or test
problem is a training problem (same operands or commuted twin, same prompt text after whitespace
normalisation, same code signature + docstring), and validation shares none with test.

The checks here use their own key (`seen_key`), written independently of coevo/problems/heldout.py,
so a splitter and the library's own check cannot agree on a wrong notion of "the same problem".
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from coevo.code.sources import build_code_splits
from coevo.prepare import build_all_splits, prepare_problems
from coevo.problems.arithmetic import arithmetic_splits
from coevo.problems.heldout import check_unseen, overlap
from tests.conftest import TINY_PARAMS, tiny_config

ARITH = re.compile(r"^(?:What is )?(\d+) ?([+\-*]) ?(\d+)(?: ?([+*]) ?(\d+))?(?:=|\?)$")


def seen_key(prompt: str) -> tuple:
    """A problem's identity: operands (+ and * commuted into order) for arithmetic; for a code stub
    the `def` line and its docstring or the comment above it; else whitespace-normalised text."""
    text = " ".join(prompt.split())
    match = ARITH.match(prompt.strip())
    if match:
        a, op, b, op2, c = match.groups()
        if op2 is None:
            pair = (int(a), int(b))
            return (op, *(sorted(pair) if op in "+*" else pair))
        return (op, op2, int(a), *sorted((int(b), int(c))))  # a+b*c: b*c commutes
    defn = re.search(r"def \w+\(.*?\).*?:", prompt, flags=re.S)
    if defn:
        doc = re.search(r'"""(.*?)"""', prompt[defn.end() :], flags=re.S)
        spec = (
            doc.group(1)
            if doc
            else "".join(line for line in prompt[: defn.start()].splitlines() if line.startswith("#"))
        )
        return ("code", " ".join(defn.group(0).split()), " ".join(spec.split()))
    return ("text", text)


def shared(a: pd.DataFrame, b: pd.DataFrame) -> set:
    return {seen_key(p) for p in a["prompt"]} & {seen_key(p) for p in b["prompt"]}


def assert_unseen(splits: dict[str, pd.DataFrame]) -> None:
    assert len(splits["test"]) > 0
    assert not shared(splits["train"], splits["test"]), "test problems are training problems"
    assert not shared(splits["train"], splits["val"]), "validation problems are training problems"
    assert not shared(splits["val"], splits["test"]), "validation problems are test problems"


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # the default params (1-2 digits: the fact tables train-only)
        {"problems": {"question_style": "words"}},
        {"problems": {"min_digits": 1, "max_digits": 3}},  # the curriculum benchmark's mix
        {
            "problems": {
                "families": ["add", "mul"],
                "max_digits": 1,
                "n_train": 160,
                "n_test": 40,
                "n_val": 10,
                "question_style": "words",
            }
        },  # smollm2
    ],
    ids=["default", "words", "curriculum-mix", "smollm2"],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_arithmetic_splits_are_unseen(tmp_path, overrides, seed):
    from coevo.config import deep_merge, load_config

    cfg = load_config(TINY_PARAMS, deep_merge({"seed": seed, "problems": {"data_dir": str(tmp_path)}}, overrides))
    assert_unseen(build_all_splits(cfg))


def test_combination_splits_are_unseen():
    # addmul (a+b*c) only reaches the mix through the curriculum's proposer; 1-digit: 1000 triples
    assert_unseen(arithmetic_splits(["addmul"], [1, 2], 400, 60, 30, seed=4, style="words"))


def test_constraint_splits_are_unseen(tmp_path):
    cfg = tiny_config(tmp_path, problems={"source": "constraints", "n_train": 120, "n_test": 30, "n_val": 12})
    splits = build_all_splits(cfg)
    assert len(splits["val"]) == 12
    assert_unseen(splits)


def test_synthetic_code_splits_are_unseen(tmp_path):
    cfg = tiny_config(
        tmp_path, problems={"source": "code-synth"}, code={"synth": {"n_train": 200, "n_test": 40, "n_val": 20}}
    )
    assert_unseen(build_code_splits(cfg))


def test_humaneval_splits_are_unseen(tmp_path):
    cfg = tiny_config(tmp_path, problems={"source": "humaneval", "test_fraction": 0.2, "val_fraction": 0.1})
    splits = build_code_splits(cfg)
    assert (len(splits["train"]), len(splits["val"]), len(splits["test"])) == (115, 16, 33)
    assert_unseen(splits)


def user_rows() -> list[dict]:
    """A user file that repeats itself: the same question with other whitespace, a commuted twin,
    and plain duplicates (different ids)."""
    rows = [{"id": f"q{i}", "prompt": f"How many legs do {i} spiders have?", "answer": str(8 * i)} for i in range(40)]
    rows += [
        {"id": f"w{i}", "prompt": f"How  many legs do {i} spiders\nhave? ", "answer": str(8 * i)}
        for i in range(0, 40, 3)
    ]
    rows += [{"id": f"a{i}", "prompt": f"What is {i} + {i + 2}?", "answer": str(2 * i + 2)} for i in range(20)]
    rows += [{"id": f"b{i}", "prompt": f"What is {i + 2} + {i}?", "answer": str(2 * i + 2)} for i in range(20)]
    return rows


def write_jsonl(path, rows: list[dict]):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_user_file_splits_are_unseen(tmp_path, seed):
    path = write_jsonl(tmp_path / "mine.jsonl", user_rows())
    cfg = tiny_config(
        tmp_path, seed=seed, problems={"source": "file", "path": str(path), "test_fraction": 0.2, "val_fraction": 0.2}
    )
    splits = build_all_splits(cfg)
    assert sum(len(splits[name]) for name in ("train", "val", "test")) == len(user_rows())  # every row lands somewhere
    assert_unseen(splits)


def test_user_test_file_is_kept_whole_and_repeated_training_rows_are_dropped(tmp_path):
    rows = user_rows()
    test_rows = [
        {"id": "t1", "prompt": "How many legs do 3 spiders have?", "answer": "24"},
        {"id": "t2", "prompt": "What is 7 + 5?", "answer": "12"},
    ]
    cfg = tiny_config(
        tmp_path,
        problems={
            "source": "file",
            "path": str(write_jsonl(tmp_path / "train.jsonl", rows)),
            "test_path": str(write_jsonl(tmp_path / "test.jsonl", test_rows)),
        },
    )
    with pytest.warns(UserWarning, match="4 training rows repeat a problem of"):
        prepare_problems(cfg)
    report = json.loads((tmp_path / "data" / "splits.json").read_text())
    # "3 spiders" twice (q3, and w3 with other whitespace), "7 + 5" twice (b5, and its twin a5: 5 + 7)
    assert report["train_dropped_as_in_test_path"] == 4
    splits = {name: pd.read_parquet(tmp_path / "data" / f"{name}.parquet") for name in ("train", "val", "test")}
    assert splits["test"]["id"].tolist() == ["t1", "t2"]
    assert report["sizes"] == {name: len(frame) for name, frame in splits.items()}
    assert_unseen(splits)


def test_code_file_with_a_repeated_signature_and_docstring_is_split_together(tmp_path):
    def problem(task: str, doc: str, header: str = "") -> dict:
        prompt = f'{header}def f(x):\n    """{doc}"""\n'
        return {"task_id": task, "prompt": prompt, "entry_point": "f", "test": "def check(c):\n    assert c(1) == 2\n"}

    rows = [problem(f"p{i}", f"Return x plus {i}.") for i in range(12)]
    rows += [
        problem(f"r{i}", f"Return x   plus {i}.", header="import math\n") for i in range(12)
    ]  # same spec, other header
    path = write_jsonl(tmp_path / "code.jsonl", rows)
    for seed in range(3):
        cfg = tiny_config(
            tmp_path,
            seed=seed,
            problems={"source": "code-file", "path": str(path), "test_fraction": 0.25, "val_fraction": 0.25},
        )
        assert_unseen(build_code_splits(cfg))


def test_the_library_check_names_the_overlapping_problems():
    train = pd.DataFrame({"id": ["a", "b"], "prompt": ["3+4=", "9-2="]})
    test = pd.DataFrame({"id": ["t-0", "t-1"], "prompt": ["4+3=", "2-9="]})
    assert overlap(train, test)["id"].tolist() == ["t-0"]
    with pytest.raises(ValueError, match=r"1 test problems are train problems \(t-0 = train a\)"):
        check_unseen({"train": train, "test": test}, "mine")


def test_the_library_check_covers_validation_against_train_and_against_test():
    """Splitters that are right leave the check nothing to find, so it is tested on its own: a
    validation problem that is a training problem (a commuted twin), and a test problem that is a
    validation problem (another commuted twin), are each refused by name."""
    train = pd.DataFrame({"id": ["a", "b"], "prompt": ["3+4=", "9-2="]})
    val = pd.DataFrame({"id": ["v-0", "v-1"], "prompt": ["4+3=", "5*6="]})
    with pytest.raises(ValueError, match=r"mine: 1 val problems are train problems \(v-0 = train a\)"):
        check_unseen({"train": train, "val": val, "test": pd.DataFrame({"id": ["t-0"], "prompt": ["1+1="]})}, "mine")
    val = pd.DataFrame({"id": ["v-0"], "prompt": ["5*6="]})
    test = pd.DataFrame({"id": ["t-0", "t-1"], "prompt": ["8-1=", "6*5="]})
    with pytest.raises(ValueError, match=r"mine: 1 test problems are val problems \(t-1 = val v-0\)"):
        check_unseen({"train": train, "val": val, "test": test}, "mine")
    check_unseen({"train": train, "val": val, "test": test.iloc[:1]}, "mine")  # disjoint splits pass
