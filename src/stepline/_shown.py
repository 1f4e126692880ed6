"""How an error message quotes the value it refused."""

from __future__ import annotations

SHOWN_CHARS = 60


def shown(value: object) -> str:
    """``repr(value)``, cut to ``SHOWN_CHARS``: a message quotes what it refused so that the user
    recognises it, and a refused value may be thousands of characters long."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[: SHOWN_CHARS - 3]}..."
