"""Instruction-following problems with verifiable constraints (IFEval style), and their gold checks.

Method: IFEval (Zhou et al. 2023, arXiv 2311.07911): prompts carry constraints a program can check
("include the keyword X", "exactly N sentences", "end with a question", "no commas", ...). Here the
family is the constraint kind; the problem has no exact answer, so the problems table's `answer`
holds the gold check's spec as JSON ({"kind": ..., parameters}), read only by the gold checker.
Training on a rubric never sees it (the rubric judge reads prompt and response only); the gold check
is the upper-bound reward arm (the `verifier` reward: each constraint family's verifier is its gold
check) and the held-out metric `eval/gold_acc` (coevo/evaluation.py).

Splits: the topics are shuffled by the seed and a quarter of them (at least one) are held out for
test, an eighth for validation, so the splits are content-disjoint (no held-out prompt's topic is
ever trained on); within a split,
problems cycle over the kinds and draw topic and parameter from a generator seeded by (seed, kind).

Departures from IFEval:
1. Six kinds, one constraint per prompt (IFEval has 25 kinds and stacks several), short prompts, so the
   tiny character-level policy (max_position 64..256) can hold prompt and response.
2. Checks are the "strict" IFEval variant only (no loose re-tries after stripping markup).
3. Every check also requires a response with at least one letter: an empty reply satisfies "no commas"
   vacuously in IFEval, not here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import numpy as np
import pandas as pd

from coevo.types import Reward

COLUMNS = ["id", "family", "level", "prompt", "answer"]
TOPICS = [
    "rivers", "bread", "winter", "trains", "music", "cats", "the sea", "gardens", "books", "rain",
    "bees", "coffee", "clocks", "bridges", "snow", "birds", "maps", "tea", "stars", "forests",
    "kites", "bikes", "apples", "storms", "lamps", "boats", "hills", "shoes", "clouds", "cities",
    "frogs", "honey", "roads", "paint", "wolves", "sand", "ships", "moths", "caves", "chess",
]  # fmt: skip
WORDS = ["stone", "blue", "quiet", "light", "green", "small", "warm", "old", "fast", "soft", "bright", "cold"]
_WORD = re.compile(r"[A-Za-z']+")
_SENTENCE_END = re.compile(r"[.!?]+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text)


def _has_letter(text: str) -> bool:
    return any(ch.isalpha() for ch in text)


def count_sentences(text: str) -> int:
    """Sentences = non-empty pieces (with a letter) between runs of . ! ?; a trailing piece without a
    terminator counts too."""
    return sum(1 for piece in _SENTENCE_END.split(text) if _has_letter(piece))


# kind -> (prompt template, parameter draw, gold check(text, spec) -> bool)
def _include_word(text: str, spec: dict) -> bool:
    return spec["word"].lower() in (w.lower() for w in _words(text))


def _n_sentences(text: str, spec: dict) -> bool:
    return count_sentences(text) == spec["n"]


def _end_question(text: str, spec: dict) -> bool:
    return text.rstrip().endswith("?")


def _no_commas(text: str, spec: dict) -> bool:
    return "," not in text


def _max_words(text: str, spec: dict) -> bool:
    return len(_words(text)) < spec["n"]


def _lowercase(text: str, spec: dict) -> bool:
    return text == text.lower()


KINDS: dict[str, tuple[str, Callable[[np.random.Generator], dict], Callable[[str, dict], bool]]] = {
    "include_word": (
        'Write about {topic}. Use the word "{word}".',
        lambda rng: {"word": str(rng.choice(WORDS))},
        _include_word,
    ),
    "n_sentences": ("Write {n} sentences about {topic}.", lambda rng: {"n": int(rng.integers(1, 4))}, _n_sentences),
    "end_question": ("Write about {topic}. End with a question.", lambda rng: {}, _end_question),
    "no_commas": ("Write about {topic}. Use no commas.", lambda rng: {}, _no_commas),
    "max_words": ("Write about {topic} in under {n} words.", lambda rng: {"n": int(rng.integers(4, 9))}, _max_words),
    "lowercase": ("Write about {topic} in lowercase only.", lambda rng: {}, _lowercase),
}
_KIND_CODE = {kind: i for i, kind in enumerate(KINDS)}  # fixed, so seeds do not depend on list order


class ConstraintSpecError(ValueError):
    """A constraint problem's `answer` is not a gold-check spec; names the problem id."""


def parse_spec(answer: str, problem_id: str = "?") -> dict:
    """The gold-check spec of a constraint problem (its `answer` column)."""
    try:
        spec = json.loads(answer)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ConstraintSpecError(
            f"problem {problem_id!r}: answer {answer!r} is not a constraint spec (JSON): {exc}"
        ) from exc
    if not isinstance(spec, dict) or spec.get("kind") not in KINDS:
        raise ConstraintSpecError(
            f"problem {problem_id!r}: answer {answer!r} has no known 'kind' (known: {sorted(KINDS)})"
        )
    return spec


def gold_check(text: str, spec: dict) -> bool:
    """Whether `text` satisfies the constraint `spec` (and has at least one letter)."""
    return _has_letter(text) and KINDS[spec["kind"]][2](text, spec)


def generate_constraints(kinds: list[str], n_train: int, n_test: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train and test frames (no validation split); see `constraint_splits`."""
    splits = constraint_splits(kinds, n_train, n_test, 0, seed)
    return splits["train"], splits["test"]


def constraint_splits(kinds: list[str], n_train: int, n_test: int, n_val: int, seed: int) -> dict[str, pd.DataFrame]:
    """{"train", "val", "test"} frames (problems-table columns), topic-disjoint, cycling over `kinds`:
    a quarter of the topics are test's, an eighth validation's (when n_val > 0), the rest training's."""
    unknown = [k for k in kinds if k not in KINDS]
    if not kinds or unknown or len(set(kinds)) != len(kinds):
        raise ValueError(f"constraint kinds must be a non-empty, non-repeating subset of {sorted(KINDS)}; got {kinds}")
    order = [TOPICS[i] for i in np.random.default_rng([seed & (2**64 - 1), 7]).permutation(len(TOPICS))]
    n_held, n_val_topics = max(1, len(TOPICS) // 4), (max(1, len(TOPICS) // 8) if n_val > 0 else 0)
    test_topics, val_topics, train_topics = (
        order[:n_held],
        order[n_held : n_held + n_val_topics],
        order[n_held + n_val_topics :],
    )
    return {
        "train": _split(kinds, train_topics, n_train, seed, ""),
        "val": _split(kinds, val_topics, n_val, seed, "v-"),
        "test": _split(kinds, test_topics, n_test, seed, "t-"),
    }


def _split(kinds: list[str], topics: list[str], n: int, seed: int, prefix: str) -> pd.DataFrame:
    rngs = {kind: np.random.default_rng([seed & (2**64 - 1), _KIND_CODE[kind], len(prefix)]) for kind in kinds}
    rows = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        rng = rngs[kind]
        template, draw, _ = KINDS[kind]
        params = draw(rng)
        topic = topics[int(rng.integers(0, len(topics)))]
        spec = {"kind": kind, **params}
        rows.append({
            "id": f"{prefix}{kind}-{i // len(kinds):06d}",
            "family": kind,
            "level": int(params.get("n", 0)),
            "prompt": template.format(topic=topic, **params),
            "answer": json.dumps(spec, sort_keys=True),
        })  # fmt: skip
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype({"id": str, "family": str, "level": np.int64, "prompt": str, "answer": str})


def topic_of(prompt: str) -> str:
    """The topic a constraint prompt names (for demonstrations)."""
    match = re.search(r"about (.+?)(?: in |\.)", prompt)
    return match.group(1) if match else "it"


def demonstration(prompt: str, spec: dict, rng: np.random.Generator) -> str:
    """A response for the warm start: a plain sentence about the prompt's topic that satisfies `spec`
    about half of the time (so RL has something to learn and groups have variance)."""
    topic = topic_of(prompt)
    subject = topic[0].upper() + topic[1:]
    satisfy = bool(rng.random() < 0.5)
    kind = spec["kind"]
    if kind == "include_word" and satisfy:
        return f"{subject} are {spec['word']}."
    if kind == "n_sentences":
        n = spec["n"] if satisfy else spec["n"] + 1
        return " ".join([f"{subject} are nice."] + [f"I like {topic}."] * (n - 1))
    if kind == "end_question" and satisfy:
        return f"Do you like {topic}?"
    if kind == "no_commas" and not satisfy:
        return f"{subject}, I think, are nice."
    if kind == "max_words" and not satisfy:
        return f"{subject} are very nice and I like them a lot."
    if kind == "lowercase":
        return f"i like {topic}." if satisfy else f"{subject} are nice."
    return f"{subject} are nice."


def score_constraints(problems: pd.DataFrame, completions: list[str], cfg=None) -> list:
    """The gold checks as a family verifier (coevo/verification/family_verifiers.py): reward 1.0 when the constraint
    holds."""
    out = []
    for pid, answer, text in zip(problems["id"], problems["answer"], completions, strict=True):
        spec = parse_spec(answer, str(pid))
        ok = gold_check(text, spec)
        out.append(Reward(float(ok), ok, "gold", f"kind={spec['kind']} gold={'pass' if ok else 'fail'}"))
    return out
