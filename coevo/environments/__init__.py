"""Built-in tools and environments for multi-turn episodes, offline and on CPU (coevo/rollout/episodes.py).

calculator.py: stateless arithmetic tools for the arithmetic families
(`tools: [coevo.environments.calculator:multiply, ...]`).
"""
