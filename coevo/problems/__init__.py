"""Problem sources (built-in arithmetic, user jsonl/parquet files) and their verifiers."""

from coevo.problems.arithmetic import generate_arithmetic, write_splits
from coevo.problems.loader import ProblemsFileError, load_problem_file, split_problems
from coevo.problems.math_verifier import MathVerifier, canonical_number, check_answer, extract_final_number

__all__ = [
    "MathVerifier",
    "ProblemsFileError",
    "canonical_number",
    "check_answer",
    "extract_final_number",
    "generate_arithmetic",
    "load_problem_file",
    "split_problems",
    "write_splits",
]
