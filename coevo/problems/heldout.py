"""What makes two problems the same, and the check that held-out splits share no problem with training.

A held-out problem (validation or test) is *unseen* when no training problem has its content key:

- arithmetic questions (either question style): the family and operands, those of a commutative
  operation sorted (`3+4=` and `4+3=` are one problem; `a+b*c` and `a+c*b` too);
- code problems (an `entry_point` column, or a problems-table row whose answer is a code spec): the
  entry point's signature and docstring, whitespace-normalised (so a reworded import or comment
  above the function does not make it new);
- everything else (user math files, constraint prompts): the prompt text, whitespace-normalised.

The arithmetic generator and the splitters (coevo/problems/arithmetic.py, loader.py, coevo/code/)
hold out by these keys; `overlap` checks any pair of frames independently of how they were made,
and `prepare` (coevo/prepare.py) refuses to write splits it finds overlapping.

A checkpoint a warm start fine-tuned records the keys of the problems it was fine-tuned on, as short
digests (`digests_of`), so a later run starting from it (another seed draws other splits) is checked
too: `seen_in` finds its held-out problems among them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection

import pandas as pd

from coevo.problems.proposer import parse_question, problem_key

_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Runs of whitespace as one space, ends stripped."""
    return _SPACE.sub(" ", text).strip()


def code_key(prompt: str, entry_point: str) -> str:
    """`def <entry_point>(...)` and its specification, whitespace-normalised: the docstring after
    the definition, or, without one, the comment lines just above it (the synthetic family's
    examples); the whole prompt, normalised, when it holds no such definition."""
    match = re.search(rf"def\s+{re.escape(entry_point)}\s*\(.*?\)\s*(->[^:]*)?:", prompt, flags=re.S)
    if match is None:
        return "prompt:" + normalise(prompt)
    doc = re.match(r'\s*(\'\'\'|""")(.*?)\1', prompt[match.end() :], flags=re.S)
    if doc is not None:
        spec = doc.group(2)
    else:
        above = prompt[: match.start()].rstrip("\n").split("\n")
        comments = []
        while above and above[-1].lstrip().startswith("#"):
            comments.insert(0, above.pop().strip())
        spec = "\n".join(comments)
    return "def:" + normalise(match.group(0)) + " spec:" + normalise(spec)


def content_key(row: dict) -> tuple:
    """The content key of one problem row (problems table, or decoded code problems)."""
    entry_point = row.get("entry_point") or _entry_point(row.get("answer"))
    if entry_point:
        return ("code", code_key(str(row["prompt"]), entry_point))
    parsed = parse_question(str(row["prompt"]).strip())
    if parsed is not None:
        _, family, operands = parsed
        return ("arith", *problem_key(family, operands))
    return ("text", normalise(str(row["prompt"])))


def _entry_point(answer: object) -> str | None:
    """The entry point of a problems-table code row (answer = JSON code spec), else None."""
    if not isinstance(answer, str) or not answer.startswith("{"):
        return None
    try:
        spec = json.loads(answer)
    except json.JSONDecodeError:
        return None
    return spec.get("entry_point") if isinstance(spec, dict) and isinstance(spec.get("entry_point"), str) else None


def keys_of(frame: pd.DataFrame) -> list[tuple]:
    """Content keys of every row, in order."""
    return [content_key(row) for row in frame.to_dict("records")]


def overlap(train: pd.DataFrame, held: pd.DataFrame) -> pd.DataFrame:
    """Rows of `held` whose content key some row of `train` has (with the first such train id)."""
    first = {}
    for pid, key in zip(train["id"], keys_of(train)):
        first.setdefault(key, pid)
    hits = [(i, first[key]) for i, key in enumerate(keys_of(held)) if key in first]
    out = held.iloc[[i for i, _ in hits]].reset_index(drop=True)
    return out.assign(train_id=[pid for _, pid in hits])


def digests_of(frame: pd.DataFrame) -> list[str]:
    """The distinct content keys of `frame`'s rows as sorted 16-hex-digit digests (of the key's JSON)."""
    return sorted({_digest(key) for key in keys_of(frame)})


def seen_in(digests: Collection[str], held: pd.DataFrame) -> pd.DataFrame:
    """Rows of `held` whose content key is among `digests` (as `digests_of` writes them)."""
    found = set(digests)
    return held[[_digest(key) in found for key in keys_of(held)]].reset_index(drop=True)


def _digest(key: tuple) -> str:
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def check_unseen(splits: dict[str, pd.DataFrame], source: str) -> None:
    """Raise ValueError naming the first overlapping problems when a held-out split ("val", "test")
    shares a problem with "train", or validation with test."""
    pairs = [("train", "val"), ("train", "test"), ("val", "test")]
    for a, b in pairs:
        if a not in splits or b not in splits:
            continue
        hits = overlap(splits[a], splits[b])
        if len(hits):
            shown = ", ".join(f"{h.id} = {a} {h.train_id}" for h in hits.head(5).itertuples())
            raise ValueError(
                f"{source}: {len(hits)} {b} problems are {a} problems ({shown}); held-out splits must be unseen"
            )
