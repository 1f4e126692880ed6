"""The worker's logger (and :func:`~stepline.errors.outage_level`, for its side jobs)."""

from __future__ import annotations

import logging

from ..errors import outage_level

__all__ = ["log", "outage_level"]

log = logging.getLogger("stepline.worker")
