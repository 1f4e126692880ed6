"""The errors of the filter language and of tags: each names what is wrong and where."""

from __future__ import annotations

from ...errors import SteplineError


class FilterError(SteplineError, ValueError):
    """A filter that does not parse or does not fit the columns. ``position`` is the 0-based
    character offset of the mistake in ``text``; the message gives it 1-based as a column."""

    def __init__(self, text: str, position: int, problem: str) -> None:
        self.text = text
        self.position = position
        self.problem = problem
        super().__init__(f"invalid filter at column {position + 1}: {problem}")


class TagError(SteplineError, ValueError):
    """Tags that break the rules (key syntax, value type or size, how many)."""
