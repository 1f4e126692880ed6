"""The runtime's own signals (control flow carried by exceptions), and how an error is stored."""

from __future__ import annotations

from ..config import RetryAfter
from ..errors import InstanceFatalError, StepFailedError, _EngineSignal


class ActivationAborted(_EngineSignal):
    """The activation must stop at once (lease lost, or the worker is shutting down)."""


class Terminating(_EngineSignal):
    """Raised at the first step that is not recorded when a terminate-with-rollback runs."""


def error_info(exc: BaseException) -> dict[str, str]:
    """``{name, message}`` of an error; a :class:`StepFailedError` reports the step's error,
    a :class:`~stepline.RetryAfter` its cause's."""
    if isinstance(exc, StepFailedError):
        return {"name": exc.error_name, "message": exc.message}
    if isinstance(exc, InstanceFatalError):
        return {"name": exc.name, "message": exc.message}
    if isinstance(exc, RetryAfter) and exc.cause is not None:
        return error_info(exc.cause)  # the attempt failed with its cause
    return {"name": type(exc).__name__, "message": str(exc)}
