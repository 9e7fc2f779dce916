"""Prefect flows over the library's stage functions: `flows.train` (the loop, resumable and tracked)
and its nightly deployment.

Prefect's and MLflow's usage telemetry are switched off before either is imported: coevo runs on
machines without outside network, where those calls only fail and log errors.
"""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
