"""The self-teacher's privileged context: what the same model sees, and the student never does.

`objective.teacher.sources` lists the pieces, in order, each a list of lines placed before the bare
question by the run's prompt renderer (coevo/rollout/prompting.py; inside the user turn under `prompt.format: chat`):
- "answer": the problem's reference answer as a worked example of the question itself ("7*8=56"),
  the layout the tiny policy's warm start teaches it to read;
- "feedback": the verifier's verdict on the student's own completion ("7*8=54 -> wrong
  (extracted=54 expected=56)");
- "coevolver": the co-evolver's `teacher_context` for the problem (retrieved memory entries or skills).

The student's prompt never carries any of it: the update trains the bare question (or the sampled
skill context, with `coevolver.update_context: keep`), and only the teacher pass reads these lines.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from coevo.coevolvers import CoEvolver

TeacherContext = Callable[[Mapping], list[str]]


def teacher_context(sources: Sequence[str], coevolver: CoEvolver | None) -> TeacherContext:
    """A function from one training row (question, completion, answer, passed, details, family,
    problem_id) to the teacher's context lines, in the order of `sources`."""
    unknown = sorted(set(sources) - set(SOURCES))
    if unknown:
        raise ValueError(f"objective.teacher.sources: unknown {unknown}; known: {sorted(SOURCES)}")
    if "coevolver" in sources and coevolver is None:
        raise ValueError("objective.teacher.sources includes 'coevolver' but no co-evolver was given")

    def context(row: Mapping) -> list[str]:
        return [line for source in sources for line in SOURCES[source](row, coevolver)]

    return context


def _answer(row: Mapping, coevolver: CoEvolver | None) -> list[str]:
    return [f"{row['question']}{row['answer']}"]


def _feedback(row: Mapping, coevolver: CoEvolver | None) -> list[str]:
    verdict = "correct" if row["passed"] else "wrong"
    details = f" ({row['details']})" if row.get("details") else ""
    return [f"{row['question']}{str(row['completion']).strip()} -> {verdict}{details}"]


def _coevolver(row: Mapping, coevolver: CoEvolver | None) -> list[str]:
    problem = {
        "id": row["problem_id"],
        "prompt": row["question"],
        "family": row.get("family"),
        "answer": row.get("answer"),
    }
    return list(coevolver.teacher_context(problem)) if coevolver is not None else []


SOURCES: dict[str, Callable[[Mapping, CoEvolver | None], list[str]]] = {
    "answer": _answer,
    "feedback": _feedback,
    "coevolver": _coevolver,
}
