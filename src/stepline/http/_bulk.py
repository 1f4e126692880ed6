"""The bulk endpoints: start a bulk action by filter (or count what it would act on), list
jobs, read one, cancel one; and the instance count by filter."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..engine import Engine
from ..store.operations import BULK_ACTIONS
from ._input import MISSING, RequestReader, query_int
from .errors import ApiError, JsonResponse, client_errors
from .roles import caller

_BODY_KEYS = ("action", "where", "workflow", "from_step", "dry_run")


class BulkEndpoints:
    """Bulk jobs over ``engine``'s store, through ``engine.bulk``."""

    def __init__(self, engine: Engine, reader: RequestReader) -> None:
        self.engine = engine
        self.reader = reader

    async def start(self, request: Request) -> Response:
        body = await self.reader.json(request)
        if body is MISSING or not isinstance(body, dict):
            raise ApiError(
                400, "invalid_input", 'the request body must be a JSON object like {"action": '
                '"terminate", "where": "campaign = \'spring\'"}',
            )  # fmt: skip
        unknown = sorted(set(body) - set(_BODY_KEYS))
        if unknown:
            raise ApiError(400, "invalid_input", f"unknown key {unknown[0]!r}; the keys are "
                           f"{', '.join(_BODY_KEYS)}")  # fmt: skip
        action = body.get("action")
        if action not in BULK_ACTIONS:
            raise ApiError(400, "invalid_input", f"'action' must be one of "
                           f"{', '.join(BULK_ACTIONS)}, got {action!r}")  # fmt: skip
        for key in ("where", "workflow", "from_step"):
            if body.get(key) is not None and not isinstance(body[key], str):
                raise ApiError(400, "invalid_input", f"{key!r} must be a string or null")
        dry_run = body.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise ApiError(400, "invalid_input", "'dry_run' must be true or false")
        bulk = self.engine.bulk
        with client_errors():
            if dry_run:
                if body.get("from_step") is not None and action != "restart":
                    raise ValueError("from_step goes with the restart action only")
                run = await bulk.dry_run(action, body.get("where"), workflow=body.get("workflow"))
                return JsonResponse(run.to_json())
            token = caller(request)  # who: the token's name (none when the API is open)
            job = await bulk.start(
                action,
                body.get("where"),
                workflow=body.get("workflow"),
                from_step=body.get("from_step"),
                started_by=None if token is None else token.name,
            )
        return JsonResponse(job.to_json(), status_code=201)

    async def list_jobs(self, request: Request) -> Response:
        status: Any = request.query_params.get("status")
        limit = query_int(request, "limit", 50, 1, 1000)
        with client_errors():
            jobs = await self.engine.bulk.list(status=status, limit=limit)
        return JsonResponse({"jobs": [job.to_json() for job in jobs]})

    async def get_job(self, request: Request) -> Response:
        with client_errors():
            job = await self.engine.bulk.get(request.path_params["id"])
        return JsonResponse(job.to_json())

    async def cancel_job(self, request: Request) -> Response:
        with client_errors():
            job = await self.engine.bulk.cancel(request.path_params["id"])
        return JsonResponse(job.to_json())

    async def count(self, request: Request) -> Response:
        where = request.query_params.get("where")
        workflow = request.query_params.get("workflow") or None
        with client_errors():
            count = await self.engine.count_instances(where, workflow=workflow)
        return JsonResponse({"count": count})


def list_filters(request: Request) -> dict[str, Any]:
    """A list's ``where`` and time ranges from the query string (absent ones left out)."""
    keys = ("where", "created_after", "created_before", "ended_after", "ended_before")
    given: dict[str, Any] = {}
    for key in keys:
        raw = request.query_params.get(key)
        if raw is None:
            continue
        if key != "where":
            try:
                given[key] = float(raw)
                continue
            except ValueError:
                pass
        given[key] = raw
    return given
