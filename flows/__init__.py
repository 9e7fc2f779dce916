"""Prefect flows over the library's stage functions (train loop, bootstrap, evaluate, nightly).

The plain driver `coevo.driver` runs the same stages without Prefect; the flows wrap them so that
each stage is a versioned, cached, retried task (see the pipeline issue).
"""
