"""``step.publish`` and ``step.stream(name).publish``: items appended to a stream of the
instance, each once.

- From ``run()`` (or an update's handler) a publish is a step of its own (kind ``publish``,
  named ``@publish:<stream>``): its record and its item are written in one transaction, and a
  replay finds the record and publishes nothing again.
- From a step's async callback it is written at once (readers see progress while the step
  runs), with an origin made of the step and the publish's number within the attempt
  (``charge-1#3``): a retried attempt publishing the same things again appends nothing new,
  only what goes beyond what an earlier attempt published.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..durations import Duration, parse_duration
from ..errors import LeaseLostError, StoreError
from ..handlers import check_handler_name
from ..payloads import stream_column
from ..store.base import NewStreamItem
from .calls import IN_CALLBACK
from .signals import ActivationAborted
from .state import ActivationState
from .writer import StepRef

PUBLISH_PREFIX = "@publish:"
"""The name of a publish from ``run()`` is this and the stream's."""


def _bounds(
    state: ActivationState, keep: int | None, keep_for: Duration | None
) -> tuple[int, float | None]:
    if keep is None:
        kept = state.settings.stream_keep
    elif isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"invalid stream keep {keep!r}: a whole number of items, at least 1")
    else:
        kept = keep
    if keep_for is None:
        return kept, state.settings.stream_keep_for
    return kept, parse_duration(keep_for, what="stream keep_for")


def check_thread() -> None:
    """A publish from a sync callback (a thread of the pool) cannot be awaited there."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise TypeError(
            "step.publish was called from a sync step callback, which runs in a thread and "
            "cannot await it: make the callback `async def`, or publish from run()"
        ) from None


async def publish(
    state: ActivationState,
    stream: str,
    value: Any,
    keep: int | None,
    keep_for: Duration | None,
    *,
    prefix: str = "",
) -> None:
    """Append ``value`` to ``stream`` (see the module). ``prefix``: the namespace of the steps
    of an update's handler."""
    check_handler_name(stream, what="stream")
    kept, seconds = _bounds(state, keep, keep_for)
    encoded = await state.settings.payloads.seal(
        state.encode(value, f"the value published to stream {stream!r}"),
        state.slot(stream_column(stream)),
        offload=False,  # a stream's bounds delete its items: no blob to orphan
    )
    scope = IN_CALLBACK.get()
    if scope is not None:
        scope.published += 1
        origin = f"{scope.label}#{scope.published}"
        await _write(state, NewStreamItem(stream, encoded, origin, kept, seconds))
        return
    replay, quiet = state.replay, state.quiet
    quiet.progress += 1
    key, record = replay.find(prefix + PUBLISH_PREFIX + stream, "publish")
    turns = state.turns
    if turns is not None:
        await turns.reach(key, record)
    if record is not None and record.status == "complete":
        return
    if record is None and replay.check.unvisited:
        await quiet.hold(key)
    step = StepRef(key, replay.seq_for(record), "publish")
    await quiet.gate(key)
    now = state.store.now()
    step.started_at = now
    item = NewStreamItem(stream, encoded, step.label, kept, seconds)
    await state.writer.write(
        step, "complete", output="null", ended_at=now, info={"stream": stream}, publish=item
    )


async def _write(state: ActivationState, item: NewStreamItem) -> None:
    store, quiet = state.store, state.quiet
    quiet.begin()
    try:
        await store.messages.publish(state.lease, item, store.now())
    except LeaseLostError as exc:
        raise ActivationAborted(str(exc)) from exc
    except StoreError as exc:
        raise ActivationAborted(f"could not publish to stream {item.stream!r}: {exc}") from exc
    finally:
        quiet.end()
