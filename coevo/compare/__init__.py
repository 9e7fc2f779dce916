"""`coevo compare`: arms x seeds of ordinary coevo runs and their paired comparison.

spec.py     the spec file (line-numbered errors) and each arm run's params
runs.py     one finished arm run's record (compare_arm.json): curve, verdicts, measured seconds
results.py  run order (interleaved), finished runs of results directories (merge), the MLflow parent run
stats.py    per-seed differences, the seed-level t-interval of their mean, timing ratios
coverage.py simulated null experiments: how often an interval method excludes 0 when nothing differs
table.py    the readout rule, the table (JSON, markdown) and the figure
The Prefect flow that runs the arms is flows/compare.py; this package never imports prefect.
"""
