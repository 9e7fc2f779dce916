"""Which training problems an iteration sees: a cursor over seeded shuffles of the train split.

The batch of iteration k is a pure function of (seed, k): position p = (k-1)*per_iter + j walks
epoch e = p // n through permutation(seed, e). Resuming at iteration k therefore needs no saved
cursor, and no problem repeats within a batch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coevo.seeding import derive_seed


class ProblemSampler:
    def __init__(self, train: pd.DataFrame, per_iter: int, seed: int):
        if per_iter > len(train):
            raise ValueError(f"rollout.problems_per_iter={per_iter} exceeds the {len(train)} training problems")
        self.train = train.reset_index(drop=True)
        self.per_iter = per_iter
        self.seed = seed

    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng(derive_seed(self.seed, "epoch", epoch)).permutation(len(self.train))

    def batch(self, iteration: int) -> pd.DataFrame:
        n, chosen = len(self.train), []
        position = (iteration - 1) * self.per_iter
        while len(chosen) < self.per_iter:
            index = int(self._permutation(position // n)[position % n])
            if index not in chosen:
                chosen.append(index)
            position += 1
        return self.train.iloc[chosen].reset_index(drop=True)
