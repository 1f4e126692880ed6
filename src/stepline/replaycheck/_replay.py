"""Replay checks: run today's ``run()`` against an instance's recorded history and say where it
no longer follows it.

The runtime's own activation does the work, with its own divergence check
(:mod:`stepline._runtime.divergence`): recorded steps return their recorded results; a new step
met while recorded ones are uncalled is the divergence, named as the runtime names it. Nothing
of the instance changes: the activation writes to a scratch in-memory store, and no callback
runs (a step that would run one ends the replay there: everything before it matched).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from typing import Any

from .. import _json
from .._runtime import Activation, ActivationAborted, ActivationSettings, RuntimeHooks
from ..clock import ManualClock
from ..errors import BlobStoreError, PayloadKeyError
from ..payloads import PayloadCodec, Slot
from ..records import InstanceRecord, StepKind, StepRecord
from ..step import StepContext
from ..store import create_store
from ..store.base import Finish, History, NewInstance, WorkflowMeta
from ..workflow import Workflow

_SCRATCH = "sqlite://:memory:"


class ReplayError(AssertionError):
    """The workflow's code no longer follows an instance's recorded history; ``step`` is the
    step where it leaves it (``name-count``), when one is to blame."""

    def __init__(self, message: str, step: str | None = None) -> None:
        super().__init__(message)
        self.step = step


_RECORDED = re.compile(r"recorded step\(s\) '([^']+)'")


class _NewStep(ActivationAborted):
    """The replay reached a step past the history, whose callback it must not run."""


class _ReplayHooks(RuntimeHooks):
    """Stops the replay at the first callback; notes new sleeps and waits."""

    def __init__(self) -> None:
        self.new_steps: list[str] = []

    async def attempt(self, context: StepContext, call: Callable[[], Awaitable[Any]]) -> Any:
        self.new_steps.append(f"{context.step_name}-{context.count}")
        raise _NewStep("replay reached a new step")

    def timer(
        self,
        instance: InstanceRecord,
        kind: StepKind,
        name: str,
        count: int,
        at: float,
        now: float,
    ) -> float:
        self.new_steps.append(f"{name}-{count}")
        return at


class Replayer:
    """Replays instances one after another on one scratch store (opened by ``async with``):
    a replay costs a few writes to memory, not a store of its own."""

    def __init__(
        self, clock: ManualClock, max_payload: int, payloads: PayloadCodec | None = None
    ) -> None:
        self.clock = clock
        self.max_payload = max_payload
        self.payloads = payloads or PayloadCodec(max_payload=max_payload)
        """Opens the sealed values of the histories replayed (offloaded, encrypted)."""
        self._scratch = create_store(_SCRATCH, clock)
        self._registered: set[str] = set()
        self._next = 0

    async def __aenter__(self) -> Replayer:
        await self._scratch.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._scratch.close()

    async def replay(
        self, record: InstanceRecord, steps: list[StepRecord], workflow: Workflow
    ) -> None:
        """Replay ``record``'s recorded ``steps`` with ``workflow``; raise :class:`ReplayError`
        naming the diverging step if the code no longer follows them."""
        scratch = self._scratch
        if record.workflow not in self._registered:
            await scratch.register_workflows([WorkflowMeta(record.workflow, "replay", {})])
            self._registered.add(record.workflow)
        # A scratch id of its own: the same instance may be replayed twice on one scratch.
        self._next += 1
        _, [claim] = await scratch.create_and_claim(
            record.workflow,
            [NewInstance(f"replay-{self._next}", None)],
            trigger="replay",
            skip_existing=False,
            owner="replay",
            lease_seconds=3600.0,
            limit=1,
        )
        # Run as the instance itself (its id, params, creation time), writing to the scratch.
        claim = dataclasses.replace(claim, instance=record, control=None)
        hooks = _ReplayHooks()
        settings = ActivationSettings(self.max_payload, hooks=hooks, payloads=self.payloads)
        activation = Activation(scratch, claim, History(steps, []), workflow, settings)
        try:
            finish: Finish | None = await activation.execute()
        except _NewStep:
            finish = None
        _unreadable(record, finish)
        output: Any = None
        if finish is not None and finish.status == "complete" and finish.output is not None:
            # Both outputs opened: sealed twice, one value has two different envelopes.
            slot = Slot(record.workflow, record.id, "output")
            output = await self.payloads.open(_json.loads(finish.output), slot)
            record = dataclasses.replace(
                record, output=await self.payloads.open(record.output, slot)
            )
        _judge(record, finish, hooks.new_steps, output)


async def replay(
    record: InstanceRecord,
    steps: list[StepRecord],
    workflow: Workflow,
    clock: ManualClock,
    max_payload: int,
) -> None:
    """Replay ``record``'s recorded ``steps`` with ``workflow`` on a scratch store of its own;
    raise :class:`ReplayError` naming the diverging step if the code no longer follows them."""
    async with Replayer(clock, max_payload) as replayer:
        await replayer.replay(record, steps, workflow)


def _unreadable(record: InstanceRecord, finish: Finish | None) -> None:
    """Raise what made the replay fail to read the history (a key or a blob store it lacks):
    the check cannot judge such an instance, and must not call it replayed."""
    error = (finish.error or {}) if finish is not None else {}
    if finish is not None and finish.status == "errored" and error != (record.error or {}):
        kinds = {"PayloadKeyError": PayloadKeyError, "BlobStoreError": BlobStoreError}
        kind = kinds.get(str(error.get("name")))
        if kind is not None:
            raise kind(f"replay of {record.workflow}/{record.id}: {error.get('message')}")


def _judge(
    record: InstanceRecord, finish: Finish | None, new_steps: list[str], output: Any = None
) -> None:
    """Compare how the replay ended with how the instance did (``output``: the replay's,
    opened)."""
    label = f"{record.workflow}/{record.id}"
    if finish is not None and finish.status == "errored":
        error = finish.error or {}
        if error.get("name") == "NonDeterminismError":
            message = str(error.get("message"))
            blamed = _RECORDED.search(message)
            step = blamed.group(1) if blamed else None
            raise ReplayError(f"replay of {label} diverged: {message}", step)
    if record.status not in ("complete", "errored"):
        return  # unfinished: steps past its history are how a workflow grows
    if new_steps:
        raise ReplayError(
            f"replay of {label} diverged: the instance ended {record.status} after its recorded "
            f"steps, but run() now goes on to the new step {new_steps[0]!r}",
            new_steps[0],
        )
    if finish is None or finish.status != record.status:
        now = "suspends" if finish is None or finish.status == "waiting" else finish.status
        raise ReplayError(
            f"replay of {label} diverged: the instance ended {record.status}, but run() now "
            f"ends {now} on the same history"
        )
    if record.status == "complete":
        if output != record.output:
            raise ReplayError(
                f"replay of {label} diverged: run() now returns {output!r} on the same history, "
                f"the instance returned {record.output!r}"
            )
    elif (finish.error or {}).get("name") != (record.error or {}).get("name"):
        raise ReplayError(
            f"replay of {label} diverged: the instance failed with {record.error}, but run() now "
            f"fails with {finish.error} on the same history"
        )
