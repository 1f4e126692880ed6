"""One activation of a claimed instance, from replay to its last write: finished, or
released (at shutdown, or after a failure, so that this or another worker retries it at
once)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

from .._runtime import Activation, ActivationAborted, ActivationSettings
from ..errors import LeaseLostError, StoreError
from ..store.base import Store
from ..workflow import WorkflowDefinition
from ._log import log, outage_level
from ._slots import Slot


async def activate(
    store: Store,
    slot: Slot,
    versions: Mapping[str, Mapping[str, WorkflowDefinition]],
    settings: ActivationSettings,
    freed: Callable[[], None],
) -> None:
    """Run ``slot``'s activation and write how it ended; ``freed`` is called once its code has
    run (its final write still in flight), so that the worker may claim more meanwhile."""
    claim = slot.claim
    record = claim.instance
    lease = claim.lease
    observer = settings.observer
    observed = None if observer is None else observer.activation(claim)
    ended, error = "failed", None  # what the observation is told if nothing else is
    try:
        workflow = versions[record.workflow][record.version].make()
        if settings.hooks is not None:
            workflow = settings.hooks.workflow(record, workflow)
        activation = Activation(store, claim, claim.history, workflow, settings, observed)
        slot.activation = activation
        if slot.stop_reason is not None:
            activation.request_stop(slot.stop_reason)
        finish = await activation.execute()
        slot.ending = True  # its lease is about to be released: not "lost"
        freed()  # claim more while its final write is in flight
        if finish.status == "waiting" and activation.stop_reason == "shutdown":
            await store.release(lease, store.now())
            ended = "released"
            return
        status = await store.finish(lease, finish, store.now())
        ended, error = status, finish.error
        log.log(
            logging.INFO if status in ("complete", "errored", "terminated") else logging.DEBUG,
            "instance %s/%s -> %s",
            record.workflow,
            record.id,
            status,
        )
    except (ActivationAborted, LeaseLostError) as exc:
        ended = "abandoned"
        log.log(
            outage_level(exc, logging.WARNING),
            "instance %s/%s abandoned: %s",
            record.workflow,
            record.id,
            exc,
        )
    except asyncio.CancelledError:
        ended = "released"
        with contextlib.suppress(Exception):
            await asyncio.shield(store.release(lease, store.now()))
        raise
    except Exception as exc:
        if observer is not None:
            observer.store_error("activation", exc)
        # A store failure (or a bug) must not leave the instance stuck until its lease
        # expires: give it back so that this or another worker retries it.
        log.log(
            outage_level(exc, logging.ERROR),
            "instance %s/%s: activation failed, releasing it: %s",
            record.workflow,
            record.id,
            exc,
            exc_info=not isinstance(exc, StoreError),
        )
        with contextlib.suppress(Exception):
            await store.release(lease, store.now())
    finally:
        if observed is not None:
            observed.ended(ended, error)
