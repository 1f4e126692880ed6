"""The workflow endpoints: ``GET /api/workflows``, ``GET /api/workflows/{name}`` and
``GET /api/workflows/{name}/versions``."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..engine import Engine
from ..records import INSTANCE_STATUSES, WorkflowInfo
from ._lookup import Lookup, graph_of
from .errors import JsonResponse, client_errors


def workflow_json(info: WorkflowInfo) -> dict[str, Any]:
    data = info.to_json()
    counts: dict[str, int] = dict.fromkeys(INSTANCE_STATUSES, 0)
    counts.update(info.counts)
    data["counts"] = counts
    data["total"] = sum(counts.values())
    data["graph"] = graph_of(info.definition)
    return data


class WorkflowEndpoints:
    """The workflows of ``engine``'s database, with their instance counts and DAG graphs."""

    def __init__(self, engine: Engine, lookup: Lookup) -> None:
        self.engine = engine
        self.lookup = lookup

    async def list_workflows(self, request: Request) -> Response:
        with client_errors():
            infos = await self.engine.list_workflows()
        self.lookup.saw_workflows(info.name for info in infos)
        return JsonResponse({"workflows": [workflow_json(info) for info in infos]})

    async def get_versions(self, request: Request) -> Response:
        name = request.path_params["name"]
        with client_errors():
            found = await self.engine.workflow_versions(name)
        return JsonResponse({"workflow": name, "versions": [v.to_json() for v in found]})

    async def get_workflow(self, request: Request) -> Response:
        name = request.path_params["name"]
        with client_errors():
            info = await self.lookup.workflow_info(name)
        return JsonResponse(workflow_json(info))
