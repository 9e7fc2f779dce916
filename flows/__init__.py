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
"""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_BATCH_SIZE", "100")
