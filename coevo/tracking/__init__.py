"""Experiment tracking of a run: MLflow runs and model registry, DVC's data hash, the learning curve.

mlflow_tracker.py logs a flow run's params, metrics, data inputs, checkpoints and co-evolver
versions and registers checkpoints as model versions; dvc.py computes a directory's hash as DVC
records it; plots.py draws held-out accuracy against iteration.
"""
