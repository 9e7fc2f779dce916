"""The policy-update stage: verified rollouts into optimizer steps of the registered objective.

stage.py (`policy_update`), steps.py (the update stage's optimizer, training and checkpoint steps),
objectives/ (the losses by `objective.name`), logprobs.py (the trainer's per-token log-probabilities),
prefix.py (the group's shared prompt encoded once), teacher.py (the self-teacher's privileged
context), mismatch.py (how far the engine's logprobs are from the trainer's), distributed.py (the
same update in torchrun DDP ranks) and rank.py (the module each rank runs).
"""
