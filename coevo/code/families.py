"""The problem families that are code problems: `CODE_FAMILIES`, the one list every module asks.

"humaneval" (the built-in HumanEval problems), "code" (a user's HumanEval-layout file) and the
synthetic families code-add, code-sub and code-mul (coevo/code/problems.py). A problem of one of
them is a code prefix whose completion is a program: the prompt renderer gives it the code
instruction, the `format` reward looks for a closed fence, the verifier runs it in the sandbox, and
the harness leaves it out of the math instruction. This module imports nothing, so the lowest of
those (coevo/rollout/prompting.py) can ask without importing the code package's sources and verifier.
"""

CODE_FAMILIES = ("humaneval", "code", "code-add", "code-sub", "code-mul")
