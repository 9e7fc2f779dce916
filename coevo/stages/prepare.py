"""The run's setup stages: the problem splits (`prepare_stage`) and checkpoint 0 with the initial
co-evolver version (`bootstrap_stage`)."""

from __future__ import annotations

import json
import warnings

from coevo.code.sources import CODE_SOURCES
from coevo.coevolvers.composite import build_coevolvers, check_coevolvers
from coevo.config import Config
from coevo.io import hash_bytes, hash_file
from coevo.layout import RunLayout
from coevo.model.bootstrap import bootstrap_policy, check_targets, check_unseen_by_start, warm_start_for
from coevo.model.cache import keep_policy
from coevo.model.checkpoint import DamagedCheckpointError, damaged_files, read_meta
from coevo.prepare import build_all_splits, prepare_problems
from coevo.problems.splits import SPLITS
from coevo.records import Artifact, Bootstrapped, Splits
from coevo.rollout.prompting import check_prompt_format
from coevo.rollout.roles import check_roles
from coevo.rollout.stage import check_conversations
from coevo.store.lineage import checkpoint_lineage
from coevo.store.tables import problems
from coevo.tracking.dvc import dvc_dir_md5
from coevo.verification.rewards import check_rewards, reward_terms


def prepare_stage(cfg: Config) -> Splits:
    """The problem splits, each with its sha256, and DVC's hash of the data directory.

    The `rewards:` plugins are imported first and probed on the training split (coevo/verification/rewards.py):
    a broken one stops the run before anything is written or any rollout is spent."""
    check_prompt_format(cfg.prompt, cfg.policy.checkpoint)  # chat format: the tokenizer has a template
    reward_terms(cfg)
    check_targets(cfg)  # a LoRA target matching no module stops the run here, before anything is written
    check_coevolvers(cfg)  # so do two listed co-evolvers that would both choose the problems or both shape the context
    if cfg.problems.source not in CODE_SOURCES:  # every check on the training rows before a split is written
        splits = build_all_splits(cfg)
        for name in SPLITS:
            check_conversations(cfg, splits[name])
        check_rewards(cfg, splits["train"])
    train, _ = prepare_problems(cfg)
    if cfg.problems.source in CODE_SOURCES:
        check_rewards(cfg, train)
    paths = {name: cfg.problems.data_dir / f"{name}.parquet" for name in SPLITS}
    check_unseen_by_start(cfg, {name: path for name, path in paths.items() if name != "train"})
    check_roles(train, cfg.rollout.roles, str(paths["train"]))  # the tester of an arithmetic problem stops here
    written = {name: Artifact(str(path), hash_file(path)) for name, path in paths.items()}
    return Splits(**written, dvc_md5=dvc_dir_md5(cfg.problems.data_dir))


def bootstrap_key(cfg: Config, data: Splits) -> str:
    """What the bootstrap checkpoint depends on: seed, policy (not the RL-time switches), problems
    and their content, and the settings of problems.source's warm start (bootstrap.* for math,
    code.warm_start_* and code.synth for code) and of the tool warm start, so a knob no warm start
    reads never re-bootstraps."""
    warm_start = warm_start_for(cfg)
    include = {"seed": True, "policy": True, "problems": True, **(warm_start.settings if warm_start else {})}
    if cfg.bootstrap.tool_calls.steps:  # the demonstrated episodes: their prompts, tools and environment
        include |= {"bootstrap": True, "prompt": True, "tools": True, "environment": True}
    inputs = cfg.model_dump(
        mode="json", include=include, exclude={"policy": {"frozen", "threads", "lora", "distributed"}}
    )
    return hash_bytes(json.dumps([inputs, data.dvc_md5], sort_keys=True).encode())


def bootstrap_stage(cfg: Config, data: Splits) -> Bootstrapped:
    """Checkpoint 0 (with its lineage) and the initial co-evolver version iter_0000.

    An existing bootstrap with the same key and every file intact is kept (e.g. one DVC restored);
    one with a damaged file is made again, with a warning naming the files.
    """
    layout, key = RunLayout(cfg.run.out_dir), bootstrap_key(cfg, data)
    coevolver_dir = layout.coevolver(0)
    coevolver_sha256 = build_coevolvers(cfg).save(coevolver_dir)
    meta = read_meta(cfg.bootstrap_dir)
    damaged = damaged_files(cfg.bootstrap_dir) if meta.get("bootstrap_key") == key else []
    if damaged:  # every file checked, as for any checkpoint; made again from its sources, never reused
        warnings.warn(str(DamagedCheckpointError(cfg.bootstrap_dir, damaged, "making it again", "")), stacklevel=2)
    if meta.get("bootstrap_key") != key or not meta.get("files") or damaged:
        lineage = checkpoint_lineage(cfg, 0, None, None, None, coevolver_dir, data)
        policy, meta = bootstrap_policy(
            cfg, problems(data.train.path), extra_meta={"lineage": lineage, "bootstrap_key": key}
        )
        keep_policy(meta["weights_sha256"], policy)
    return Bootstrapped(
        Artifact(str(layout.checkpoint(0)), meta["weights_sha256"]),
        Artifact(str(coevolver_dir), coevolver_sha256),
        meta.get("bootstrap", {}),
    )
