"""Rollout and verification retry with exponential backoff (docs/operations/resume.md), on the real Prefect
engine: a generation that raises a transient error on the rollout stage's first two calls (as an
engine whose server hiccups would), and a reward plugin that really fails on its first two
verification calls and then works, make each task go AwaitingRetry -> Retrying twice, at delays
retry_delay_s and 2 * retry_delay_s, then Completed, and the run finishes with the rollouts and
rewards of the attempts that worked."""

from __future__ import annotations

import time
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterFlowRunId, TaskRunFilterName

from coevo.layout import RunLayout
from flows.train import train_flow
from schemas.rewards import read_rewards
from schemas.rollouts import read_rollouts

from ..conftest import TINY, TINY_PARAMS

FAILURES = 2  # verification calls that fail before the plugin works
PLUGIN = f'''
from pathlib import Path

CALLS = Path(__file__).with_suffix(".calls")


def reward(completions, **columns):
    """0.0 per completion; fails on its first {FAILURES} calls of the verification stage: the calls on
    more than 2 training problems (the prepare stage's check calls it on 2, the held-out evaluations
    on test and validation problems, whose ids start with "t-" and "v-")."""
    if len(completions) > 2 and not any(str(pid).startswith(("t-", "v-")) for pid in columns["id"]):
        CALLS.open("a").write("call\\n")
        if len(CALLS.read_text().splitlines()) <= {FAILURES}:
            raise ConnectionError("transient: reward service unavailable")
    return [0.0] * len(completions)
'''


def task_run_states(flow_run_id: UUID, name: str, until: str, deadline_s: float = 60.0) -> list[tuple]:
    """(state name, scheduled time, timestamp) of a task run of the flow run, oldest first. Task-run states reach
    the server in batches (docs/pipeline.md, "Watching a run"), so wait until the run's history ends in `until`."""
    started = time.monotonic()
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(
                task_run_filter=TaskRunFilter(
                    flow_run_id=TaskRunFilterFlowRunId(any_=[flow_run_id]), name=TaskRunFilterName(like_=name)
                )
            )
            states = sorted((s for run in runs for s in client.read_task_run_states(run.id)), key=lambda s: s.timestamp)
            if (states and states[-1].name == until) or time.monotonic() - started > deadline_s:
                return [(s.name, s.state_details.scheduled_time, s.timestamp) for s in states]
            time.sleep(0.5)


def flaky_generation(monkeypatch) -> list[str]:
    """The rollout stage's generation (`run_rollouts` as coevo/stages/rollout.py calls it, the real one)
    raises a transient ConnectionError on its first FAILURES calls, then runs; returns the list of calls made."""
    from coevo.stages import rollout

    calls, real = [], rollout.run_rollouts

    def generation(*args, **kwargs):
        calls.append("call")
        if len(calls) <= FAILURES:
            raise ConnectionError("transient: generation server unavailable")
        return real(*args, **kwargs)

    monkeypatch.setattr(rollout, "run_rollouts", generation)
    return calls


def assert_retried_with_backoff(flow_run_id: UUID, task: str) -> None:
    """The task's states: FAILURES retries, scheduled retry_delay_s (0.2 s) then twice that, then Completed."""
    history = task_run_states(flow_run_id, task, until="Completed")
    names = [name for name, _, _ in history]
    assert names == ["Pending", "Running", "AwaitingRetry", "Retrying", "AwaitingRetry", "Retrying", "Completed"], (
        task,
        names,
    )
    delays = [(scheduled - at).total_seconds() for name, scheduled, at in history if name == "AwaitingRetry"]
    assert len(delays) == 2 and abs(delays[0] - 0.2) < 0.1 and abs(delays[1] - 0.4) < 0.1, (
        task,
        delays,
    )  # scheduled, not measured


def test_rollout_and_verification_retry_transient_faults_with_exponential_backoff(
    prefect_server, tmp_path, monkeypatch
):
    (tmp_path / "flaky_reward_t18.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    generations = flaky_generation(monkeypatch)
    overrides = {
        **TINY,
        "run": {**TINY["run"], "iterations": 1, "out_dir": str(tmp_path / "run")},
        "problems": {**TINY["problems"], "data_dir": str(tmp_path / "data")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "retries"},
        "pipeline": {"retries": FAILURES, "retry_delay_s": 0.2},
        "rewards": [
            {"function": "verifier", "weight": 1.0},
            {"function": "flaky_reward_t18:reward", "weight": 0.0, "name": "flaky"},
        ],
    }
    state = train_flow(str(TINY_PARAMS), overrides, return_state=True)
    assert state.is_completed(), state
    assert_retried_with_backoff(state.state_details.flow_run_id, "rollout-")
    assert_retried_with_backoff(state.state_details.flow_run_id, "verify-")
    assert generations == ["call"] * (FAILURES + 1)
    assert (tmp_path / "flaky_reward_t18.calls").read_text().splitlines() == ["call"] * (FAILURES + 1)
    rollouts, rewards = (
        read_rollouts(RunLayout(tmp_path / "run").rollouts(1)),
        read_rewards(RunLayout(tmp_path / "run").rewards(1)),
    )
    assert len(rollouts) == len(rewards) == TINY["rollout"]["problems_per_iter"] * TINY["rollout"]["group_size"]
