"""The generation engine protocol every engine implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import torch

from coevo.config import SamplingConfig
from coevo.types import Generation


class Engine(Protocol):
    tokenizer: (
        object  # the served model's tokenizer (prompts are rendered with its chat template under prompt.format: chat)
    )
    add_special_tokens: (
        bool  # whether prompts are encoded with the tokenizer's special tokens (False for chat-templated text)
    )

    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        n: int,
        sampling: SamplingConfig,
        seed: int,
        stop_at_newline: bool = False,
    ) -> list[list[Generation]]:
        """n completions per prompt (outer list follows `prompts`, each a string or its token ids),
        each with token ids and the per-token logprobs of the distribution it was sampled from
        (temperature applied, before top-p).
        `stop_at_newline`: a completion also ends at its first line break (for writers that keep one
        line: their first lines are unchanged, the tokens after them are not generated)."""
        ...

    def load_weights(self, weights: Mapping[str, torch.Tensor] | str | Path) -> None:
        """Serve new weights in place, from a state dict or a checkpoint directory (no restart)."""
        ...
