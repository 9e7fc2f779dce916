"""How a reward plugin is called: the keyword arguments of TRL's `GRPOTrainer(reward_funcs=...)`,
built once per batch, and async plugins run concurrently.

Method: TRL's reward-function contract (trl 1.16, `GRPOTrainer._calculate_rewards`). A plugin is
called as `f(prompts=..., completions=..., completion_ids=..., trainer_state=..., log_metric=...,
log_extra=..., **columns)` and returns one float (or None, "not applicable") per completion:

- `completions`: for a conversational problem (one with `messages`, TRL's conversational format)
  the completion as a message list, `[{"role": "assistant", "content": text}]`, so a function
  written for TRL reads `completion[0]["content"]`; otherwise the completion text.
- `prompts`: for a conversational problem its conversation as the dataset holds it (a list of
  {role, content}, ending in the user's question); otherwise the full prompt text the policy saw.
- `completion_ids`: the completion's token ids as the engine sampled them (in the held-out
  evaluation and the prepare stage's probe, which keep texts only: the text encoded by the policy's
  tokenizer, without special tokens; `retokenized`).
- `trainer_state`: a `TrainerState` (global_step = the iteration, max_steps = run.iterations,
  epoch = problems rolled out so far / training problems).
- `log_metric(name, value)`: a scalar, averaged over the batch's calls; it lands in MLflow as
  `verify/logged/<name>` and in the rewards table's `logged` column (and the catalog).
- `log_extra(column, values)`: one value per completion, kept per row in the `logged` column.
- every problems-table column (`id`, `family`, `level`, `prompt` (the question), `answer`,
  `messages` as a list of turns, and each extra field of the user's dataset).

Async plugins (`async def`) of one batch are awaited together with asyncio.gather, after the
synchronous ones, on a private event loop (in a worker thread when the caller already runs one, as a
notebook does).

Departures from TRL:
1. `trainer_state` is coevo's own small object, not transformers' `TrainerState`: it carries the
   fields a reward schedule reads (global_step, max_steps, epoch, num_train_epochs,
   is_world_process_zero) and nothing a trainer owns.
2. A `log_extra` column must hold exactly one value per completion, and each value must be JSON
   (it is stored); a `log_metric` value must be a finite number. Anything else is a RewardError
   naming the entry (TRL stores whatever it gets).
3. A function that raises (sync or async) stops the batch with a RewardError naming
   `rewards[i].function`, never a NaN.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import math
import numbers
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from coevo.errors import InputError
from coevo.rollout.prompting import conversation_of
from schemas.problems import MESSAGES


class RewardError(InputError):
    """A reward function could not be loaded or returned something unusable; names `rewards[i].function`."""


@dataclass(frozen=True)
class Episodes:
    """What a reward plugin reads of multi-turn episodes (coevo/rollout/episodes.py): per completion,
    its turns after the prompt (TRL's `completions` of a multi-turn run) and its environment (TRL's
    `environments`; None without an environment class)."""

    messages: list[list[dict]]
    environments: list[object | None]


@dataclass(frozen=True)
class TrainerState:
    """The `trainer_state` a reward function receives (the fields of TRL's that a schedule reads)."""

    global_step: int = 0  # the iteration whose rollouts are scored (0: the bootstrap, the probe, evaluation)
    max_steps: int = 0  # run.iterations
    epoch: float = 0.0  # problems rolled out so far / training problems
    num_train_epochs: float = 0.0  # the epoch reached at max_steps
    is_world_process_zero: bool = True


class RewardLog:
    """What plugins log in one batch through `log_metric` / `log_extra`."""

    def __init__(self, n: int):
        self.n = n
        self.metrics: dict[str, list[float]] = {}
        self.extra: dict[str, list] = {}
        self.where = "a reward function"  # the entry being called, for error messages

    def log_metric(self, name: str, value: float) -> None:
        if not isinstance(name, str) or not name:
            raise RewardError(f"{self.where}: log_metric's name must be a non-empty string, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            raise RewardError(f"{self.where}: log_metric({name!r}, {value!r}): the value must be a finite number")
        self.metrics.setdefault(name, []).append(float(value))

    def log_extra(self, column: str, values: Sequence) -> None:
        if not isinstance(column, str) or not column:
            raise RewardError(f"{self.where}: log_extra's column must be a non-empty string, got {column!r}")
        values = list(values)
        if len(values) != self.n:
            raise RewardError(
                f"{self.where}: log_extra({column!r}, ...) got {len(values)} values for {self.n} completions"
            )
        try:
            json.dumps(values)
        except (TypeError, ValueError) as exc:
            raise RewardError(
                f"{self.where}: log_extra({column!r}, ...) values must be JSON (they are stored): {exc}"
            ) from exc
        self.extra.setdefault(column, []).extend(values)

    def rows(self) -> list[str]:
        """The `logged` column: per completion a JSON object {"extra": {column: value}, "metric": {name: mean}}."""
        metric = {name: sum(values) / len(values) for name, values in self.metrics.items()}
        out = []
        for i in range(self.n):
            record = {
                "extra": {column: values[i] for column, values in self.extra.items() if i < len(values)},
                "metric": metric,
            }
            out.append(
                json.dumps(record, separators=(",", ":"), ensure_ascii=False) if record["extra"] or metric else "{}"
            )
        return out


def retokenized(cfg, texts: Sequence[str]) -> list[list[int]]:
    """`texts` encoded by the run's policy tokenizer (policy.checkpoint, else the bootstrapped tiny
    policy's, else the tiny policy's character tokenizer it will be built with), no special tokens."""
    return (
        [
            list(ids)
            for ids in _tokenizer(str(cfg.policy.checkpoint or cfg.bootstrap_dir))(
                list(texts), add_special_tokens=False
            )["input_ids"]
        ]
        if texts
        else []
    )


@functools.lru_cache(maxsize=4)
def _tokenizer(directory: str):
    if Path(directory).is_dir():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(directory, local_files_only=True)
    from coevo.model.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


def is_async(function: Callable) -> bool:
    """Whether calling `function` gives a coroutine (an `async def`, or an object whose __call__ is one)."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(getattr(function, "__call__", None))


def conversational(rows: pd.DataFrame) -> list[bool]:
    """Per problems row: whether it is a conversation (TRL's conversational format)."""
    if MESSAGES not in rows.columns:
        return [False] * len(rows)
    return [bool(text) and text != "null" for text in rows[MESSAGES].fillna("")]


def plugin_arguments(
    rows: pd.DataFrame,
    columns: dict[str, list],
    completions: Sequence[str],
    prompts: Sequence[str],
    completion_ids: Sequence[Sequence[int]] | None,
    state: TrainerState,
    log: RewardLog,
    episodes: Episodes | None = None,
) -> dict:
    """The keyword arguments every plugin of the batch is called with (TRL's names and shapes); with
    `episodes`, `completions` are the episodes' turns and `environments` their environments."""
    chat = conversational(rows)
    records = rows.to_dict("records")
    args = dict(columns)
    if MESSAGES in args:
        args[MESSAGES] = [conversation_of(record) or None for record in records]
    args["completions"] = [
        [{"role": "assistant", "content": text}] if is_chat else text for text, is_chat in zip(completions, chat)
    ]
    args["prompts"] = [
        conversation_of(record) if is_chat else prompt for record, prompt, is_chat in zip(records, prompts, chat)
    ]
    args["completion_ids"] = (
        [list(ids) for ids in completion_ids] if completion_ids is not None else [None] * len(completions)
    )
    args["trainer_state"], args["log_metric"], args["log_extra"] = state, log.log_metric, log.log_extra
    if episodes is not None:
        args["completions"], args["environments"] = episodes.messages, episodes.environments
    return args


def call_plugins(terms: Sequence, args: dict, log: RewardLog) -> dict[str, object]:
    """Each plugin term's raw return value, by name: the synchronous ones in order, then the async
    ones concurrently. A function that raises is a RewardError naming its entry."""
    returned: dict[str, object] = {}
    for term in (t for t in terms if not is_async(t.function)):
        log.where = term.where
        try:
            returned[term.name] = term.function(**args)
        except RewardError:
            raise
        except Exception as exc:
            raise RewardError(f"{term.where} raised {type(exc).__name__}: {exc}") from exc
    pending = [t for t in terms if is_async(t.function)]
    if pending:
        log.where = "an async reward function"
        for term, value in zip(pending, _gather([t.function for t in pending], args)):
            if isinstance(value, RewardError):
                raise value
            if isinstance(value, BaseException):
                raise RewardError(f"{term.where} (async) raised {type(value).__name__}: {value}") from value
            returned[term.name] = value
    return returned


def _gather(functions: Sequence[Callable], args: dict) -> list:
    """The async functions' results (or the exceptions they raised), awaited concurrently."""

    async def together() -> list:
        return await asyncio.gather(*(function(**args) for function in functions), return_exceptions=True)

    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop in this thread: the usual case
        return asyncio.run(together())
    with ThreadPoolExecutor(max_workers=1) as pool:  # a notebook's loop is running: use a thread of our own
        return pool.submit(asyncio.run, together()).result()
