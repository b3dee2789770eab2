"""The one exception of ``reward``.

    ValueError
    └── RewardSpecError    a malformed ``REWARD_SPEC``: the key path, the problem, the fix

Bad *values* handed to the math (a negative time, an accuracy of 1.5) raise a plain
``ValueError`` whose message names the argument and the fix: they are not spec errors.
"""

from __future__ import annotations

__all__ = ["RewardSpecError"]


class RewardSpecError(ValueError):
    """A ``REWARD_SPEC`` breaks a rule of the contract.

    ``path`` is the key path as the user would write it, e.g.
    ``REWARD_SPEC["speed"]["reference"]``; ``problem`` says what is wrong and how to fix
    it. The message is the two joined: ``REWARD_SPEC["speed"]["reference"] must be a
    positive number of milliseconds, got 0``.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path} {problem}")

    def __reduce__(self) -> tuple[type[RewardSpecError], tuple[str, str]]:
        # Rebuild from the data, not the message, so the error crosses process boundaries.
        return (type(self), (self.path, self.problem))
