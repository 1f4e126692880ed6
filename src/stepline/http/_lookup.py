"""What the API endpoints read about workflows and instances alike: which workflows exist,
their definitions (cached), an instance's detail, and 404s that name what is missing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace
from typing import Any

from ..dag import node_states
from ..engine import Engine
from ..errors import InstanceNotFoundError, WorkflowNotFoundError
from ..held import read_held_reasons
from ..records import FINISHED_STATUSES, InstanceRecord, StepRecord, WorkflowInfo
from ..retrying import retry_of
from .errors import ApiError, client_errors

DEFINITION_TTL = 30.0


def graph_of(definition: dict[str, Any] | None) -> dict[str, Any] | None:
    """The DAG graph (nodes, edges, levels) carried by a workflow definition, if it has one."""
    if not isinstance(definition, dict):
        return None
    if "nodes" not in definition or "edges" not in definition:
        return None
    return {
        "kind": definition.get("kind"),
        "nodes": definition.get("nodes"),
        "edges": definition.get("edges"),
        "levels": definition.get("levels"),
    }


def _node_states(
    graph: dict[str, Any], steps: list[StepRecord], instance_id: str
) -> dict[str, str]:
    try:
        return node_states(graph, steps, instance_id)
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}  # a definition stored by another stepline version: show it uncoloured


class Lookup:
    """Reads of ``engine`` shared by the endpoints, with the workflow names and definitions
    they remember between requests."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._known: set[str] = set()
        self._definitions: dict[str, tuple[float, dict[str, Any] | None]] = {}

    def saw_workflows(self, names: Iterable[str]) -> None:
        """``names`` are every workflow the database knows now."""
        self._known = set(names)

    async def workflow_info(self, name: str) -> WorkflowInfo:
        infos = await self.engine.list_workflows()
        for info in infos:
            if info.name == name:
                return info
        raise self._unknown_workflow(name, [info.name for info in infos])

    def _unknown_workflow(self, name: str, known: list[str]) -> ApiError:
        return ApiError(404, "workflow_not_found", str(WorkflowNotFoundError(name, known)))

    async def require_workflow(self, name: str) -> None:
        if name in self._known or name in self.engine.workflows:
            return
        with client_errors():
            known = {info.name for info in await self.engine.list_workflows()}
        self._known = known
        if name not in known:
            raise self._unknown_workflow(name, sorted(known | set(self.engine.workflows)))

    async def _instance_missing(self, exc: InstanceNotFoundError) -> ApiError:
        """404 naming the workflow when it is the workflow that does not exist."""
        self._known.discard(exc.workflow)
        try:
            await self.require_workflow(exc.workflow)
        except ApiError as error:
            return error
        return ApiError(404, "instance_not_found", str(exc))

    @contextlib.asynccontextmanager
    async def instance_errors(self) -> AsyncIterator[None]:
        """:func:`client_errors` for calls on one instance: a missing instance of a missing
        workflow is reported as the missing workflow."""
        try:
            with client_errors():
                yield
        except ApiError as error:
            if isinstance(error.__cause__, InstanceNotFoundError):
                raise await self._instance_missing(error.__cause__) from None
            raise

    async def read(
        self, workflow: str, instance_id: str
    ) -> tuple[InstanceRecord, list[StepRecord]]:
        """An instance's record and its steps; a missing one is a 404 naming what is missing."""
        async with self.instance_errors():
            instance = await self.engine.workflow(workflow).get(instance_id)
            return await instance.record(), await instance.steps(redact=True)

    async def detail(self, workflow: str, instance_id: str) -> dict[str, Any]:
        """An instance as the detail view shows it: its record, its steps, its DAG graph, the
        latest item of each of its streams."""
        record, steps = await self.read(workflow, instance_id)
        async with self.instance_errors():
            (warning,) = await self.engine.unserved_warnings([record])
            held = await read_held_reasons(self.engine.store, record)
            instance = await self.engine.workflow(workflow).get(instance_id)
            streams = await instance.streams()
            tags = await self.engine.store.operations.tags_of([record.pk])
        record = replace(record, tags=tags.get(record.pk, {}))
        retry = None if record.status in FINISHED_STATUSES else retry_of(steps)
        graph = graph_of(await self.definition(workflow))
        if graph is not None:
            graph["states"] = _node_states(graph, steps, instance_id)
        return {
            "workflow": {
                **record.to_json(),
                "warning": warning,
                "held": held,
                "retry": retry and retry.to_json(),
            },
            "steps": [s.to_json() for s in steps],
            "graph": graph,
            "streams": [item.to_json() for item in streams],
        }

    async def definition(self, workflow: str) -> dict[str, Any] | None:
        """The workflow's definition: from this engine's registry, else from the database
        (cached for :data:`DEFINITION_TTL` seconds; definitions change only on deploys)."""
        now = asyncio.get_running_loop().time()
        cached = self._definitions.get(workflow)
        registered = self.engine.workflows.get(workflow)
        if registered is not None:
            if cached is None:  # the registry is fixed once the engine is open
                cached = self._definitions[workflow] = (float("inf"), registered.describe())
            return cached[1]
        if cached is None or now - cached[0] > DEFINITION_TTL:
            with client_errors():
                infos = await self.engine.list_workflows()
            for info in infos:
                self._definitions[info.name] = (now, info.definition)
            cached = self._definitions.get(workflow, (now, None))
        return cached[1]
