"""Code problems, their sandboxed verifier, CURE rewards, the test-bank co-evolver and the code loop.

families.py (which problem families are code), problems.py (sources: HumanEval-layout jsonl,
the built-in HumanEval, the synthetic family),
sources.py (parquet splits), verifier.py (hidden tests in coevo.sandbox, used by the pipeline's
verification and evaluation), warm_start.py (the tiny policy's coder + tester warm start: the
bootstrap of `coevo train` on code sources and of the code loop), cure.py (rewards from the pass
table), execution.py (running the pass table), unit_test_bank.py (the co-evolver) and loop.py (the
coder + tester co-evolution driver behind `coevo code loop`).
"""
