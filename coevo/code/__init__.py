"""Code problems, their sandboxed verifier, CURE rewards, the test-bank co-evolver and the code loop.

problems.py (sources: HumanEval-layout jsonl, the built-in HumanEval, the synthetic family),
prepare.py (parquet splits), verifier.py (hidden tests in coevo.sandbox), cure.py (rewards from the
pass table), execution.py (running the pass table), test_bank.py (the co-evolver), warm_start.py
and loop.py (the coder + tester co-evolution driver behind `coevo code loop`).
"""
