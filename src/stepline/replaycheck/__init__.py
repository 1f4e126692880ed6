"""Replay checks: does today's code still follow the histories an instance recorded?

:func:`replay_check` replays the instances of a database (opened read-only) through the
workflows' current code, running no callback and changing nothing; :class:`Replayer` replays
one instance at a time on a scratch store (what ``WorkflowTestEnv.replay`` uses). See
docs/versioning.md, "Checking a deploy: replay-check".
"""

from ._check import STATUSES, ReplayReport, ReplayResult, replay_check
from ._replay import Replayer, ReplayError, replay

__all__ = [
    "STATUSES",
    "ReplayError",
    "ReplayReport",
    "ReplayResult",
    "Replayer",
    "replay",
    "replay_check",
]
