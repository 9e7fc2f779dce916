"""Settings of the co-evolvers, one model per kind (skill bank, memory, curriculum with its proposer,
rubrics, harness) and `CoevolverConfig`, the entry of the `coevolver:` list."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    TypeAdapter,
    model_validator,
)

from coevo.config.base import Strict


class ProposerConfig(Strict):
    """The curriculum's problem proposer (coevolver.curriculum.proposer; coevo/problems/proposer.py)."""

    enabled: bool = Field(
        False,
        description=(
            "Write new training problems at the solver's frontier each iteration (kind curriculum, arithmetic source "
            "only; another kind ignores it); false = the training problems stay those of data/problems."
        ),
    )
    band: float = Field(
        0.25,
        gt=0,
        lt=0.5,
        description=(
            "A category (family, level) is at the frontier when |pass_rate - 0.5| <= band; the proposer writes more "
            "problems of it; one below the band gets none."
        ),
    )
    promote_above: float = Field(
        0.9,
        gt=0.5,
        le=1,
        description=(
            "A category whose pass rate is at least this is solved: the proposer writes its family's next level (and "
            "the add_families)."
        ),
    )
    per_iter: int = Field(
        32, ge=1, description="Most problems accepted per proposer call (split evenly over the chosen categories)."
    )
    min_samples: int = Field(
        8,
        ge=1,
        description=(
            "Rollouts a category needs in the latest stats before its pass rate is trusted; fewer = the category is "
            "skipped."
        ),
    )
    max_level: int = Field(
        4,
        ge=1,
        le=9,
        description=(
            "Highest level (operand digits) a promotion may reach; combinations stop at their own top level (addmul: "
            "6)."
        ),
    )
    add_families: list[Literal["add", "sub", "mul", "addmul"]] = Field(
        [],
        description=(
            "Families (or combinations such as addmul = a+b*c) the proposer may add at level 1 once some category is "
            "solved and the family is not yet in the stats; [] = none."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _no_old_keys(cls, data):
        """`drop_below` (removed) is read from runs and files written before and dropped: no value of it
        changed a choice, since a category below the band gets nothing with or without it."""
        if isinstance(data, dict) and "drop_below" in data:
            return {key: value for key, value in data.items() if key != "drop_below"}
        return data

    @model_validator(mode="after")
    def _check(self) -> ProposerConfig:
        if not 0.5 + self.band <= self.promote_above:
            raise ValueError(
                "proposer: need 0.5 + band <= promote_above (the frontier band must not overlap the solved range)"
            )
        if len(set(self.add_families)) != len(self.add_families):
            raise ValueError(f"proposer.add_families must not repeat; got {self.add_families}")
        return self


class WriterConfig(Strict):
    kind: Literal["worked_example", "openai"] = Field(
        "worked_example",
        description=(
            "Skill writer: the policy's own verified trajectories as worked examples, or an OpenAI-compatible chat "
            "endpoint."
        ),
    )
    base_url: str | None = Field(
        None, description="OpenAI-compatible endpoint (e.g. http://127.0.0.1:8000/v1) for kind=openai."
    )
    model: str | None = Field(None, description="Model name sent to the endpoint for kind=openai.")
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="Environment variable holding the endpoint's API key (a placeholder is sent if unset).",
    )
    timeout_s: float = Field(30.0, gt=0, description="Per-request timeout for kind=openai.")
    candidates_per_iter: int = Field(4, ge=0, description="New candidate skills written per iteration.")


class SkillBankConfig(Strict):
    top_k: int = Field(1, ge=0, description="Skills retrieved into the prompt per problem.")
    admit_threshold: float = Field(
        0.05, description="A trial skill is admitted when its mean matched-group gap exceeds this."
    )
    min_count: int = Field(
        2,
        ge=1,
        description=(
            "Matched groups a trial skill needs before it is judged (with admission=sequential: groups with reward "
            "variance, before it can be admitted)."
        ),
    )
    stable_count: int = Field(
        6,
        ge=1,
        description="Matched groups an active skill needs, with utility above admit_threshold, to become stable.",
    )
    retire_threshold: float = Field(
        0.0, description="An active or stable skill is retired when its running utility falls below this."
    )
    utility_decay: float = Field(
        0.7, ge=0, lt=1, description="Weight of the old value in the running utility (exponential moving average)."
    )
    max_trials: int = Field(
        16, ge=0, description="Most skills on trial at once; new candidates beyond this are not written."
    )
    max_active: int = Field(
        64, ge=1, description="Most active+stable skills; the lowest-utility ones are retired beyond it."
    )
    admission: Literal["threshold", "sequential"] = Field(
        "sequential",
        description=(
            "How a trial is judged: 'threshold' (mean gap > admit_threshold after min_count matched groups) or "
            "'sequential' (one-sided stratified permutation z-test on the matched groups with reward variance, alpha "
            "spent over max_count groups)."
        ),
    )
    alpha: float = Field(
        0.1,
        gt=0,
        lt=1,
        description=(
            "admission=sequential: false-admission rate of a skill with no effect, over all the looks of its trial."
        ),
    )
    max_count: int = Field(
        32,
        ge=1,
        description=(
            "admission=sequential: matched groups (informative or not) after which a trial not yet admitted is "
            "rejected."
        ),
    )
    futility_z: float | None = Field(
        0.0,
        description=(
            "admission=sequential: also reject a trial at a look where z is at or below this (stops probing skills "
            "that look useless early); null = only at max_count."
        ),
    )
    retire_z: float | None = Field(
        0.0,
        description=(
            "Retire an active or stable skill when its discounted test statistic (the sequential test's z over its "
            "matched groups with reward variance, each older group weighted by evidence_decay) is at or below this, "
            "instead of the utility rule; null = retire_threshold on the running utility."
        ),
    )
    evidence_decay: float = Field(
        0.95,
        gt=0,
        le=1,
        description=(
            "Weight per newer informative group of the older evidence in retire_z's statistic (1 = no forgetting)."
        ),
    )
    skip_saturated: bool = Field(
        True,
        description=(
            "Probe no skill on a question whose previous group (an earlier iteration) passed all or none of its "
            "rollouts: such a group carries no information about the skill."
        ),
    )

    @model_validator(mode="after")
    def _counts_ordered(self) -> SkillBankConfig:
        if self.admission == "sequential" and self.max_count < self.min_count:
            raise ValueError(
                f"skill_bank.max_count ({self.max_count}) must be >= skill_bank.min_count ({self.min_count})"
            )
        return self


class MemoryConfig(Strict):
    levels: list[Literal[1, 2, 3]] = Field(
        [1, 2, 3],
        min_length=1,
        description=(
            "Memory levels written: 1 raw verified trajectories, 2 reflected lessons per family, 3 patterns "
            "recurring across problems."
        ),
    )
    top_k: int = Field(
        1,
        ge=0,
        description="Entries per level in the self-teacher's context (and in the held-out evaluation with memory).",
    )
    reflector: Literal["policy", "openai"] = Field(
        "policy",
        description=(
            "Who writes levels 2 and 3: the policy itself (greedy, from the current checkpoint), or the "
            "OpenAI-compatible endpoint of coevolver.writer."
        ),
    )
    lessons_per_iter: int = Field(
        2, ge=0, description="Level-2 lessons written per iteration (families with the most mixed outcomes first)."
    )
    patterns_every: int = Field(5, ge=1, description="Write one level-3 pattern every this many iterations.")
    max_chars: int = Field(120, ge=8, description="Longest entry the policy reflector writes (characters).")


class CurriculumConfig(Strict):
    alpha: float = Field(
        0.5,
        gt=0,
        le=1,
        description=(
            "TD(0) step of the arm values: value <- (1 - alpha) * value + alpha * (mean |advantage| of the arm's "
            "groups this iteration)."
        ),
    )
    temperature: float = Field(
        0.03,
        gt=0,
        description=(
            "Boltzmann temperature of the arm distribution softmax(value / temperature); mean |advantage| lies in "
            "[0, 0.5] for 0/1 rewards (<= 0.17 measured), so 0.2 left the draws near uniform "
            "(docs/benchmarks/curriculum.md)."
        ),
    )
    epsilon: float = Field(
        0.05,
        ge=0,
        le=1,
        description=(
            "Uniform floor mixed into the arm distribution, (1 - epsilon) * softmax + epsilon / arms, so no category "
            "starves."
        ),
    )
    category: list[str] = Field(
        ["family", "level"],
        min_length=1,
        description=(
            "Problem columns whose values name an arm (a user file's own fields are looked up too); a column the "
            "problems lack is an error."
        ),
    )
    proposer: ProposerConfig = Field(
        default_factory=ProposerConfig,
        description=(
            "New training problems at the solver's frontier, written after each iteration into the curriculum's "
            "version (proposals.jsonl) and drawn from like the training split; the test split never changes."
        ),
    )


class RubricsConfig(Strict):
    variant: Literal["evolving", "static"] = Field(
        "evolving",
        description=(
            "'evolving' (EvoRubrics): after each iteration, criteria with no within-group variance are pruned and "
            "replaced by new ones the writer drafts from the best and worst responses; 'static': the seed criteria "
            "are kept as they are (the baseline arm)."
        ),
    )
    writer: Literal["endpoint", "seed"] = Field(
        "endpoint",
        description=(
            "Who drafts new criteria: the OpenAI-compatible endpoint of coevolver.writer (from the current rollouts' "
            "best and worst responses, no reference answers), or 'seed' (the next unused criteria of the built-in "
            "seed pool; deterministic)."
        ),
    )
    n_criteria: int = Field(
        4,
        ge=1,
        description=(
            "Criteria in the initial rubric (the first of the built-in seed pool) and the most a family's rubric holds."
        ),
    )
    prune_below: float = Field(
        1e-6,
        ge=0,
        description=(
            "A criterion whose discrimination (mean over the iteration's rollout groups of the within-group variance "
            "of its scores, scores in [0, 1]) is at most this is pruned."
        ),
    )
    min_groups: int = Field(
        2, ge=1, description="Rollout groups of a family a criterion needs in one iteration before it can be pruned."
    )
    shown: int = Field(2, ge=1, description="Best and worst responses (each) shown to the writer per family.")
    pass_threshold: float = Field(
        0.5,
        ge=0,
        le=1,
        description=(
            "A rollout 'passes' the rubric when its weighted judge score is at least this (the `passed` of the "
            "rubric reward when it is the first judge in `rewards`)."
        ),
    )
    judge_workers: int = Field(
        4,
        ge=1,
        description=(
            "Concurrent judge requests (coevo/verification/judge.py); the judge is the endpoint of coevolver.writer."
        ),
    )
    judge_scoring: Literal["reply", "yes_no"] = Field(
        "reply",
        description=(
            "How the judge scores (coevo/verification/judge.py): 'reply' (it writes a number 0..10) or 'yes_no' "
            "(P(yes) / (P(yes) + P(no)) over its first token's top log-probabilities; the endpoint must return "
            "logprobs, as vLLM's server does; for small judges that never write a parsable number)."
        ),
    )


class HarnessConfig(Strict):
    collapse_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description=(
            "Groups whose completions are all identical, as a share of the iteration's groups, from which the "
            "harness diagnoses collapsed sampling."
        ),
    )
    temperature_step: float = Field(
        2.0,
        gt=1,
        description=(
            "A collapse's candidate fix: sampling temperature x this (from at least 0.05), capped at max_temperature."
        ),
    )
    max_temperature: float = Field(1.0, gt=0, description="Highest sampling temperature the harness proposes.")
    format_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description=(
            "Failed completions that were cut at max_new_tokens or state no number the verifier reads (numeric "
            "answers), as a share of the completions the math instruction applies to, from which the harness "
            "diagnoses a wrong answer-format instruction (prompt.format: chat)."
        ),
    )
    instructions: list[str] = Field(
        ["Put the final answer in \\boxed{}.", "Reply with the number only."],
        description=(
            "Answer-format instructions (prompt.instruction.math) a format failure's fix tries, in order (the one in "
            "force is skipped)."
        ),
    )
    truncation_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description=(
            "Unfinished completions (cut at max_new_tokens), as a share, from which the harness diagnoses truncation."
        ),
    )
    max_tokens: int = Field(
        64, ge=1, description="Highest max_new_tokens the harness proposes (a truncation's fix doubles it)."
    )
    turn_limit_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description=(
            "Episodes (tools or environment.factory) that ran out of environment.max_turns with a tool call "
            "unanswered, as a share of the episodes, from which the harness diagnoses too few turns."
        ),
    )
    max_turns: int = Field(
        16, ge=1, description="Highest environment.max_turns the harness proposes (a turn limit's fix doubles it)."
    )
    misrank_share: float = Field(
        0.1,
        gt=0,
        le=1,
        description=(
            "Pairs of one group's completions, one passing the gold `verifier` and one failing it, where the failing "
            "one's reward is at least the passing one's, as a share of such pairs, from which the harness diagnoses "
            "a shaping term (a `rewards:` entry other than `verifier`) that rewards the wrong thing; its fix sets "
            "the term's weight to 0."
        ),
    )
    backtest_before: Literal["rollouts", "resample"] = Field(
        "rollouts",
        description=(
            "Where the backtest's before arm (the harness in force) comes from. rollouts: a seeded draw splits the "
            "iteration's batch in two; the diagnosis reads one half, and the other half's own rollouts (the same "
            "frozen policy under the same settings) are the before arm, so only the candidate is sampled, on that "
            "half (at most backtest_problems problems): one arm of half a batch (a shaping term's weight changes "
            "only the scoring: both arms are sampled there with one seed, the same samples scored twice). The "
            "halves are disjoint so that a symptom diagnosed high by chance does not also make the before arm look "
            "worse. resample: the diagnosis reads the whole batch and both arms are sampled, with the same seed, on "
            "a slice of backtest_problems training problems fixed for the run (two arms). A batch with context "
            "variants (a skill bank or memory in the list) is always resampled: its rollouts are not what the "
            "candidate would be sampled as."
        ),
    )
    backtest_problems: int = Field(
        16,
        ge=1,
        description=(
            "Problems of the backtest slice, rollout.group_size completions each per sampled arm (backtest_before "
            "resample: a seeded choice from the training split fixed for the run; rollouts: at most this many of "
            "the batch's backtest half)."
        ),
    )
    min_gain: float = Field(
        0.1,
        ge=0,
        le=1,
        description=(
            "A change is accepted when its measure (share of groups with reward variance, of completions without a "
            "format failure, of finished completions, or of pairs ranked right) gains at least this (or half of what "
            "it could gain, 1 - before, when that is less) on the backtest slice ..."
        ),
    )
    max_pass_drop: float = Field(
        0.05,
        ge=0,
        description=(
            "... and its pass rate (the gold verdict `passed`; the reward moves with shaping terms and weights) "
            "falls by at most this."
        ),
    )
    retry_after: int = Field(5, ge=1, description="Iterations before a rejected change may be backtested again.")


class UnitTestsConfig(Strict):
    max_per_problem: int = Field(
        8, ge=1, description="Most tests the bank keeps per problem (the oldest are dropped first)."
    )


class CoevolverConfig(Strict):
    kind: Literal["skill_bank", "memory", "none", "curriculum", "rubrics", "harness", "unit_tests"] = Field(
        "skill_bank",
        description=(
            "Co-evolver: a skill bank, a procedural memory (PMD; pair it with a self-distillation objective), none "
            "(plain GRPO), curriculum (a bandit over problem categories chooses each batch; SEC), rubrics "
            "(EvoRubrics: a judged, co-evolving rubric; pair it with the 'rubric' reward), or harness (the sampling "
            "settings, the answer-format instruction and the shaping terms' weights, changed when a backtest shows "
            "it helps; EvoTrainer), or unit_tests (CURE's test bank: the tester role's accurate, discriminating "
            "tests, which join the pass table of later iterations)."
        ),
    )
    frozen: bool = Field(False, description="Ablation: the co-evolver stops changing (see frozen_after).")
    frozen_after: int = Field(
        0,
        ge=0,
        description=(
            "With frozen=true, the co-evolver still evolves for this many iterations first (0 = frozen from the "
            "bootstrap)."
        ),
    )
    update_context: Literal["strip", "keep"] = Field(
        "strip",
        description=(
            "Policy update on skill-conditioned rollouts: 'strip' trains the bare question (the student runs without "
            "skills), 'keep' trains with the context."
        ),
    )
    writer: WriterConfig = Field(default_factory=WriterConfig, description="Where candidate skills come from.")
    skill_bank: SkillBankConfig = Field(
        default_factory=SkillBankConfig,
        description=(
            "Admission, lifecycle and retrieval of the skill bank (the memory's entries use the same machinery)."
        ),
    )
    memory: MemoryConfig = Field(default_factory=MemoryConfig, description="The procedural memory (kind=memory).")
    rubrics: RubricsConfig = Field(
        default_factory=RubricsConfig,
        description="The co-evolving rubric and its judge (kind=rubrics, reward 'rubric').",
    )
    curriculum: CurriculumConfig = Field(
        default_factory=CurriculumConfig, description="The curriculum bandit (kind=curriculum)."
    )
    harness: HarnessConfig = Field(
        default_factory=HarnessConfig, description="The harness's diagnoses and backtests (kind=harness)."
    )
    unit_tests: UnitTestsConfig = Field(
        default_factory=UnitTestsConfig, description="The test bank (kind=unit_tests; CURE)."
    )

    def frozen_at(self, iteration: int) -> bool:
        """Whether the co-evolver is frozen when iteration `iteration` runs (rollout and update)."""
        return self.frozen and iteration > self.frozen_after


_COEVOLVER_LIST = TypeAdapter(list[CoevolverConfig])


CONTEXT_KINDS = frozenset(
    {"skill_bank", "memory"}
)  # co-evolvers whose context goes into the rollout prompts (role "context")
