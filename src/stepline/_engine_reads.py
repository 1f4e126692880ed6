"""The :class:`~stepline.engine.Engine`'s reads across workflows, a base class of it: pages
and counts of instances (by filter), bulk actions, the workflows, workers and fleet activity the
store knows, pending retries, each version's state, and which instances no live worker serves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

from .client import check_listing
from .liveness import unserved_warning
from .operations.bulk import Bulk
from .operations.language import Filter
from .operations.search import Ranges, build_filter, listing_filter, search
from .payloads import PayloadCodec
from .payloads.records import open_instances
from .records import InstancePage, InstanceRecord, PendingRetry, WorkerInfo, WorkflowInfo
from .registry import Registry
from .retrying import read_retries
from .store import Store
from .telemetry import Activity, ActivityReadings, Telemetry
from .versions import VersionState, version_states
from .workflow import is_valid_name


class EngineReads:
    """What the engine reads from its store; the :class:`~stepline.engine.Engine` sets these
    attributes."""

    store: Store
    payloads: PayloadCodec
    registry: Registry
    telemetry: Telemetry
    _activity: ActivityReadings | None

    async def _check_workflow(self, name: str) -> None:
        await self.registry.check_known(self.store, name)

    async def list_instances(
        self,
        workflow: str | None = None,
        status: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        *,
        oldest_first: bool = False,
        values: bool = True,
        where: str | Filter | None = None,
        **ranges: Unpack[Ranges],
    ) -> InstancePage:
        """Page through instances, newest first (or oldest first); pass ``page.cursor`` back
        for the next page. ``values=False``: params and outputs as stored (offloaded or
        encrypted ones not fetched nor opened), for listings that do not show them.
        ``where``: a filter (docs/operations.md), a bad one raises ``FilterError`` naming its
        column; the ranges bound the creation and end times. A filtered list's records carry
        their tags."""
        check_listing(status, limit)
        if workflow is not None and not is_valid_name(workflow):
            return InstancePage([], None)  # no workflow can have that name: nothing to read
        chosen = listing_filter(where, workflow=workflow, status=status, **ranges)
        if chosen is not None:
            page = await search(self.store, chosen, limit, cursor, oldest_first=oldest_first)
        else:
            page = await self.store.list_instances(
                workflow, status, limit, cursor, oldest_first=oldest_first
            )
        if not values:
            return page
        return InstancePage(await open_instances(self.payloads, page.instances), page.cursor)

    async def count_instances(
        self, where: str | Filter | None = None, *, workflow: str | None = None
    ) -> int:
        """How many instances match ``where`` (and are of ``workflow``, if given)."""
        chosen = build_filter(where, workflow=workflow)
        return await self.store.operations.count(chosen or Filter(None))

    @property
    def bulk(self) -> Bulk:
        """Bulk actions by filter: dry runs, durable jobs, their progress (docs/operations.md)."""
        return Bulk(self.store)

    def now(self) -> float:
        """The store's clock (seconds since the epoch): the time timers and leases follow (on
        PostgreSQL the server's), for showing how long ago or how soon something happens."""
        return self.store.now()

    async def list_workflows(self) -> list[WorkflowInfo]:
        """Workflows known to the database, with instance counts by status."""
        return await self.store.list_workflows()

    async def list_workers(self) -> list[WorkerInfo]:
        """Workers registered in the database, live or not (``info.live(engine.store.now())``),
        oldest first. A worker registers when it starts, beats every ``heartbeat`` seconds,
        deregisters when it stops gracefully; the row of one that died expires."""
        return await self.store.workers.list_workers()

    async def activity(self) -> Activity:
        """The fleet's activity: instances ended per minute over the last hour by status, and
        now the backlog, what limits hold, instances by status, live workers (bounded reads,
        kept a few seconds; the dashboard's chart)."""
        if self._activity is None:
            self._activity = ActivityReadings(self.store, self.telemetry.fleet_ttl)
        return await self._activity.get()

    async def retries(self, records: Sequence[InstanceRecord]) -> list[PendingRetry | None]:
        """For each record, the retry it waits for (:class:`~stepline.PendingRetry`: the step,
        its attempt that failed last, that attempt's error, when the next is due), or None.
        One read for all the records (a page of :meth:`list_instances`), none if all are
        finished."""
        return await read_retries(self.store, records)

    async def workflow_versions(self, name: str) -> list[VersionState]:
        """Per version of workflow ``name``: its instances by status, the live workers that
        serve it, whether it is drained (:mod:`stepline.versions`). Unknown workflows raise
        :class:`~stepline.WorkflowNotFoundError`."""
        await self._check_workflow(name)
        counts = await self.store.operations.version_counts(name)
        workers = await self.store.workers.list_workers()
        known = self.registry.versions.get(name, {})
        return version_states(name, counts, workers, self.store.now(), known)

    async def unserved_warnings(self, records: Sequence[InstanceRecord]) -> list[str | None]:
        """For each record, ``"no live worker serves 'name'"`` if it is due to run and no live
        worker runs its workflow, else None (:func:`stepline.liveness.unserved_warning`). Reads
        the worker list once, and only if some record is due."""
        now = self.store.now()
        if not any(r.due(now) for r in records):
            return [None] * len(records)
        workers = await self.store.workers.list_workers()
        return [unserved_warning(record, workers, now) for record in records]
