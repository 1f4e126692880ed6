"""The PostgreSQL store's workflows table and named limits: what workers register, and the
list of workflows with their instance counts."""

from __future__ import annotations

from collections.abc import Sequence

from ..._json import dumps
from ...flow.floor import FLOOR_MARGIN
from ...limits import Limit
from ...records import WorkflowInfo
from .._rows import workflow_from_row
from ..base import WorkflowMeta
from .db import Database
from .sql import Statements


def _limits_json(meta: WorkflowMeta) -> str | None:
    """What ``workflows.limits`` keeps: ``WorkflowLimits.to_json()``, NULL for none."""
    data = meta.limits.to_json()
    return None if data is None else dumps(data, what=f"limits of workflow {meta.name!r}")


class WorkflowCatalog:
    """One store's registration of workflows and named limits."""

    def __init__(self, db: Database, sql: Statements) -> None:
        self._db = db
        self._sql = sql

    async def register(
        self, metas: Sequence[WorkflowMeta], limits: Sequence[Limit], now: float
    ) -> None:
        """:meth:`~stepline.store.base.Store.register_workflows` at ``now``."""
        latest = {meta.name: meta for meta in metas}  # the last definition of a name wins
        named = {limit.name: limit for limit in limits}
        if not latest and not named:
            return
        params = {
            "now": now,
            "margin": FLOOR_MARGIN,
            "names": list(latest),
            "classes": [m.class_name for m in latest.values()],
            "definitions": [
                dumps(m.definition, what="workflow definition", limit=1 << 24)
                for m in latest.values()
            ],
            "limits": [_limits_json(m) for m in latest.values()],
            "retentions": [
                None if m.retention is None else dumps(m.retention, what="retention")
                for m in latest.values()
            ],
            "limit_names": list(named),
            "limit_concurrency": [n.concurrency for n in named.values()],
            "rate_counts": [None if n.rate is None else n.rate.count for n in named.values()],
            "rate_periods": [None if n.rate is None else n.rate.period for n in named.values()],
        }
        await self._db.execute("registering workflows", self._sql.register_workflows, params)

    async def list(self) -> list[WorkflowInfo]:
        """:meth:`~stepline.store.base.Store.list_workflows`."""
        rows, count_rows = await self._db.read_many(
            "listing workflows", [(self._sql.list_workflows, ()), (self._sql.count_instances, ())]
        )
        counts: dict[str, dict[str, int]] = {}
        for workflow, status, n in count_rows:
            counts.setdefault(workflow, {})[status] = n
        return [workflow_from_row(row, counts) for row in rows]
