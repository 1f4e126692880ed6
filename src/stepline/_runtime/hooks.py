"""The runtime's one seam for a test harness (:mod:`stepline.testing`): what runs an attempt,
when a new timer fires, which code runs an instance, and the attempt clock's time.

An engine given no hooks (every production engine) takes none of these paths: each is one
``is None`` test where it applies. The defaults below change nothing, so a harness overrides
only what it needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..records import InstanceRecord, StepKind
from ..step import StepContext
from ..workflow import Workflow
from .marks import RunningMarks


class RuntimeHooks:
    """Overridable points of the runtime, given to an engine as ``Engine(hooks=...)``."""

    marks: RunningMarks | None = None
    """The attempt clock every activation uses (None: the worker's own, on the loop's time).
    A harness with a virtual clock gives one that reads it (``RunningMarks(now=clock)``)."""

    def workflow(self, instance: InstanceRecord, workflow: Workflow) -> Workflow:
        """The code that runs ``instance`` in this activation (a stub may replace it)."""
        return workflow

    async def attempt(self, context: StepContext, call: Callable[[], Awaitable[Any]]) -> Any:
        """Run one attempt of a step (``call`` runs its callback): return its result or raise
        its error, as the callback would. Rollbacks come here too (``name:rollback``)."""
        return await call()

    def timer(
        self,
        instance: InstanceRecord,
        kind: StepKind,
        name: str,
        count: int,
        at: float,
        now: float,
    ) -> float:
        """When a new sleep ends or a new wait times out (``at``, on the store's clock ``now``);
        a replayed one keeps its recorded time."""
        return at
