"""Prefect flows over the library's stage functions: `flows.train` (the loop, resumable and tracked)
and its nightly deployment.

Prefect's and MLflow's usage telemetry are switched off before either is imported: coevo runs on
machines without outside network, where those calls only fail and log errors.

The temporary Prefect server that a flow run starts when no PREFECT_API_URL is set inherits this
environment. Its task-run recorder writes each task-run state event in its own database
transaction by default (three per task run): about half of the server's CPU per task run, on the
cores that train. Here it writes them in batches, as Prefect's event persister does with the
events, at most every 5 s (its flush_interval); the UI shows a task run's state up to 5 s late.
Every setting here is a default: the environment overrides it.

Prefect logs "Finished in state Completed()" for every task run that completes: 4-6 lines per
iteration, ~2.5 ms of the flow's CPU each (console formatting, then through the API into the
server's database). `CompletedTaskRuns` drops exactly those; failed, retried and cached task runs
still log, the UI shows every task run's state, and the train flow logs one line per iteration.
"""

import logging
import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE", "100")

COMPLETED = "Finished in state Completed()"


class CompletedTaskRuns(logging.Filter):
    """Drops Prefect's INFO line for a task run that completed (see the module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.INFO and record.msg == COMPLETED)


logging.getLogger("prefect.task_runs").addFilter(CompletedTaskRuns())
