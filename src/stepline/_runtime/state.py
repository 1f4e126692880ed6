"""What the steps of one activation share: the store and lease, the replay, the quiescence,
the writer, the settings; and what a worker gives every activation (its settings)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import _json
from .._callbacks import ShapeMemo
from ..config import StepConfig
from ..payloads import PayloadCodec, Slot, escaped
from ..records import PendingEvent
from ..store.base import Claim, History, Store
from .hooks import RuntimeHooks
from .marks import RunningMarks
from .observer import ActivationObservation, Observer
from .quiesce import Quiescence
from .replay import Replay, StepKey
from .turns import Turns
from .writer import StepWriter


@dataclass(frozen=True)
class ActivationSettings:
    """Given by a worker to each of its activations."""

    max_payload: int
    listeners: tuple[Callable[[str, dict[str, Any]], None], ...] = ()
    marks: RunningMarks = field(default_factory=RunningMarks)
    shapes: ShapeMemo = field(default_factory=ShapeMemo)
    hooks: RuntimeHooks | None = None
    """A test harness's seam (:mod:`.hooks`); None in production."""
    observer: Observer | None = None
    """The engine's observers (:mod:`.observer`); None when nothing observes."""
    child_versions: Mapping[str, str] = field(default_factory=dict)
    """The version a child of each workflow starts under (the newest the worker runs; absent:
    the default version)."""
    stream_keep: int = 1000
    """Items a stream keeps (its last ones), unless ``step.stream(keep=...)`` says otherwise."""
    stream_keep_for: float | None = 7 * 86400.0
    """Seconds a stream's items are kept (None: no limit), unless ``step.stream(keep_for=...)``
    says otherwise."""
    payloads: PayloadCodec = field(default_factory=PayloadCodec)
    """What seals stored values and opens them (offload, encryption: :mod:`stepline.payloads`)."""
    timeout_of: Callable[[str], float | None] | None = None
    """A workflow's declared ``timeout`` by name, if the worker knows it (a child's deadline)."""
    patch_taken: Callable[[str, str, str], None] | None = None
    """Told (workflow, version, patch id) when an instance records a patch marker: the worker
    adds an id its registration did not find to the patches its claims route on."""


@dataclass(slots=True)
class Rollback:
    """A rollback registered by a completed step, to run if the instance ends errored."""

    key: StepKey
    """The key of the step it undoes."""
    seq: int
    ended_at: float
    """When the step completed: rollbacks run latest-completed first (ties: latest-started)."""
    fn: Callable[..., Any]
    config: StepConfig
    output: Any


class ActivationState:
    """One activation's parts, as its steps use them."""

    __slots__ = (
        "encode_limit",
        "events",
        "instance",
        "lease",
        "loop",
        "observed",
        "parenting",
        "quiet",
        "replay",
        "rollbacks",
        "settings",
        "store",
        "turns",
        "writer",
    )

    def __init__(
        self,
        store: Store,
        claim: Claim,
        history: History,
        settings: ActivationSettings,
        observed: ActivationObservation | None = None,
    ) -> None:
        self.store = store
        self.observed = observed
        """This activation's observation (:mod:`.observer`); None when nothing observes."""
        self.instance = claim.instance
        self.lease = claim.lease
        self.settings = settings
        codec = settings.payloads
        self.encode_limit = settings.max_payload if codec.blobs is None else codec.encode_limit
        """The largest JSON a sealed value may have (any size when it can be offloaded)."""
        self.loop = asyncio.get_running_loop()
        """Kept: ``asyncio.get_running_loop()`` costs a ``getpid`` system call each time."""
        self.replay = Replay(history.steps)
        self.quiet = Quiescence(
            self.loop,
            self.replay.check,
            store.now,
            terminating=claim.control is not None,
        )
        self.parenting = any(step.kind == "start_workflow" for step in history.steps)
        """Whether the instance started children: its end (errored, terminated) applies their
        ``on_parent_close`` (``ClosingStore.close_children``)."""
        self.writer = StepWriter(store, claim.lease, self.replay.recorded, self.quiet, self.loop)
        self.events: list[PendingEvent] = list(history.events)
        """Events sent to the instance that no step has consumed yet, oldest first."""
        self.rollbacks: list[Rollback] = []
        self.turns: Turns | None = None
        """Where step calls wait their turn (:mod:`.turns`); None when nothing orders them
        beyond their records (no update recorded, not a query's replay)."""

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        """Tell the worker's listeners (progress output, tests) what happened."""
        if self.settings.listeners:
            payload = {"workflow": self.instance.workflow, "instance": self.instance.id, **data}
            for listener in self.settings.listeners:
                listener(kind, payload)

    def encode(self, value: Any, what: str) -> str:
        return _json.dumps(value, what=what, limit=self.settings.max_payload)

    def slot(self, column: str) -> Slot:
        return Slot(self.instance.workflow, self.instance.id, column)

    async def seal(self, value: Any, what: str, column: str) -> str:
        """``value`` as stored in ``column`` of this instance: encoded, then sealed."""
        payloads = self.settings.payloads
        if payloads.plain:  # nothing seals: no slot, no coroutine
            return escaped(_json.dumps(value, what=what, limit=self.settings.max_payload))
        text = _json.dumps(value, what=what, limit=self.encode_limit)
        return await payloads.seal(text, self.slot(column))

    async def open(self, value: Any, column: str) -> Any:
        """A value read from ``column`` of this instance, opened (fetched only now)."""
        if not self.settings.payloads.is_sealed(value):
            return value
        return await self.settings.payloads.open(value, self.slot(column))
