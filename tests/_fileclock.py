"""A clock shared by processes: the time is read from a file the test writes, so a test can
move the clock of several worker processes at once (``Engine(clock=FileClock(path))``)."""

from __future__ import annotations

import os
from pathlib import Path


class FileClock:
    """Seconds since the epoch, read from ``path`` at every call. :meth:`set` (the test side)
    writes a new time atomically (a rename), so a reader sees the old or the new one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __call__(self) -> float:
        return float(self.path.read_text())

    def set(self, now: float) -> None:
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        partial.write_text(repr(float(now)))
        os.replace(partial, self.path)

    def advance(self, seconds: float) -> None:
        self.set(self() + seconds)
