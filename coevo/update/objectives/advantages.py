"""Group-relative advantages (GRPO, Dr.GRPO) and the zero-variance group filter (DAPO)."""

from __future__ import annotations

from torch import Tensor


def group_advantages(rewards: Tensor, std_normalize: bool, eps: float) -> Tensor:
    """Advantages of G completions per problem relative to their own group.

    rewards [N, G] -> advantages [N, G]:
      std_normalize=True  (GRPO):    (r - mean_g) / (std_g + eps)
      std_normalize=False (Dr.GRPO): r - mean_g
    std_g is the UNBIASED sample std (torch.std default, divides by G - 1), as in the common GRPO
    implementations (TRL, verl); it therefore needs G >= 2. A group whose rewards are all equal gets
    zero advantages either way (0 / (0 + eps) = 0).
    """
    if not rewards.is_floating_point():
        rewards = rewards.float()
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # [N, G]
    if not std_normalize:
        return centred
    if rewards.shape[1] < 2:
        raise ValueError(f"std-normalised group advantages need group size >= 2, got {rewards.shape[1]}")
    return centred / (rewards.std(dim=1, keepdim=True) + eps)  # [N, G]


def nonzero_variance_groups(rewards: Tensor) -> Tensor:
    """rewards [N, G] -> bool [N]: True where the group's rewards are not all equal (there is signal)."""
    return (rewards != rewards[:, :1]).any(dim=1)  # [N]
