"""Named limits on a step (``step.do(name, {"limit": "openai"}, fn)``): each attempt holds a slot
of the limit while its callback runs.

Before an attempt the step takes a slot (``Store.acquire_limit``); when the attempt ends, however
it ends, it gives the slot back (``Store.release_limit``) before any retry delay. With no room,
the step is recorded ``waiting`` (``info: {"limit": name}``, which ``describe`` shows) and parks
as during a retry delay: the instance suspends holding no worker slot, parked on the limit
(``Finish.parked_on``), until a release wakes it, the rate reopens, or ``RECHECK`` seconds pass
(a slot whose holder died frees at its lease's expiry, and nobody releases it).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, NoReturn

from ..errors import (
    InstanceFatalError,
    LeaseLostError,
    SteplineError,
    StoreError,
    UnknownLimitError,
)
from .signals import ActivationAborted
from .state import ActivationState
from .writer import StepRef

RECHECK = 30.0
"""Seconds after which a step waiting for a slot looks again, whatever woke it or not."""


async def take(state: ActivationState, step: StepRef, limit: str) -> None:
    """Hold a slot of ``limit`` for the next attempt of ``step``, parking until one may be free
    (raises :class:`~stepline.errors.SuspendInstance` from the park, as a retry delay does)."""
    store, quiet = state.store, state.quiet
    while True:
        if quiet.gate_needed(None):
            await quiet.gate(step.key)  # stopping: take nothing
        now = store.now()
        unknown = False
        quiet.begin()
        try:
            retry_at = await store.flow.acquire_limit(state.lease, limit, step.label, now)
        except UnknownLimitError:
            unknown, retry_at = True, None
        except LeaseLostError as exc:
            raise ActivationAborted(str(exc)) from exc
        except StoreError as exc:
            raise ActivationAborted(
                f"could not take a slot of limit {limit!r} for step {step.label!r}: {exc}"
            ) from exc
        finally:
            quiet.end()
        if unknown:
            await _undefined(state, step, limit, now)
        if retry_at is None:
            return
        wake_at = min(retry_at, now + RECHECK)
        if step.started_at is None:
            step.started_at = now
        await state.writer.write(step, "waiting", wake_at=wake_at, info={"limit": limit})
        state.emit("step_limited", {"step": step.label, "limit": limit, "until": wake_at})
        await quiet.gate(step.key, wake_at, limit)


async def _undefined(state: ActivationState, step: StepRef, limit: str, now: float) -> NoReturn:
    """The step names a limit nobody defined: it fails, and the instance with it (a retry
    would find the same)."""
    message = (
        f"step {step.label!r} uses limit {limit!r}, which is not defined; add a [[limits]] "
        f"table named {limit!r} to stepline.toml or pass stepline.Limit to the Engine"
    )
    error = {"name": "DefinitionError", "message": message}
    await state.writer.write(step, "errored", error=error, ended_at=now)
    raise InstanceFatalError("DefinitionError", message)


async def give_back(state: ActivationState, step: StepRef, limit: str) -> None:
    """Give back the slot the attempt held. Best effort: a slot left behind is dead once the
    activation ends (it was taken under the activation's lease)."""
    store, quiet = state.store, state.quiet
    quiet.begin()
    try:
        with contextlib.suppress(SteplineError):
            await store.flow.release_limit(state.lease, limit, step.label, store.now())
    finally:
        quiet.end()


async def give_back_cancelled(state: ActivationState, step: StepRef, limit: str) -> None:
    """:func:`give_back` after the attempt was cancelled: in a task of its own, which a second
    cancellation of the caller does not stop."""
    store = state.store
    task = asyncio.ensure_future(
        store.flow.release_limit(state.lease, limit, step.label, store.now())
    )
    task.add_done_callback(_retrieve)
    with contextlib.suppress(asyncio.CancelledError, SteplineError):
        await asyncio.shield(task)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
