"""The co-evolution stage: co-evolver version k -> k+1 from the iteration's rollouts and rewards."""

from __future__ import annotations

from coevo.coevolvers.base import ChoosesProblems, ProposesProblems, SetsHarness
from coevo.coevolvers.composite import coevolver_at, member_reports, members_of
from coevo.coevolvers.policy import backtest_sampler, policy_generator
from coevo.config import Config
from coevo.faults import pause_point
from coevo.io import write_json
from coevo.layout import RunLayout
from coevo.records import Evolved, InForce
from coevo.store.tables import held_out, table, training_split
from coevo.update.objectives.group_signal import zero_variance_share
from schemas.rewards import read_rewards
from schemas.rollouts import read_rollouts


def coevolve_stage(cfg: Config, now: InForce, rollouts: str, rewards: str, test: str) -> Evolved:
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
    return Evolved(str(layout.coevolver(it)), sha256, str(layout.report(it)), metrics)


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
