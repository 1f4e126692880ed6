"""The worker's logger, and the level of failures caused by a database outage."""

from __future__ import annotations

import logging

from ..errors import StoreUnavailableError

log = logging.getLogger("stepline.worker")


def outage_level(exc: BaseException, level: int) -> int:
    """``level``, or INFO for a failure caused by the database being unreachable: the store
    logs each outage once, when it begins and when it ends, so the claims, renewals and
    activations that fail meanwhile do not repeat it (once per instance, say)."""
    cause = exc if isinstance(exc, StoreUnavailableError) else exc.__cause__
    return logging.INFO if isinstance(cause, StoreUnavailableError) else level
