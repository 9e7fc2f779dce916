"""A number-guessing game: a stateful environment with feedback, written as TRL's
`environment_factory` classes are, for the games of `problems.source: guessing`
(coevo/problems/guessing.py).

    problems: {source: guessing, guess_levels: [3, 4, 5]}
    environment: {factory: coevo.environments.guessing:GuessingGame, max_turns: 8}
    rewards: [{function: verifier}, {function: "coevo.environments.guessing:solved", weight: 0.5}]

One instance per episode: `reset` takes the game's secret from the row's `answer`; each `guess` is
told whether the secret is higher, lower or the guess itself. The verifier judges the final answer
(the secret stated as a number); `solved` and `fewer_guesses` are reward functions that read the
episode's environment as TRL's do.
"""

from __future__ import annotations


class GuessingGame:
    """The secret of one game, and the guesses made so far."""

    def reset(self, answer: str, **row) -> None:
        self.secret = int(answer)
        self.guesses: list[int] = []
        self.solved = False

    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: The whole number you guess.

        Returns:
            Whether the secret number is higher, lower, or your guess.
        """
        self.guesses.append(number)
        if number < self.secret:
            return f"{number} is too low: the number is higher."
        if number > self.secret:
            return f"{number} is too high: the number is lower."
        self.solved = True
        return f"{number} is correct."


def solved(environments, **kwargs) -> list[float]:
    """1.0 for an episode whose game was solved by a guess, else 0.0."""
    return [1.0 if env is not None and env.solved else 0.0 for env in environments]


def fewer_guesses(environments, **kwargs) -> list[float]:
    """For a solved game, 1 / (guesses made): fewer guesses, more reward; 0.0 for an unsolved one."""
    return [1.0 / len(env.guesses) if env is not None and env.solved else 0.0 for env in environments]
