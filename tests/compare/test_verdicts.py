"""The evaluation record (evals/iter_NNNN.json) holds each held-out problem's greedy verdict, test's
and validation's, so a paired comparison can pair two arms' verdicts problem by problem."""

from __future__ import annotations

import json

from coevo.evaluation import greedy_completions, passed
from coevo.layout import RunLayout
from coevo.model.cache import forget_policies, live_engine
from coevo.rollout.engines import with_prompt_format
from coevo.rollout.prompting import prompt_renderer
from coevo.stages.evaluate import evaluate_stage
from coevo.stages.in_force import in_force
from coevo.stages.prepare import bootstrap_stage, prepare_stage
from coevo.store.tables import val_path
from schemas.problems import read_problems

from ..conftest import tiny_config


def test_evaluation_record_holds_the_greedy_verdict_of_every_evaluated_problem(tmp_path):
    """Evaluated on the training split: a 200-step warm start solves about a third of its training
    facts (both verdicts occur) and almost none of the unseen ones."""
    tiny_cfg = tiny_config(tmp_path, bootstrap={"steps": 200})
    forget_policies()
    data = prepare_stage(tiny_cfg)
    boot = bootstrap_stage(tiny_cfg, data)
    now = in_force(tiny_cfg, 0, data, choose=False)
    metrics = evaluate_stage(tiny_cfg, now, boot.checkpoint.path, boot.coevolver.path, data.train.path)
    record = json.loads(RunLayout(tiny_cfg.run.out_dir).evals(0).read_text())
    test = read_problems(data.train.path)
    verdicts = record["verdicts"]
    assert sorted(verdicts) == sorted(test["id"]) and all(isinstance(v, bool) for v in verdicts.values())
    assert sum(verdicts.values()) / len(verdicts) == metrics["eval/acc"]
    # each id's verdict is its own problem's: the greedy completion judged by its family verifier
    engine = live_engine(tiny_cfg, boot.checkpoint.path)
    questions = prompt_renderer(tiny_cfg.prompt, with_prompt_format(engine, tiny_cfg).tokenizer).render_all(
        test.to_dict("records")
    )
    judged = passed(test, greedy_completions(engine, questions, tiny_cfg.sampling.max_new_tokens), tiny_cfg)
    assert dict(zip(test["id"], judged)) == verdicts
    assert 0 < sum(judged) < len(judged)  # both verdicts occur, so a shuffled mapping would differ
    # the validation split beside it: its problems' verdicts, whose mean is val/acc
    val = read_problems(val_path(data.train.path))
    val_questions = prompt_renderer(tiny_cfg.prompt, with_prompt_format(engine, tiny_cfg).tokenizer).render_all(
        val.to_dict("records")
    )
    val_judged = passed(val, greedy_completions(engine, val_questions, tiny_cfg.sampling.max_new_tokens), tiny_cfg)
    assert record["val_verdicts"] == dict(zip(val["id"], val_judged))
    assert sum(val_judged) / len(val_judged) == metrics["val/acc"]
