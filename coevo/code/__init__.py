"""Code problems, their sandboxed verifier and CURE's rewards.

families.py (which problem families are code), problems.py (sources: HumanEval-layout jsonl,
the built-in HumanEval, the synthetic family; the tester role's prompt), sources.py (parquet
splits), verifier.py (hidden tests in coevo.sandbox, used by the pipeline's verification and
evaluation), warm_start.py (the tiny policy's solver + tester warm start: the bootstrap of
`coevo train` on code sources), cure.py (rewards from the pass table) and execution.py (running
the pass table of an iteration whose `rollout.roles` samples the tester: the verification stage's
rewards for both roles). The test bank is a co-evolver (coevo/coevolvers/unit_tests.py).
"""
