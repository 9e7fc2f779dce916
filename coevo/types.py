"""Records that cross module boundaries inside the library.

Tables that cross *stage* boundaries (problems, rollouts, rewards) are pandas frames checked by the
pandera schemas in `schemas/`; these dataclasses are the in-memory shapes the library passes around.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Reward:
    """A verifier's judgement of one completion."""

    reward: float
    passed: bool
    verifier: str
    details: str = ""
    components: dict[str, float | None] = field(
        default_factory=dict, hash=False
    )  # each `rewards` entry's value, by name (coevo/verification/rewards.py)


@dataclass
class Generation:
    """One sampled completion: its tokens, text and the engine's per-token sampling logprobs."""

    prompt_ids: list[int]  # the prompt as the engine tokenised it
    token_ids: list[int]  # the completion, ending in EOS when finished
    logprobs: list[float]  # per completion token, under the distribution it was sampled from
    text: str  # the answer: the last assistant turn's text of an episode
    finished: bool = True  # False when cut at max_new_tokens before EOS
    # A multi-turn episode (coevo/rollout/episodes.py): token_ids hold the policy's turns and the tool
    # turns between them; policy_mask is 1 on the policy's tokens (None: every token is the policy's).
    policy_mask: list[int] | None = None
    messages: list[dict] = field(default_factory=list)  # the turns after the prompt: assistant and tool
    turns: int = 1  # assistant turns
    tool_calls: int = 0
    tool_errors: int = 0
    truncated: bool = False  # ended by environment.max_turns or max_tokens with a call unanswered
    prompt: str | None = None  # the episode's prompt text (an environment's observation appended), when known
    environment: object | None = field(default=None, repr=False, compare=False)  # its environment as it ended


@dataclass(frozen=True)
class ContextVariant:
    """A slice of a problem's rollout group: `n` completions of a role under `context` (skill texts)."""

    problem_id: str
    variant: str  # "solo" (no probe), "base" or "probe" (base + the probed skill)
    skills: tuple[str, ...] = ()  # skill ids rendered into the prompt, in order
    probe_skill: str = ""  # the skill whose marginal utility this group measures ("" if none)
    n: int = 1
    texts: tuple[str, ...] = field(default=(), compare=False)  # the skills' texts, same order as `skills`
    role: str = "solver"  # the role posed the problem (coevo/rollout/roles.py)
