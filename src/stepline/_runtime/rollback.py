"""Rollbacks (sagas): when an instance ends errored or is terminated with rollback, the
rollbacks registered by its completed steps run, latest-completed first, each a durable step of
its own (``<name>:rollback``), with its own retries."""

from __future__ import annotations

from typing import Any

from .._callbacks import rollback_shape
from ..errors import StepFailedError
from .do import run_attempts
from .replay import ROLLBACK_SUFFIX
from .signals import error_info
from .state import ActivationState
from .writer import StepRef


async def run_rollbacks(
    state: ActivationState, error: BaseException | None
) -> dict[str, Any] | None:
    """Run the registered rollbacks; return the rollback outcome to store (None: there were
    none).

    Completion order is the recorded ``ended_at`` of each step (ties, as with a manual clock:
    latest-started first). It differs from start order only for steps run concurrently.
    """
    if not state.rollbacks:
        return None
    state.quiet.terminating = False  # rollbacks themselves must be allowed to run
    ended = None if state.observed is None else state.observed.rollbacks()
    try:
        failures = await _run_each(state, error)
    except BaseException:
        if ended is not None:
            ended("interrupted")
        raise
    if ended is not None:
        ended("failed" if failures else "complete")
    if failures:
        first = failures[0]
        return {
            "outcome": "failed",
            "error": {"name": first["name"], "message": first["message"]},
            "failed": failures,
        }
    return {"outcome": "complete", "error": None}


async def _run_each(state: ActivationState, error: BaseException | None) -> list[dict[str, str]]:
    """Run each rollback not yet recorded complete; the failures (step, name, message)."""
    replay = state.replay
    failures: list[dict[str, str]] = []
    for rb in sorted(state.rollbacks, key=lambda r: (r.ended_at, r.seq), reverse=True):
        name, count = rb.key
        key = (name + ROLLBACK_SUFFIX, count)
        record = replay.lookup(key, "rollback")
        if record is not None and record.status == "complete":
            continue
        step = StepRef(key, replay.seq_for(record), "rollback")
        shape = rollback_shape(rb.fn)
        try:
            await run_attempts(state, step, record, rb.config, rb.fn, shape, (error, rb.output))
        except StepFailedError as exc:
            failures.append({"step": f"{name}-{count}", **error_info(exc)})
    return failures
