"""The policy as the co-evolvers call it: greedy continuations for a skill bank's or memory's
reflection (`policy_generator`) and the harness's backtest arm (`backtest_sampler`), each loaded
only when first called."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from coevo.coevolvers.base import TextGenerator
from coevo.config import Config, SamplingConfig
from coevo.model.cache import live_engine
from coevo.model.checkpoint import policy_version
from coevo.rollout.stage import run_rollouts
from coevo.seeding import derive_seed
from coevo.types import ContextVariant
from coevo.verification.stage import verify_rollouts


def backtest_sampler(cfg: Config, checkpoint: Path, it: int):
    """The harness's backtest arm: the frozen policy at `checkpoint` samples rollout.group_size
    completions of each problem under a trial config (a harness applied to `cfg`; seeded: both arms
    draw with the same seed), and the verifier scores them."""

    def sample(batch: pd.DataFrame, trial: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
        variants = [
            ContextVariant(problem_id=str(pid), variant="solo", n=cfg.rollout.group_size) for pid in batch["id"]
        ]
        frame = run_rollouts(
            live_engine(cfg, checkpoint), variants, batch, trial, it, policy_version(checkpoint), "harness-backtest"
        )
        return frame, verify_rollouts(frame, batch, trial)

    return sample


def policy_generator(cfg: Config, checkpoint: str | Path, it: int) -> TextGenerator:
    """Greedy continuations by the policy at `checkpoint`, loaded only when first called."""

    def generate(prompts: list[str], max_new_tokens: int) -> list[str]:
        engine = live_engine(cfg, checkpoint)
        greedy = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens)
        return [
            group[0].text
            for group in engine.generate(prompts, 1, greedy, derive_seed(cfg.seed, it, "reflect"), stop_at_newline=True)
        ]

    return generate
