"""Reward functions: the weighted list `rewards:` of params.yaml, built-in verifiers and user plugins alike.

Method: the contract of TRL's `GRPOTrainer(reward_funcs=...)`, all of it (coevo/verification/reward_calls.py
builds the arguments): a plugin is called as `f(prompts=, completions=, completion_ids=,
trainer_state=, log_metric=, log_extra=, **columns) -> list[float | None]`, one value per
completion; completions and prompts are message lists for conversational problems, strings
otherwise; the columns are the problems-table columns of the same rows (`id`, `family`, `level`,
`prompt`, `answer`, `messages`, and every other field of a user dataset, from its `user_fields`
column); `async def` plugins run concurrently. Each entry has a weight; a completion's reward is the weighted sum,
and every entry's value is kept (`Reward.components`, the rewards table's `components` column, the
`verify/reward/<name>` metrics). None means "not applicable": it adds nothing to the sum (TRL turns
it into NaN and sums with nansum: the same total) and is stored as null.

A plugin is named "module:function" and imported with importlib, with the working directory first on
the search path, as `python -m` has it: `my_rewards.py` beside params.yaml is found, then the
installed packages. It is imported once per process; its source file's sha256 (at import) goes into
every checkpoint's lineage record (coevo/store/lineage.py).

Departures from TRL:
1. The built-in verifiers are entries of the same list (`BUILTIN_REWARDS`): `verifier` (each problem
   family's verifier, coevo/verification/family_verifiers.py), `format` (a closed \\boxed{} or ``` fence) and `rubric`
   (the co-evolving rubric's judge, coevo/coevolvers/rubrics.py; a judge whose details, when it is not the
   first judge, are appended to the first one's). `passed` is the
   verdict of the first `verifier` entry whatever its weight (weight 0 keeps the held-out accuracy
   meaning "correct answer" while training on other rewards); without one, a completion passes when
   its total reward is at least `rewards_pass_threshold`.
2. Every value is checked: a wrong length, a non-number, NaN or inf is a `RewardError` naming
   `rewards[i].function`, never a silent NaN in the advantages.
3. `check_rewards` (the prepare stage) imports every plugin and calls it on two training problems with
   their reference answers as completions, so an unimportable module, a missing or non-callable
   attribute, or a wrong return shape stops the run before any rollout is spent.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from coevo.code.families import CODE_FAMILIES
from coevo.config import Config
from coevo.errors import InputError
from coevo.plugins import load_plugin
from coevo.registry import Registry
from coevo.rollout.episodes import replay
from coevo.types import Reward
from coevo.verification.family_verifiers import family_verdicts
from coevo.verification.reward_calls import (
    Episodes,
    RewardError,
    RewardLog,
    TrainerState,
    call_plugins,
    plugin_arguments,
    retokenized,
)
from schemas.problems import EXTRA

PROBE_ROWS = 2  # training problems each plugin is called on by check_rewards


@dataclass(frozen=True)
class Builtin:
    """A built-in reward: `make(cfg)` gives its function; a judge's function scores (problems rows,
    completions) -> list[Reward] (its verdicts make `passed`), any other follows the plugin contract."""

    make: Callable[[Config], Callable]
    judge: bool = False


@dataclass(frozen=True)
class RewardTerm:
    """One entry of `rewards:`, resolved."""

    where: str  # "rewards[i].function 'spec'", for error messages
    name: str
    weight: float
    function: Callable
    judge: bool = False
    source: dict | None = None  # a plugin's {"function", "path", "sha256"} (lineage)


BUILTIN_REWARDS = Registry("built-in reward")


def reward_terms(cfg: Config) -> list[RewardTerm]:
    """The run's `rewards:` entries, built-ins made for `cfg` and plugins imported (RewardError if one cannot be)."""
    terms = []
    for i, entry in enumerate(cfg.rewards):
        where = f"rewards[{i}].function {entry.function!r}"
        if ":" not in entry.function:
            if entry.function not in BUILTIN_REWARDS.names():
                raise RewardError(
                    f"{where}: no such built-in reward; built-ins: {BUILTIN_REWARDS.names()}, or name a plugin "
                    f"as 'module:function'"
                )
            builtin = BUILTIN_REWARDS[entry.function]
            terms.append(RewardTerm(where, entry.label, entry.weight, builtin.make(cfg), builtin.judge))
            continue
        try:
            function, source = load_plugin(entry.function)
        except InputError as exc:
            raise RewardError(f"{where}: {exc}") from exc
        terms.append(RewardTerm(where, entry.label, entry.weight, function, source=source))
    return terms


def reward_sources(cfg: Config) -> list[dict]:
    """The plugins' source records ({"function", "path", "sha256"}), in `rewards:` order."""
    return [term.source for term in reward_terms(cfg) if term.source is not None]


def check_rewards(cfg: Config, problems: pd.DataFrame) -> None:
    """Import every reward and call each plugin on the first PROBE_ROWS problems, their reference
    answers as completions (message lists for conversations, as in training; one-turn episodes with
    freshly reset environments in a run with tools); RewardError names the entry that fails."""
    rows = problems.head(PROBE_ROWS).reset_index(drop=True)
    plugins = [term for term in reward_terms(cfg) if term.source is not None]
    if not plugins:
        return
    try:
        answers = list(rows["answer"])
        plugin_values(
            plugins,
            rows,
            answers,
            list(rows["prompt"]),
            retokenized(cfg, answers),
            TrainerState(max_steps=cfg.run.iterations),
            RewardLog(len(rows)),
            probe_episodes(cfg, rows) if cfg.episodes else None,
        )
    except RewardError as exc:
        raise RewardError(
            f"{exc} (a probe on {len(rows)} training problems, their reference answers as completions)"
        ) from exc


def probe_episodes(cfg: Config, rows: pd.DataFrame) -> Episodes:
    """The probe's episodes: each reference answer as the one assistant turn, its environment freshly reset."""
    records = rows.to_dict("records")
    return Episodes(
        [[{"role": "assistant", "content": str(row["answer"])}] for row in records],
        [replay(cfg, row, []) for row in records],
    )


def combine(
    terms: Sequence[RewardTerm],
    rows: pd.DataFrame,
    completions: Sequence[str],
    prompts: Sequence[str],
    pass_threshold: float,
    completion_ids: Sequence[Sequence[int]] | None = None,
    state: TrainerState | None = None,
    log: RewardLog | None = None,
    episodes: Episodes | None = None,
) -> list[Reward]:
    """One Reward per (problems row, completion): the weighted sum of the terms' values, each value in
    `components`, `passed`/`verifier`/`details` from the first judge (else total >= pass_threshold).
    `completion_ids`, `state`, `log` and `episodes` are the plugins' `completion_ids`, `trainer_state`,
    `log_metric`/`log_extra` sink and multi-turn `completions`/`environments` (coevo/verification/reward_calls.py)."""
    if len(completions) == 0:
        return []
    values, verdicts, later = {}, None, []
    for term in terms:
        if term.judge:
            judged = term.function(rows, list(completions))
            values[term.name] = [verdict.reward for verdict in judged]
            if verdicts is not None:
                later.append(
                    judged
                )  # a later judge's details are kept beside the first's (e.g. the rubric's per-criterion scores)
            verdicts = verdicts if verdicts is not None else judged
        elif term.source is None:  # a built-in shaping term (`format`) reads the texts
            values[term.name] = checked(
                term.where, term.function(list(completions), **columns_of(rows)), list(rows["id"])
            )
    plugins = [term for term in terms if not term.judge and term.source is not None]
    if plugins:
        log = log if log is not None else RewardLog(len(completions))
        values.update(
            plugin_values(plugins, rows, completions, prompts, completion_ids, state or TrainerState(), log, episodes)
        )
    combined = "+".join(term.name for term in terms)
    rewards = []
    for i in range(len(completions)):
        components = {term.name: values[term.name][i] for term in terms}
        total = float(sum(term.weight * value for term in terms if (value := components[term.name]) is not None))
        if verdicts is None:
            rewards.append(Reward(total, total >= pass_threshold, combined, "", components))
        else:
            details = " ".join(d for d in [verdicts[i].details] + [other[i].details for other in later] if d)
            rewards.append(Reward(total, verdicts[i].passed, verdicts[i].verifier, details, components))
    return rewards


def plugin_values(
    plugins: Sequence[RewardTerm],
    rows: pd.DataFrame,
    completions: Sequence[str],
    prompts: Sequence[str],
    completion_ids: Sequence[Sequence[int]] | None,
    state: TrainerState,
    log: RewardLog,
    episodes: Episodes | None = None,
) -> dict[str, list[float | None]]:
    """Each plugin's checked values for the rows, called with TRL's arguments (async ones concurrently)."""
    args = plugin_arguments(rows, columns_of(rows), completions, prompts, completion_ids, state, log, episodes)
    returned = call_plugins(plugins, args, log)
    return {term.name: checked(term.where, returned[term.name], list(rows["id"])) for term in plugins}


def checked(where: str, returned: object, ids: list[str]) -> list[float | None]:
    """`returned` as one finite float or None per problem id; RewardError naming `where` and the row otherwise."""
    if isinstance(returned, (str, bytes, dict)) or not isinstance(returned, (Sequence, np.ndarray)):
        raise RewardError(
            f"{where} returned a {type(returned).__name__}; expected a list of {len(ids)} floats (or None)"
        )
    if len(returned) != len(ids):
        raise RewardError(f"{where} returned {len(returned)} values for {len(ids)} completions")
    values: list[float | None] = []
    for i, (value, problem) in enumerate(zip(returned, ids)):
        if _is_messages(value):
            raise RewardError(
                f"{where} returned a message list for completion {i} (problem {problem!r}): {value!r:.80}; a reward "
                f"is a float — "
                "a conversational completion arrives as [{'role': 'assistant', 'content': text}], read its text as "
                "completion[0]['content']"
            )
        if value is not None and not isinstance(value, numbers.Real):
            raise RewardError(
                f"{where} returned {value!r} ({type(value).__name__}) for completion {i} (problem {problem!r}); "
                f"expected a float, or None for 'not applicable'"
            )
        if value is not None and not math.isfinite(value):
            raise RewardError(
                f"{where} returned {value!r} for completion {i} (problem {problem!r}); return None for 'not applicable'"
            )
        values.append(None if value is None else float(value))
    return values


def _is_messages(value: object) -> bool:
    """A message, or a list of them, as a TRL completion holds them."""
    if isinstance(value, Mapping):
        return True
    return isinstance(value, (list, tuple)) and any(isinstance(item, Mapping) for item in value)


def columns_of(rows: pd.DataFrame) -> dict[str, list]:
    """The plugin keyword arguments of problems rows: each column as a list, a user file's `user_fields`
    fields unpacked into their own columns (None where a row lacks one)."""
    columns = {name: rows[name].tolist() for name in rows.columns if name != EXTRA}
    if EXTRA in rows.columns:
        extras = [json.loads(text) for text in rows[EXTRA]]
        for key in dict.fromkeys(key for extra in extras for key in extra):
            columns[key] = [extra.get(key) for extra in extras]
    return columns


_FENCE = re.compile(r"```[^\n`]*\n.*?```", re.DOTALL)
_BOX = "\\boxed{"


def format_reward(completions: list[str], family: list[str], **_) -> list[float]:
    """1.0 when a completion has the answer format the chat instruction asks for: a closed ``` fence
    for code families, a closed, non-empty \\boxed{} for the rest; else 0.0."""
    return [
        float(bool(_FENCE.search(text)) if fam in CODE_FAMILIES else _closed_box(text))
        for text, fam in zip(completions, family)
    ]


def _closed_box(text: str) -> bool:
    start = text.rfind(_BOX)
    if start < 0:
        return False
    depth, begin = 1, start + len(_BOX)
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return bool(text[begin:i].strip())
    return False


def _family_verifier(cfg: Config) -> Callable:
    return functools.partial(family_verdicts, cfg=cfg)


BUILTIN_REWARDS.add("verifier", Builtin(_family_verifier, judge=True))
BUILTIN_REWARDS.add("format", Builtin(lambda cfg: format_reward))


def _rubric(cfg: Config) -> Callable:
    from coevo.coevolvers.rubrics import (
        rubric_reward,
    )  # the co-evolving rubric's judged reward (coevolver.kind: rubrics)

    return rubric_reward(cfg)


BUILTIN_REWARDS.add("rubric", Builtin(_rubric, judge=True))
