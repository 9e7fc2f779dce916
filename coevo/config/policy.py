"""Settings of the policy and its update: the model (shape, LoRA, distributed update), the tiny
policy's warm start, the objective with its self-teacher, and the optimizer."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from coevo.config.base import Strict


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


class ToolCallsConfig(Strict):
    steps: int = Field(
        0,
        ge=0,
        description=(
            "Supervised steps on demonstrated episodes before RL, in a run with tools or an environment: the "
            "built-in environment's expert (coevo/environments/experts.py: the calculator, the guessing game) plays "
            "training problems through the run's tools, and checkpoint 0 is the policy fine-tuned on its assistant "
            "turns (coevo/model/tool_warm_start.py), so a model that writes no tool call learns the format. 0 = none."
        ),
    )
    lr: float = Field(1e-5, gt=0, description="AdamW learning rate of the tool warm start (full fine-tuning).")
    batch_size: int = Field(8, ge=1, description="Demonstrated episodes per step of the tool warm start.")


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
    tool_calls: ToolCallsConfig = Field(
        default_factory=ToolCallsConfig,
        description=(
            "The tool warm start: demonstrated episodes of a built-in environment, on the checkpoint params name or "
            "on the tiny policy after its warm start."
        ),
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
