"""``workers.workflows``: the SDK's ``NonRetryableError``, stepline's own (raised in a step, it
fails the step at once, without retries)."""

from __future__ import annotations

from ...errors import NonRetryableError

__all__ = ["NonRetryableError"]
