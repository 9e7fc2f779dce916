"""TRL's GRPOTrainer set up to do the same work as one coevo configuration (shared by the TRL benches).

Matched: the bootstrap checkpoint and its tokenizer, the training problems' `prompt` column as plain
text (no chat template; both tokenize with the same tokenizer call, BOS included), coevo's verifier
(`check_answer`) as the reward function, prompts x completions per generation (problems_per_iter x
group_size), max completion length, temperature and top-p, optimizer steps per generation
(`steps_per_generation` = rollouts / optim.minibatch_size), AdamW lr/betas/weight decay, constant
learning rate, gradient clipping, PPO clip bounds (epsilon / epsilon_high), std-normalised group
advantages, token-mean aggregation (TRL's `dapo` loss), no reference model (beta 0), seed, and no
gradient checkpointing (TRL's default turns it on, which also switches off the KV cache in generation).

A real model (policy.checkpoint) brings two more: with policy.lora.rank > 0 TRL gets the same
adapters (`peft_config=LoraConfig(...)` with coevo's rank, alpha, dropout and target modules) and
coevo's adapter learning rate (policy.lora.lr, else optim.lr); with prompt.format: chat its prompts
are conversations (TRL's conversational format, so it applies the tokenizer's chat template), built
by coevo's own chat renderer (`ChatRenderer.messages`: system turn, question, instruction), so both
template the same turns, and the reward function reads the assistant turn of each completion.
"""

from __future__ import annotations

from pathlib import Path

from coevo.config import Config

TRL_VERSION_PIN = "1.16.0"  # pyproject's `bench` extra; the benches record trl.__version__ as run


def trl_version() -> str:
    import trl

    return trl.__version__


def build_trainer(cfg: Config, checkpoint: Path, output_dir: Path, max_generations: int, seed: int):
    """A GRPOTrainer on CPU that runs `max_generations` generation batches of cfg's size."""
    import pandas as pd
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from coevo.problems.math_verifier import check_answer
    from coevo.rollout.prompting import ChatRenderer

    rollouts = cfg.rollouts_per_iter
    if rollouts % cfg.optim.minibatch_size:
        raise ValueError(
            f"rollouts per iteration ({rollouts}) must be a multiple of optim.minibatch_size for TRL's "
            f"steps_per_generation"
        )
    steps_per_generation = rollouts // cfg.optim.minibatch_size
    problems = pd.read_parquet(Path(cfg.problems.data_dir) / "train.parquet")[["prompt", "answer"]]
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    rows = problems.to_dict("records")
    if cfg.prompt.format == "chat":  # TRL's conversational format: it applies the chat template itself
        renderer = ChatRenderer(cfg.prompt, tokenizer, checkpoint)
        rows = [{"prompt": renderer.messages(row), "answer": row["answer"]} for row in rows]

    def verifier_reward(completions: list, answer: list[str], **_) -> list[float]:
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]  # conversational: [assistant turn]
        return [check_answer(text, expected).reward for text, expected in zip(texts, answer)]

    args = GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        seed=seed,
        per_device_train_batch_size=cfg.optim.minibatch_size,
        steps_per_generation=steps_per_generation,
        num_generations=cfg.rollout.group_size,
        num_iterations=cfg.optim.epochs,
        max_completion_length=cfg.sampling.max_new_tokens,
        temperature=cfg.sampling.temperature,
        top_p=cfg.sampling.top_p,
        learning_rate=(cfg.policy.lora.lr or cfg.optim.lr)
        if cfg.policy.lora.rank
        else cfg.optim.lr,  # coevo's build_optimizer
        adam_beta1=cfg.optim.betas[0],
        adam_beta2=cfg.optim.betas[1],
        weight_decay=cfg.optim.weight_decay,
        max_grad_norm=cfg.optim.grad_clip,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        epsilon=cfg.objective.clip_low,
        epsilon_high=cfg.objective.clip_high,
        scale_rewards="group" if cfg.objective.std_normalize else "none",
        loss_type="dapo",
        max_steps=max_generations * steps_per_generation,
        logging_steps=steps_per_generation,  # one log line per generation batch (TRL's metrics, completion lengths)
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        bf16=False,
        fp16=False,
        dataloader_num_workers=0,
        log_completions=False,
        # TRL's default is True; coevo recomputes nothing, and with it on TRL also generates without a KV cache
        gradient_checkpointing=False,
    )
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    return GRPOTrainer(
        model=model,
        reward_funcs=verifier_reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
    )


def lora_config(cfg: Config):
    """peft's LoraConfig with coevo's adapter settings (as coevo/model/lora.py builds it); None without LoRA."""
    if not cfg.policy.lora.rank:
        return None
    from peft import LoraConfig

    lora = cfg.policy.lora
    return LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
