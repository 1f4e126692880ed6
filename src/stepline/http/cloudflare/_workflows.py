"""Cloudflare's workflow endpoints: list, describe, versions. Deploying (``PUT``) and deleting a
workflow are refused: stepline's workflows are the code its workers register."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ...engine import Engine
from ...records import WorkflowInfo
from .._lookup import Lookup
from ..errors import ApiError, client_errors
from . import _input, shapes
from .envelope import ok, page_info

DEFAULT_PER_PAGE = 10


class WorkflowEndpoints:
    """The workflows of ``engine``'s database, each with its one version."""

    def __init__(self, engine: Engine, lookup: Lookup) -> None:
        self.engine = engine
        self.lookup = lookup

    async def list_workflows(self, request: Request) -> Response:
        """Oldest first, by ``page``; ``search`` keeps the names that contain it."""
        page, per_page = _input.page_of(request, DEFAULT_PER_PAGE)
        search = request.query_params.get("search", "").lower()
        with client_errors():
            infos = await self.engine.list_workflows()
        self.lookup.saw_workflows(info.name for info in infos)
        chosen = [info for info in infos if search in info.name.lower()]
        shown = chosen[(page - 1) * per_page : page * per_page]
        return ok(
            [shapes.workflow_json(info) for info in shown],
            page_info(page, per_page, len(shown), len(chosen)),
        )

    async def _info(self, request: Request) -> WorkflowInfo:
        with client_errors():
            return await self.lookup.workflow_info(request.path_params["name"])

    async def get_workflow(self, request: Request) -> Response:
        return ok(shapes.workflow_json(await self._info(request)))

    async def list_versions(self, request: Request) -> Response:
        """The one version stepline has of a workflow (its current registration)."""
        info = await self._info(request)
        page, per_page = _input.page_of(request, DEFAULT_PER_PAGE)
        shown = [shapes.version_json(info)] if page == 1 else []
        return ok(shown, page_info(page, per_page, len(shown), 1))

    async def get_version(self, request: Request) -> Response:
        return ok(await self._version(request))

    async def get_graph(self, request: Request) -> Response:
        """The version with ``graph: null``: stepline does not describe its workflows in
        Cloudflare's graph format (``GET /api/workflows/{name}`` has its DAG graphs)."""
        version = await self._version(request)
        keys = ("id", "workflow_id", "class_name", "created_on", "modified_on")
        return ok({key: version[key] for key in keys} | {"graph": None})

    async def _version(self, request: Request) -> dict[str, object]:
        info = await self._info(request)
        version = shapes.version_json(info)
        if request.path_params["version"] != version["id"]:
            raise ApiError(
                404,
                "version_not_found",
                f"workflow {info.name!r} has no version {request.path_params['version']!r}; "
                f"stepline keeps one version of each workflow, {version['id']!r}",
            )
        return version

    async def deploy(self, request: Request) -> Response:
        raise _refused(
            "deploy workflows over the API: a workflow is registered by the workers that run "
            "its code (stepline.toml's [[workflows]], `stepline worker`)"
        )

    async def delete(self, request: Request) -> Response:
        raise _refused(
            "delete workflows: they are the code its workers run. Delete instances with "
            "`stepline workflows instances delete` or purge finished ones"
        )


def _refused(what: str) -> ApiError:
    return ApiError(405, "not_supported", f"stepline does not {what}", headers={"Allow": "GET"})
