"""The verification stage: completions scored against their problems, and the weighted rewards.

stage.py (the rewards table and `score_rows`), family_verifiers.py (each problem family's verifier,
the built-in reward `verifier`), rewards.py (the `rewards:` list of built-ins and plugins),
reward_calls.py (how a reward plugin is called: TRL's reward_funcs contract) and judge.py (the LLM
judge a rubric reward asks).
"""
