"""The stages of one iteration as path-in, path-out functions.

Each stage reads its inputs from disk, computes, writes its outputs atomically and returns a small
JSON-able record of output paths, content hashes and metrics. The plain driver and the Prefect tasks
call exactly these functions, so a stage re-run from its inputs (a resumed flow) reproduces its
outputs: every stage's randomness is derived from (seed, iteration, stage).

Loaded policies are cached in-process by weights hash, so a driver or flow that runs every stage in
one process loads each checkpoint once; the update stage takes the policy out of the cache (it
mutates it) and puts the trained one back under its new hash.

The generation engine comes from the registry in coevo.rollout.engines (`engine.kind`). A persistent one
(vLLM) lives across iterations: it sleeps during the update and is synced in place to the new
checkpoint after it (`LIVE`); a fresh process starts it from the checkpoint it is first asked for.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd

from coevo.code.sources import CODE_SOURCES
from coevo.coevolvers import CoEvolver, TextGenerator
from coevo.coevolvers.base import MANIFEST, ChoosesProblems, ProposesProblems, SetsHarness, read_manifest
from coevo.coevolvers.composite import (
    build_coevolvers,
    check_coevolvers,
    choose_batch,
    load_coevolvers,
    member_reports,
    member_with,
    members_of,
    plays,
)
from coevo.config import Config, SamplingConfig
from coevo.evaluate import eval_seed, evaluate, validate
from coevo.faults import pause_point
from coevo.io import hash_bytes, hash_file, write_json
from coevo.io import remove_orphans as remove_orphans_in
from coevo.model.bootstrap import bootstrap_policy, check_targets, warm_start_for
from coevo.model.checkpoint import (
    META,
    TRAINER_STATE,
    DamagedCheckpointError,
    Policy,
    PrunedCheckpointError,
    load_optimizer_state,
    load_policy,
    policy_version,
    read_meta,
    read_pruned,
    resume_problem,
    save_checkpoint,
)
from coevo.model.lora import apply_lora, is_adapter_dir, is_lora
from coevo.model.retention import keep_set, prune_checkpoint, prune_coevolver, read_evals
from coevo.prepare import build_all_splits, prepare_problems
from coevo.problems.splits import SPLITS
from coevo.records import Artifact, InForce
from coevo.rollout.dynamic import candidate_count, kept_rows, sample_rounds, shuffled
from coevo.rollout.engines import LIVE, samples_with_trainer_model
from coevo.rollout.engines.base import Engine
from coevo.rollout.prompting import check_prompt_format
from coevo.rollout.stage import check_conversations, run_rollouts
from coevo.seeding import derive_seed
from coevo.sharding import seed_stage, shard_of, shard_path
from coevo.store.lineage import lineage_record
from coevo.tracking.dvc import dvc_dir_md5
from coevo.types import ContextVariant
from coevo.update.distributed import launch_update
from coevo.update.objectives import build_objective
from coevo.update.objectives.group_signal import zero_variance_share
from coevo.update.stage import build_optimizer, policy_update
from coevo.update.teacher import teacher_context
from coevo.verification.rewards import check_rewards, reward_sources, reward_terms
from coevo.verification.stage import verify_rollouts
from schemas.problems import read_problems, write_problems
from schemas.rewards import COMPONENTS, LOGGED, read_rewards, write_rewards
from schemas.rollouts import read_rollouts, write_rollouts


class RunLayout:
    """Where each stage's outputs live under run.out_dir."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def checkpoint(self, it: int) -> Path:
        """Checkpoint after iteration `it`; checkpoint 0 is the bootstrap, kept apart as its own DVC stage output."""
        return self.root / "bootstrap" if it == 0 else self.root / "checkpoints" / f"iter_{it:04d}"

    def coevolver(self, it: int) -> Path:
        return self.root / "coevolver" / f"iter_{it:04d}"

    def rollouts(self, it: int) -> Path:
        return self.root / "rollouts" / f"iter_{it:04d}.parquet"

    def rewards(self, it: int) -> Path:
        return self.root / "rewards" / f"iter_{it:04d}.parquet"

    def report(self, it: int) -> Path:
        return self.root / "reports" / f"iter_{it:04d}.json"

    def in_force(self, it: int) -> Path:
        """What iteration `it` ran under, as `in_force` resolved it (with what it was resolved from)."""
        return self.root / "in_force" / f"iter_{it:04d}.json"

    def proposals(self, it: int) -> Path:
        """The proposer's problems iteration `it` draws from besides the train split (`in_force`)."""
        return self.root / "proposals" / f"iter_{it:04d}.parquet"

    def evals(self, it: int) -> Path:
        """The held-out evaluation of checkpoint `it` (retention's keep_best reads it, also on resume)."""
        return self.root / "evals" / f"iter_{it:04d}.json"


def latest_complete(cfg: Config) -> int:
    """The newest iteration a resume can restart from (0 = bootstrap): its checkpoint (with its
    metadata), co-evolver version and report all exist, and an update can resume exactly from it
    (`resume_problem`: weights not pruned, files with the sha256 coevo.json records, the optimizer
    state present and intact). Walked down from the newest, however far back, each checkpoint passed
    over named in a warning; only those candidates are hashed, so a resume hashes one checkpoint
    unless it is damaged. Falling back to the bootstrap past checkpoints that exist says so: nothing
    intact remains, and the run restarts at iteration 1."""
    layout, k = RunLayout(cfg.run.out_dir), 0
    while (
        (layout.checkpoint(k + 1) / META).is_file()
        and layout.coevolver(k + 1).is_dir()
        and layout.report(k + 1).is_file()
    ):
        k += 1
    newest, passed = k, []
    while k > 0:
        problem = resume_problem(
            layout.checkpoint(k),
            damaged_files(layout.checkpoint(k)) if read_pruned(layout.checkpoint(k)) is None else [],
        )
        if problem is None:
            break
        if read_pruned(layout.checkpoint(k)) is None:  # a pruned one is expected, not news
            warnings.warn(f"{layout.checkpoint(k)}: {problem}; not resuming from it", stacklevel=2)
        passed.append(k)
        k -= 1
    if k == 0 and newest > 0:
        warnings.warn(
            f"{layout.root}: no checkpoint after the bootstrap can resume (iterations {passed[-1]}..{newest} pruned or "
            "damaged; run.retention.keep_last bounds how far back one can); restarting from the bootstrap at "
            "iteration 1",
            stacklevel=2,
        )
    if k == 0 and (damaged := damaged_files(layout.checkpoint(0))):  # checked like every other checkpoint
        raise DamagedCheckpointError(layout.checkpoint(0), damaged, "a run cannot restart from it")
    return k


def remove_orphans(cfg: Config) -> list[Path]:
    """Delete the temporary directories a killed writer left in the run's directories and its data
    directory (`coevo.io.remove_orphans`), naming them in a warning; the caller holds the run lock."""
    layout = RunLayout(cfg.run.out_dir)
    places = {layout.root, cfg.bootstrap_dir.parent, Path(cfg.problems.data_dir), layout.checkpoint(1).parent}
    tables = (layout.rollouts, layout.rewards, layout.proposals)
    places |= {path(0).parent for path in (layout.coevolver, layout.report, layout.in_force, layout.evals, *tables)}
    places |= {shard_path(layout.rollouts(0), 0, 2).parent, shard_path(layout.rewards(0), 0, 2).parent}
    removed = [orphan for place in sorted(places) for orphan in remove_orphans_in(place)]
    if removed:
        warnings.warn(
            f"removed {len(removed)} temporary director{'y' if len(removed) == 1 else 'ies'} a killed writer left "
            f"(never published): {', '.join(str(p) for p in removed)}",
            stacklevel=2,
        )
    return removed


def damaged_files(checkpoint: str | Path) -> list[str]:
    """The files of `checkpoint` whose content no longer has the sha256 its coevo.json records
    (truncated, overwritten or missing; the optimizer state is not listed); [] for an intact one."""
    listed = read_meta(checkpoint).get("files", {})
    return [
        name
        for name, sha in sorted(listed.items())
        if not (Path(checkpoint) / name).is_file() or hash_file(Path(checkpoint) / name) != sha
    ]


def intact(record: dict) -> bool:
    """Whether a stage's {"path", "sha256"} output record still describes the file on disk (a task
    result restored from the cache may point at a shard truncated or overwritten since)."""
    path = Path(record["path"])
    return path.is_file() and hash_file(path) == record["sha256"]


_POLICIES: dict[str, Policy] = {}


def cached_policy(checkpoint: str | Path, cfg: Config) -> Policy:
    if read_pruned(checkpoint) is not None:
        raise PrunedCheckpointError(checkpoint)
    version = policy_version(checkpoint)
    if version not in _POLICIES:
        _POLICIES.clear()  # one live policy per process is enough for a sequential loop
        _POLICIES[version] = load_policy(checkpoint, cfg.policy.device, cfg.policy.dtype)
    return _POLICIES[version]


def live_engine(cfg: Config, checkpoint: str | Path) -> Engine:
    """The engine (`engine.kind`, from the registry) serving `checkpoint`: the HF engine wraps the
    cached policy; a persistent engine (vLLM) stays alive across iterations and is synced in place."""
    if read_pruned(checkpoint) is not None:
        raise PrunedCheckpointError(checkpoint)
    return LIVE.get(cfg, checkpoint, policy_version(checkpoint), lambda: cached_policy(checkpoint, cfg))


@functools.lru_cache(maxsize=8)
def _validated(reader: Callable[[str], pd.DataFrame], path: str, sha256: str) -> pd.DataFrame:
    return reader(path)


def table(reader: Callable[[str], pd.DataFrame], path: str | Path) -> pd.DataFrame:
    """A stage table read and pandera-validated once per content hash: the verify, co-evolve and
    update stages of one iteration share one read of its shards. Each caller gets a shallow copy:
    under pandas copy-on-write, nothing it does reaches the cached frame."""
    return _validated(reader, str(path), hash_file(path)).copy(deep=False)


def problems(path: str | Path) -> pd.DataFrame:
    """The validated problem split at `path`."""
    return table(read_problems, path)


def val_path(test: str | Path) -> Path | None:
    """The validation split written beside the test split `test` (val.parquet), or None when there is
    none or it is empty (a source with no validation problems)."""
    path = Path(test).with_name("val.parquet")
    return path if path.is_file() and len(problems(path)) else None


def held_out(test: str | Path) -> pd.DataFrame:
    """Test and validation problems together: what a proposer must not duplicate."""
    val = val_path(test)
    return problems(test) if val is None else pd.concat([problems(test), problems(val)], ignore_index=True)


def prepare_stage(cfg: Config) -> dict:
    """The problem splits as {"train"|"val"|"test": {"path", "sha256"}, "dvc_md5": DVC's hash of the data dir}.

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
    data = {name: cfg.problems.data_dir / f"{name}.parquet" for name in SPLITS}
    return {
        **{name: {"path": str(path), "sha256": hash_file(path)} for name, path in data.items()},
        "dvc_md5": dvc_dir_md5(cfg.problems.data_dir),
    }


def bootstrap_key(cfg: Config, data: dict) -> str:
    """What the bootstrap checkpoint depends on: seed, policy (not the RL-time switches), problems
    and their content, and the settings of problems.source's warm start (bootstrap.* for math,
    code.warm_start_* and code.synth for code), so a knob no warm start reads never re-bootstraps."""
    include = {"seed": True, "policy": True, "problems": True, **warm_start_for(cfg).settings}
    inputs = cfg.model_dump(
        mode="json", include=include, exclude={"policy": {"frozen", "threads", "lora", "distributed"}}
    )
    return hash_bytes(json.dumps([inputs, data["dvc_md5"]], sort_keys=True).encode())


def bootstrap_stage(cfg: Config, data: dict) -> dict:
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
        lineage = stage_lineage(cfg, 0, None, None, None, coevolver_dir, data)
        policy, meta = bootstrap_policy(
            cfg, problems(data["train"]["path"]), extra_meta={"lineage": lineage, "bootstrap_key": key}
        )
        _POLICIES.clear()
        _POLICIES[meta["weights_sha256"]] = policy
    return {
        "checkpoint": str(layout.checkpoint(0)),
        "sha256": meta["weights_sha256"],
        "coevolver": str(coevolver_dir),
        "coevolver_sha256": coevolver_sha256,
        "bootstrap": meta.get("bootstrap", {}),
    }


def coevolver_at(cfg: Config, it: int, directory: str | Path, generate: TextGenerator | None = None) -> CoEvolver:
    """The co-evolver (or list) saved in `directory`, as iteration `it` sees it (each one frozen once
    its frozen_after has passed)."""
    coevolver = load_coevolvers(directory, cfg, generate)
    for member, member_cfg in zip(members_of(coevolver), cfg.coevolver_list):
        member.frozen = member_cfg.frozen_at(it)
    return coevolver


def in_force(cfg: Config, it: int, data: dict, choose: bool = True) -> InForce:
    """What iteration `it` runs under (coevo/records.py `InForce`), resolved from the prepared splits
    `data` and co-evolver version it-1: the params with that version's harness applied, the proposer's
    problems of that version (written to RunLayout.proposals(it)), and the batch its chooser (or the
    uniform sampler) picks from the training split (under rollout.dynamic_sampling, every round's
    problems: coevo/rollout/dynamic.py). The loop resolves it once at the iteration's
    start and every stage of the iteration reads it. With `choose=False` only the params in force are
    resolved (what the evaluation of checkpoint `it` reads; version it-1 is read only when a
    co-evolver plays the harness role).

    The record is saved (RunLayout.in_force(it)) with what it was resolved from; where retention has
    pruned version it-1 since (a re-run flow passing over cached iterations), the saved record
    stands in for it when it was resolved from the same params, version and train split."""
    train = Artifact(str(data["train"]["path"]), data["train"]["sha256"])
    if it < 1 or not (choose or plays(cfg, "harness")):
        return InForce(it, cfg.model_dump_json(), train)
    layout = RunLayout(cfg.run.out_dir)
    version = layout.coevolver(it - 1)
    coevolver = Artifact(str(version), read_manifest(version)["content_hash"])
    source = hash_bytes(json.dumps([cfg.model_dump_json(), coevolver.sha256, train.sha256]).encode())
    if read_pruned(version) is not None and (saved := saved_in_force(layout.in_force(it), source)) is not None:
        return saved if choose else InForce(it, saved.params, train, harness=saved.harness)
    evolver = coevolver_at(cfg, it, version)
    harness = member_with(evolver, SetsHarness)
    params = cfg if harness is None else harness.apply(cfg)
    harnessed = None if harness is None else {"path": str(version), "in_force": harness.knobs(params)}
    if not choose:
        return InForce(it, params.model_dump_json(), train, harness=harnessed)
    proposals = None
    proposer = member_with(evolver, ProposesProblems)
    if proposer is not None and not (proposed := proposer.proposed()).empty:
        write_problems(layout.proposals(it), proposed)
        proposals = Artifact(str(layout.proposals(it)), hash_file(layout.proposals(it)))
    resolved = InForce(it, params.model_dump_json(), train, proposals, coevolver, harness=harnessed)
    split = training_split(resolved)
    split.attrs["path"] = train.path  # a curriculum's missing category column names the file
    batch = choose_batch(evolver, split, candidate_count(cfg.rollout, len(split)), it, cfg.seed)
    if cfg.rollout.dynamic_sampling.enabled:  # the rounds' problems, in the order they are sampled
        batch = shuffled(batch, cfg.seed, it)
    resolved = replace(resolved, batch=tuple(batch["id"]))
    write_json(layout.in_force(it), {"source": source, "in_force": resolved.to_json()})
    return resolved


def saved_in_force(path: Path, source: str) -> InForce | None:
    """The record `in_force` saved at `path` when it was resolved from `source` (and its proposals
    file is intact), else None."""
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    record = InForce.from_json(saved["in_force"])
    if saved.get("source") != source or (record.proposals is not None and not intact(asdict(record.proposals))):
        return None
    return record


def training_split(now: InForce) -> pd.DataFrame:
    """The problems iteration `now.iteration` draws from, verifies and trains on: the train split,
    plus the problems the curriculum's proposer accepted up to co-evolver version it-1 (when it is on)."""
    split = problems(now.train.path)
    return split if now.proposals is None else pd.concat([split, problems(now.proposals.path)], ignore_index=True)


def batch_of(now: InForce) -> pd.DataFrame:
    """The iteration's batch: the rows of the training split the co-evolver chose, in its order."""
    split = training_split(now)
    return split.iloc[pd.Index(split["id"]).get_indexer(list(now.batch))].reset_index(drop=True)


def backtest_sampler(cfg: Config, checkpoint: Path, it: int):
    """The harness's backtest arm: the frozen policy at `checkpoint` samples rollout.group_size
    completions of each problem under a trial config (a harness applied to `cfg`; seeded: both arms
    draw with the same seed), and the verifier scores them."""

    def sample(batch: pd.DataFrame, trial: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
        variants = [
            ContextVariant(problem_id=str(pid), variant="solo", n=cfg.rollout.group_size) for pid in batch["id"]
        ]
        frame = run_rollouts(
            live_engine(cfg, checkpoint), variants, batch, trial, it, policy_version(checkpoint), "harness-backtest"
        )
        return frame, verify_rollouts(frame, batch, trial)

    return sample


def policy_generator(cfg: Config, checkpoint: str | Path, it: int) -> TextGenerator:
    """Greedy continuations by the policy at `checkpoint`, loaded only when first called."""

    def generate(prompts: list[str], max_new_tokens: int) -> list[str]:
        engine = live_engine(cfg, checkpoint)
        greedy = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens)
        return [
            group[0].text
            for group in engine.generate(prompts, 1, greedy, derive_seed(cfg.seed, it, "reflect"), stop_at_newline=True)
        ]

    return generate


def rollout_stage(cfg: Config, now: InForce, checkpoint: str, shard: int = 0, shards: int = 1) -> dict:
    """The iteration's rollouts, or shard `shard` of `shards` of them (coevo/sharding.py): the batch
    `now` names, planned by co-evolver version it-1, sampled under the params in force."""
    it = now.iteration
    evolver = coevolver_at(cfg, it, now.coevolver.path)
    ds = cfg.rollout.dynamic_sampling

    def sample(problems: pd.DataFrame, round_: int = 0) -> pd.DataFrame:
        problems, variants = shard_of(problems, evolver.plan(problems, cfg.rollout.group_size), shard, shards)
        stage = seed_stage(shard, shards) + (f"-round{round_}" if round_ else "")
        engine = live_engine(cfg, checkpoint)
        return run_rollouts(engine, variants, problems, now.cfg, it, policy_version(checkpoint), stage)

    pause_point("rollout", f"{it}.{shard}")  # a shard's rollout before it samples (the Ray worker-kill test)
    metrics = {}
    if ds.enabled:  # DAPO's rounds (coevo/rollout/dynamic.py); one shard: the config refuses more
        score = functools.partial(verify_rollouts, problems=training_split(now), cfg=now.cfg)
        frame, metrics = sample_rounds(batch_of(now), cfg.rollout.problems_per_iter, ds, sample, score)
    else:
        frame = sample(batch_of(now))
    path = shard_path(RunLayout(cfg.run.out_dir).rollouts(it), shard, shards)
    write_rollouts(path, frame)
    return {"path": str(path), "sha256": hash_file(path), "metrics": {**rollout_metrics(frame), **metrics}}


def verify_stage(cfg: Config, now: InForce, rollouts: str, shard: int = 0, shards: int = 1) -> dict:
    """Rewards of the iteration's rollouts, or of shard `shard` of `shards` of them."""
    frame = table(read_rollouts, rollouts)
    rewards = verify_rollouts(frame, training_split(now), now.cfg)  # the reward weights in force
    path = shard_path(RunLayout(cfg.run.out_dir).rewards(now.iteration), shard, shards)
    write_rewards(path, rewards)
    return {"path": str(path), "sha256": hash_file(path), "metrics": reward_metrics(frame, rewards)}


def merge_stage(cfg: Config, it: int, rollouts: list[str], rewards: list[str]) -> dict:
    """The iteration's rollouts and rewards tables from its shards, concatenated in shard order
    (pipeline.shards > 1; coevo/sharding.py): {"rollouts"|"rewards": {"path", "sha256", "metrics"}}."""
    layout = RunLayout(cfg.run.out_dir)
    frame = pd.concat([table(read_rollouts, path) for path in rollouts], ignore_index=True)
    scored = pd.concat([table(read_rewards, path) for path in rewards], ignore_index=True)
    write_rollouts(layout.rollouts(it), frame)
    write_rewards(layout.rewards(it), scored)
    return {
        "rollouts": {
            "path": str(layout.rollouts(it)),
            "sha256": hash_file(layout.rollouts(it)),
            "metrics": rollout_metrics(frame),
        },
        "rewards": {
            "path": str(layout.rewards(it)),
            "sha256": hash_file(layout.rewards(it)),
            "metrics": reward_metrics(frame, scored),
        },
    }


def coevolve_stage(cfg: Config, now: InForce, rollouts: str, rewards: str, test: str) -> dict:
    """Co-evolver k -> k+1 from this iteration's rollouts and rewards (a frozen one is saved unchanged);
    then a member that proposes problems (the curriculum's proposer, if on) adds training problems
    (report key "proposer") and one that sets the harness diagnoses the rollouts and backtests the
    change they call for (report key "harness"), in list order."""
    it, layout = now.iteration, RunLayout(cfg.run.out_dir)
    bank = coevolver_at(cfg, it, now.coevolver.path, policy_generator(cfg, layout.checkpoint(it - 1), it))
    frame, scored, split = table(read_rollouts, rollouts), table(read_rewards, rewards), training_split(now)
    batch = split.set_index("id").loc[frame["problem_id"].unique()].reset_index()
    report, metrics = bank.update(it, batch, frame, scored), {}
    for member, member_report in zip(members_of(bank), member_reports(report)):
        if isinstance(member, ChoosesProblems):
            metrics = {**metrics, **member.choice_metrics(member_report)}
    for member in members_of(bank):
        if isinstance(member, ProposesProblems) and (
            proposed := member.propose(it, batch, frame, scored, split, held_out(test))
        ):
            report, metrics = {**report, "proposer": proposed}, {**metrics, **member.proposal_metrics(proposed)}
        if isinstance(member, SetsHarness):
            sample = backtest_sampler(cfg, layout.checkpoint(it - 1), it)
            revised = member.revise(it, frame, scored, split, cfg, sample)
            report, metrics = {**report, "harness": revised}, {**metrics, **member.harness_metrics(revised)}
    write_json(layout.report(it), report)
    pause_point("coevolve", it)  # between the report and the new version: a crash here must not matter
    sha256 = bank.save(layout.coevolver(it))
    metrics = {**coevo_metrics(report), "coevo/zero_var_share": zero_variance_share(frame, scored), **metrics}
    return {"path": str(layout.coevolver(it)), "sha256": sha256, "report": str(layout.report(it)), "metrics": metrics}


def update_stage(
    cfg: Config, now: InForce, checkpoint: str, rollouts: str, rewards: str, coevolver: str, data: dict
) -> dict:
    """Checkpoint k -> k+1. Resumable: reads weights and optimizer state from checkpoint k only.

    A self-distillation objective's teacher reads its privileged context from co-evolver k+1 (the
    one this iteration produced) and the problems' answers; with `policy.frozen` (ablation) no
    optimizer step is taken and checkpoint k+1 keeps k's weights. With policy.lora.rank > 0 a full
    checkpoint gets fresh adapters (it becomes the base) and checkpoint k+1 holds the adapters only.
    An update without an optimizer step links k's files into k+1 instead of writing them again.
    With policy.distributed.world_size > 1 the update runs in torchrun's ranks
    (coevo/update/distributed.py launches coevo/update/rank.py), which call update_state /
    update_train / update_save below.
    """
    it, layout = now.iteration, RunLayout(cfg.run.out_dir)
    if read_pruned(checkpoint) is not None:
        raise PrunedCheckpointError(checkpoint)
    LIVE.sleep()  # a colocated vLLM engine releases its GPU memory for the update
    if cfg.policy.distributed.world_size > 1 and not cfg.policy.frozen:
        _POLICIES.clear()  # the ranks load checkpoint k themselves
        record = launch_update(
            cfg, now, checkpoint, rollouts, rewards, coevolver, data, rank_module="coevo.update.rank"
        )
        LIVE.sync(record["checkpoint"], record["sha256"], lambda: cached_policy(record["checkpoint"], cfg))
        return record
    policy = _POLICIES.pop(policy_version(checkpoint), None) or load_policy(
        checkpoint, cfg.policy.device, cfg.policy.dtype
    )
    optimizer, objective, reference = update_state(cfg, it, checkpoint, policy)
    stats = update_train(cfg, now, policy, optimizer, objective, reference, rollouts, rewards, coevolver)
    pause_point("update", it)  # trained in memory, nothing saved yet
    version = update_save(cfg, now, checkpoint, rollouts, rewards, coevolver, data, policy, optimizer, stats)
    _POLICIES.clear()
    _POLICIES[version] = policy
    out = layout.checkpoint(it)
    LIVE.sync(out, version, lambda: policy)  # a persistent engine serves the new weights in place (no restart)
    return {"checkpoint": str(out), "sha256": version, "metrics": stats}


def update_state(cfg: Config, it: int, checkpoint: str, policy: Policy) -> tuple:
    """The update's optimizer (with checkpoint k's state), objective and reference model (or None)."""
    with_lora(policy, cfg, Path(checkpoint))
    optimizer = build_optimizer(policy.model, cfg)
    if not load_optimizer_state(checkpoint, optimizer) and it > 1:
        raise FileNotFoundError(
            f"{checkpoint}: no {TRAINER_STATE}; the update cannot resume exactly from this checkpoint"
        )
    objective = build_objective(cfg.objective)
    reference = (
        load_policy(RunLayout(cfg.run.out_dir).checkpoint(0), cfg.policy.device, cfg.policy.dtype).model
        if objective.needs_reference
        else None
    )
    return optimizer, objective, reference


def update_train(
    cfg: Config,
    now: InForce,
    policy: Policy,
    optimizer,
    objective,
    reference,
    rollouts: str,
    rewards: str,
    coevolver: str,
    ranks=None,
) -> dict:
    """The optimizer steps of iteration `now.iteration` (none with policy.frozen), with the params in
    force; `ranks`: one rank's share."""
    it = now.iteration
    if cfg.policy.frozen:
        return {"policy/steps": 0.0}
    teacher = (
        teacher_context(cfg.objective.teacher.sources, coevolver_at(cfg, it, coevolver))
        if objective.needs_teacher
        else None
    )
    answers = training_split(now).set_index("id")["answer"] if teacher is not None else None
    frame, scored = table(read_rollouts, rollouts), table(read_rewards, rewards)
    ds = cfg.rollout.dynamic_sampling
    if ds.enabled:  # the first problems_per_iter mixed groups of the rounds (coevo/rollout/dynamic.py)
        frame, scored = kept_rows(frame, scored, cfg.rollout.problems_per_iter, ds.gate)
        if frame.empty:  # no round found a mixed group: nothing to train on
            return {"policy/steps": 0.0, "policy/groups_total": 0.0, "policy/groups_kept": 0.0}
    seed, engine_is_trainer = derive_seed(cfg.seed, it, "update"), samples_with_trainer_model(cfg)
    return policy_update(
        policy,
        optimizer,
        objective,
        frame,
        scored,
        now.cfg,
        seed,
        reference,
        teacher,
        answers,
        engine_is_trainer,
        ranks,
    )


def update_save(
    cfg: Config,
    now: InForce,
    checkpoint: str,
    rollouts: str,
    rewards: str,
    coevolver: str,
    data: dict,
    policy: Policy,
    optimizer,
    stats: dict,
    meta: dict | None = None,
) -> str:
    """Write checkpoint k+1 with its lineage (plus `meta`) atomically; returns its weights hash."""
    it = now.iteration
    lineage = stage_lineage(
        cfg, it, Path(checkpoint), Path(rollouts), Path(rewards), Path(coevolver), data, policy.base, now.harness
    )
    unchanged = stats["policy/steps"] == 0 and is_adapter_dir(checkpoint) == is_lora(
        policy.model
    )  # no step: same weights, same optimizer state
    if unchanged:
        lineage["unchanged_from"] = lineage["parent"]["path"]
    out = RunLayout(cfg.run.out_dir).checkpoint(it)
    return save_checkpoint(
        out,
        policy,
        {"iteration": it, "lineage": lineage, **(meta or {})},
        optimizer,
        unchanged_from=checkpoint if unchanged else None,
    )


def evaluate_stage(cfg: Config, now: InForce, checkpoint: str, coevolver: str, test: str) -> dict:
    """The held-out evaluation of checkpoint `now.iteration` with co-evolver version `coevolver`,
    asked with the instruction the checkpoint was trained under (`now`'s params; params' sampling)."""
    it = now.iteration
    evolver = coevolver_at(cfg, it, coevolver)
    context_for = evolver.context_for if cfg.eval.with_context and "context" in evolver.roles else None
    engine = live_engine(cfg, checkpoint)
    asked = cfg.model_copy(update={"prompt": now.cfg.prompt})  # the instruction checkpoint `it` was trained under
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
    write_json(RunLayout(cfg.run.out_dir).evals(it), record)  # keep_best decides from these, also after a resume
    return {"metrics": metrics}


def retain_stage(cfg: Config, it: int) -> dict:
    """Checkpoint retention after iteration `it` (run.retention, coevo/model/retention.py): the weights
    and optimizer files of checkpoints 1..it that no rule keeps are deleted, their metadata stays; so
    are the files of the co-evolver versions of those iterations (their manifests stay). The newest
    keep_last keep their optimizer state (a resume can fall back to any of them: `latest_complete`);
    one kept by another rule keeps its weights only.
    Idempotent; re-running it for an earlier iteration never prunes what a later one kept."""
    rules, layout = cfg.run.retention, RunLayout(cfg.run.out_dir)
    present = [k for k in range(it + 1) if (layout.checkpoint(k) / META).is_file()]
    weights = {k: read_meta(layout.checkpoint(k)).get("weights_sha256") for k in present if layout.evals(k).is_file()}
    accs = read_evals(layout.root / "evals", present, weights) if rules.keep_best else {}
    kept = keep_set(present, accs, rules.keep_last, rules.keep_every, rules.keep_best)
    pruned = {k: prune_checkpoint(layout.checkpoint(k), k) for k in present if k not in kept and k > 0}
    resumable = set(present[-rules.keep_last :]) if rules.keep_last is not None else set(present)
    for k in (
        kept - resumable
    ):  # kept for its weights only (keep_every, keep_best): a resume starts from the newest keep_last
        (layout.checkpoint(k) / TRAINER_STATE).unlink(missing_ok=True)
    # co-evolver version k goes with checkpoint k: a resume from a kept checkpoint k reads version k only
    versions = {
        k: prune_coevolver(layout.coevolver(k), k) for k in pruned if (layout.coevolver(k) / MANIFEST).is_file()
    }
    best = max(accs, key=lambda k: (accs[k], -k)) if accs else None
    return {
        "kept": sorted(kept),
        "pruned": sorted(k for k, files in pruned.items() if files),
        "coevolver_pruned": sorted(k for k, files in versions.items() if files),
        "best": best,
    }


def with_lora(policy: Policy, cfg: Config, checkpoint: Path) -> None:
    """With policy.lora.rank > 0, a full policy gets fresh adapters (seeded) on `checkpoint` as its base."""
    if cfg.policy.lora.rank and not cfg.policy.frozen and not is_lora(policy.model):
        policy.model = apply_lora(policy.model, cfg.policy.lora, derive_seed(cfg.seed, 0, "lora"))
        policy.base = checkpoint


def stage_lineage(
    cfg: Config,
    it: int,
    parent,
    rollouts,
    rewards,
    coevolver,
    data: dict,
    base: Path | None = None,
    harness: dict | None = None,
) -> dict:
    """The lineage record of checkpoint `it`; `harness`: `InForce.harness` of the iteration that trained it."""
    return lineage_record(
        run_dir=cfg.run.out_dir,
        iteration=it,
        parent=parent,
        rollouts=rollouts,
        rewards=rewards,
        coevolver=coevolver,
        data={name: Path(data[name]["path"]) for name in ("train", "val", "test") if name in data},
        dvc_md5=data["dvc_md5"],
        params=cfg.model_dump(mode="json"),
        checkpoint_dir=RunLayout(cfg.run.out_dir).checkpoint(it),
        source=cfg.policy.checkpoint if it == 0 else None,  # the bootstrap copies the user's checkpoint
        reward_plugins=reward_sources(cfg),
        base=base,  # a LoRA checkpoint's base model
        harness=None if harness is None else (Path(harness["path"]), harness["in_force"]),
    )


def rollout_metrics(rollouts: pd.DataFrame) -> dict[str, float]:
    return {
        "rollout/completion_len": float(rollouts["completion_ids"].map(len).mean()),
        "rollout/finished_frac": float(rollouts["finished"].mean()),
    }


def reward_metrics(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict[str, float]:
    joined = rollouts[["rollout_id", "family"]].merge(rewards, on="rollout_id")
    metrics = {"verify/reward_mean": float(joined["reward"].mean()), "verify/pass_rate": float(joined["passed"].mean())}
    metrics.update({f"verify/pass_rate/{f}": float(g["passed"].mean()) for f, g in joined.groupby("family")})
    components = pd.DataFrame(
        [json.loads(text) for text in rewards[COMPONENTS]], dtype=float
    )  # None -> NaN: skipped by mean
    metrics.update({f"verify/reward/{name}": float(column.mean()) for name, column in components.items()})
    if (
        LOGGED in rewards.columns
    ):  # reward plugins' log_metric values (coevo/verification/reward_calls.py), mean over the rows
        logged = pd.DataFrame([json.loads(text).get("metric", {}) for text in rewards[LOGGED]], dtype=float)
        metrics.update({f"verify/logged/{name}": float(column.mean()) for name, column in logged.items()})
    parse_fail = rewards["details"].str.extract(r"(?:^| )judge_parse_fail=(\d+)")[0].dropna()
    if len(parse_fail):  # the rubric judge's unparseable replies (left out of the reward)
        metrics["verify/judge_parse_fail"] = float(parse_fail.astype(int).sum())
    return metrics


def coevo_metrics(report: dict) -> dict[str, float]:
    """Counts of skill events and of skills by status, summed over a list's members."""
    metrics: dict[str, float] = {}
    for member in member_reports(report):
        counts = {
            f"coevo/{key}": len(member.get(key, []))
            for key in ("admitted", "rejected", "promoted", "retired", "new_candidates")
        }
        counts.update({f"coevo/n_{status}": n for status, n in member.get("counts", {}).items()})
        for name, n in counts.items():
            metrics[name] = metrics.get(name, 0.0) + float(n)
    return metrics
