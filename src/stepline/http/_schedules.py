"""The schedule endpoints: create, update and delete schedules at run time; list, detail, pause,
resume, trigger and backfill cron schedules (:class:`~stepline.triggers.cron.ScheduleClient`
over HTTP)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..engine import Engine
from ..errors import WorkflowNotFoundError
from ..records import InstanceRecord
from ..triggers.cron import parse_moment
from ._input import MISSING, RequestReader
from ._lookup import Lookup
from .errors import ApiError, JsonResponse, client_errors


def _object(body: Any, keys: tuple[str, ...], example: str) -> dict[str, Any]:
    """The request body as an object with only ``keys`` (an empty body: ``{}``)."""
    if body is MISSING:
        return {}
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_input", f"the request body must be a JSON object like "
                       f"{example}")  # fmt: skip
    unknown = sorted(set(body) - set(keys))
    if unknown:
        names = " and ".join(repr(key) for key in keys)
        raise ApiError(400, "invalid_input", f"unknown key {unknown[0]!r}; the keys are {names}")
    return body


def _moment(body: dict[str, Any], key: str) -> float:
    try:
        return parse_moment(body[key], repr(key))
    except ValueError as exc:
        raise ApiError(400, "invalid_input", str(exc)) from None


_DEFINITION = ("cron", "timezone", "params", "catch_up", "catch_up_limit", "overlap")
_CREATE_EXAMPLE = '{"name": "nightly", "workflow": "report", "cron": "0 2 * * *"}'


def _instance(record: InstanceRecord) -> dict[str, Any]:
    return {"id": record.id, "status": record.status}


@contextlib.contextmanager
def _workflow_is_input() -> Iterator[None]:
    """An unknown workflow named in a request body is bad input (400), not a missing page."""
    try:
        yield
    except WorkflowNotFoundError as exc:
        raise ApiError(400, "invalid_input", f"'workflow': {exc}") from None


class ScheduleEndpoints:
    """The schedules stored in ``engine``'s database (those its workers' schedulers synced)."""

    def __init__(self, engine: Engine, lookup: Lookup, reader: RequestReader) -> None:
        self.engine = engine
        self.lookup = lookup
        self.reader = reader

    async def list_schedules(self, request: Request) -> Response:
        workflow = request.query_params.get("workflow")
        if workflow == "":
            raise ApiError(400, "invalid_input", "query parameter 'workflow' is empty; leave it "
                           "out to list the schedules of every workflow")  # fmt: skip
        if workflow is not None:
            await self.lookup.require_workflow(workflow)
        with client_errors():
            infos = await self.engine.schedules().list(workflow)
        return JsonResponse({"schedules": [info.to_json() for info in infos]})

    async def create(self, request: Request) -> Response:
        """Store a schedule made at run time; 201 with it."""
        keys = ("name", "workflow", *_DEFINITION)
        body = _object(await self.reader.json(request), keys, _CREATE_EXAMPLE)
        missing = [key for key in ("name", "workflow", "cron") if key not in body]
        if missing:
            raise ApiError(400, "invalid_input", f"the request body needs {missing[0]!r}, "
                           f"like {_CREATE_EXAMPLE}")  # fmt: skip
        self._check_params(body)
        options = {key: body[key] for key in _DEFINITION[1:] if key in body}
        with client_errors(), _workflow_is_input():
            info = await self.engine.schedules().create(
                body["name"], body["workflow"], body["cron"], **options
            )
        return JsonResponse(info.to_json(), status_code=201)

    async def update(self, request: Request) -> Response:
        """Change some of a run-time schedule's fields; its state stays."""
        example = '{"cron": "0 3 * * *"}'
        body = _object(await self.reader.json(request), ("workflow", *_DEFINITION), example)
        if not body:
            raise ApiError(400, "invalid_input", f"the request body changes nothing; give the "
                           f"fields to change, like {example}")  # fmt: skip
        self._check_params(body)
        with client_errors(), _workflow_is_input():
            info = await self.engine.schedules().update(request.path_params["name"], **body)
        return JsonResponse(info.to_json())

    async def delete(self, request: Request) -> Response:
        """Delete a run-time schedule; the instances it created stay."""
        await self._no_body(request)
        with client_errors():
            info = await self.engine.schedules().delete(request.path_params["name"])
        return JsonResponse(info.to_json())

    def _check_params(self, body: dict[str, Any]) -> None:
        if body.get("params") is not None:
            self.reader.check_size(body["params"], "'params'")

    async def get_schedule(self, request: Request) -> Response:
        with client_errors():
            info = await self.engine.schedules().get(request.path_params["name"])
        return JsonResponse(info.to_json())

    async def pause(self, request: Request) -> Response:
        await self._no_body(request)
        with client_errors():
            info = await self.engine.schedules().pause(request.path_params["name"])
        return JsonResponse(info.to_json())

    async def resume(self, request: Request) -> Response:
        await self._no_body(request)
        with client_errors():
            info = await self.engine.schedules().resume(request.path_params["name"])
        return JsonResponse(info.to_json())

    async def _no_body(self, request: Request) -> None:
        _object(await self.reader.json(request), (), "{}")

    async def trigger(self, request: Request) -> Response:
        """Create the instance of the tick at ``at`` (default now); an existing one is
        returned unchanged."""
        name = request.path_params["name"]
        body = _object(await self.reader.json(request), ("at",), '{"at": "2024-01-31T09:00Z"}')
        at = _moment(body, "at") if body.get("at") is not None else None
        with client_errors():
            record = await self.engine.schedules().trigger(name, at)
        return JsonResponse({"schedule": name, "workflow": record.workflow, **_instance(record)})

    async def backfill(self, request: Request) -> Response:
        """Create the instances of every tick in ``[from, to]``; existing ones are kept."""
        name = request.path_params["name"]
        example = '{"from": "2024-01-31T00:00Z", "to": "2024-01-31T12:00Z"}'
        body = _object(await self.reader.json(request), ("from", "to"), example)
        missing = [key for key in ("from", "to") if key not in body]
        if missing:
            raise ApiError(400, "invalid_input", f"the request body needs {missing[0]!r}, "
                           f"like {example}")  # fmt: skip
        start, end = _moment(body, "from"), _moment(body, "to")
        with client_errors():
            done = await self.engine.schedules().backfill(name, start, end)
        return JsonResponse(
            {
                "schedule": name,
                "count": len(done),
                "created": done.created,
                "existing": done.existing,
                "instances": [_instance(record) for record in done],
            }
        )
