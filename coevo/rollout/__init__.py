"""The rollout stage and what it samples with: the iteration's problems, their prompts, the engines.

stage.py (`run_rollouts`: each problem's group under the contexts the co-evolver plans, one rollouts
row per completion), sampler.py (which training problems an iteration sees), prompting.py (how a
problem and its context become the prompt string, `prompt.format`) and engines/ (the HF and vLLM
generation engines by `engine.kind`).
"""
