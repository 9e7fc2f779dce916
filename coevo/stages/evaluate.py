"""The evaluation stage: the held-out (and validation) accuracy of a checkpoint (coevo/evaluation.py)."""

from __future__ import annotations

from coevo.coevolvers.composite import coevolver_at
from coevo.config import Config
from coevo.evaluation import eval_seed, evaluate, validate
from coevo.io import write_json
from coevo.layout import RunLayout
from coevo.model.cache import live_engine
from coevo.model.checkpoint import policy_version
from coevo.records import InForce
from coevo.store.tables import problems, val_path


def evaluate_stage(cfg: Config, now: InForce, checkpoint: str, coevolver: str, test: str) -> dict[str, float]:
    """The held-out metrics of checkpoint `now.iteration` with co-evolver version `coevolver`, asked
    with the instruction and turn limit the checkpoint was trained under (`now`'s params; params'
    sampling); the record with each problem's verdict is written to RunLayout.evals."""
    it = now.iteration
    evolver = coevolver_at(cfg, it, coevolver)
    context_for = evolver.context_for if cfg.eval.with_context and "context" in evolver.roles else None
    engine = live_engine(cfg, checkpoint)
    # the instruction (and an episode's turn limit) checkpoint `it` was trained under
    asked = cfg.model_copy(update={"prompt": now.cfg.prompt, "environment": now.cfg.environment})
    verdicts: dict[str, bool] = {}  # problem id -> greedy verdict: `coevo compare` pairs them across arms
    metrics = evaluate(engine, problems(test), asked, eval_seed(cfg.seed, it), context_for, verdicts)
    record = {
        "iteration": it,
        "checkpoint": str(checkpoint),
        "weights_sha256": policy_version(checkpoint),
        "metrics": metrics,
        "verdicts": verdicts,
    }
    if (val := val_path(test)) is not None:
        record["val_verdicts"] = {}  # the validation split's, paired the same way
        metrics.update(validate(engine, problems(val), asked, record["val_verdicts"]))  # what keep-best, `best` read
    if asked.prompt.format == "chat":
        record["instruction"] = asked.prompt.instruction.model_dump()  # what the held-out questions were asked with
    if asked.episodes:
        record["max_turns"] = asked.environment.max_turns
    write_json(RunLayout(cfg.run.out_dir).evals(it), record)  # keep_best decides from these, also after a resume
    return metrics
