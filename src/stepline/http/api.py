"""The JSON API under ``/api``: workflows, instances, status changes, events, live stream.

Paths follow Cloudflare's Workflows REST API without the account part. Every handler sits on
the client API (:class:`stepline.Engine`, :class:`stepline.Instance`); nothing here touches the
worker or the runtime. Bad input never produces a 500: it is answered with
``{"error": {"code", "message"}}`` and 400, 404, 409, 413 or 422 (see :mod:`.errors`).

The endpoints are grouped by resource: :mod:`._workflows`, :mod:`._instances`, :mod:`._stream`,
:mod:`._messages` (queries, updates, stream subscriptions), :mod:`._schedules`; this module
holds the workers, activity, whoami and OpenAPI endpoints and the routes; each route's role is
in :mod:`.roles`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..access import ROLES
from ..engine import Engine
from ._bulk import BulkEndpoints
from ._input import RequestReader
from ._instances import InstanceEndpoints
from ._lookup import Lookup
from ._messages import MessageEndpoints
from ._schedules import ScheduleEndpoints
from ._stream import InstanceStream
from ._workflows import WorkflowEndpoints
from .errors import JsonResponse, client_errors
from .openapi import openapi_document
from .roles import caller, guarded

__all__ = ["Api", "Endpoint", "api_routes", "by_method", "client_errors"]

Endpoint = Callable[[Request], Awaitable[Response]]


class Api:
    """The API handlers, bound to one engine and its limits."""

    def __init__(
        self, engine: Engine, *, max_body: int, secured: bool, stream_interval: float = 1.0
    ) -> None:
        self.engine = engine
        self.secured = secured
        self.max_body = max_body
        self.max_payload = engine.settings.max_payload
        self.stream_interval = stream_interval
        self.lookup = lookup = Lookup(engine)
        self.reader = reader = RequestReader(max_body, self.max_payload)
        self.workflows = WorkflowEndpoints(engine, lookup)
        self.instances = InstanceEndpoints(engine, lookup, reader)
        self.stream = InstanceStream(engine, lookup, stream_interval)
        self.schedules = ScheduleEndpoints(engine, lookup, reader)
        self.messages = MessageEndpoints(engine, lookup, reader, stream_interval)
        self.bulk = BulkEndpoints(engine, reader)

    async def openapi(self, request: Request) -> Response:
        return JsonResponse(openapi_document(self.max_body, self.max_payload, secured=self.secured))

    async def whoami(self, request: Request) -> Response:
        """The caller's token name and role, and which roles it holds (the dashboard hides
        what it cannot do)."""
        token = caller(request)
        role = "admin" if token is None else token.role
        return JsonResponse(
            {
                "name": None if token is None else token.name,
                "role": role,
                "roles": list(ROLES[: ROLES.index(role) + 1]),
                "secured": self.secured,
            }
        )

    async def activity(self, request: Request) -> Response:
        with client_errors():
            activity = await self.engine.activity()
        return JsonResponse(activity.to_json())

    async def list_workers(self, request: Request) -> Response:
        with client_errors():
            workers = await self.engine.list_workers()
        now = self.engine.now()
        return JsonResponse({"workers": [worker.to_json(now) for worker in workers]})


def by_method(handlers: dict[str, Endpoint]) -> Endpoint:
    """One endpoint for several methods of a path, so that its route knows them all: a wrong
    method gets 405 with an ``Allow`` header listing every method the path takes."""

    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await handlers[method](request)

    return endpoint


def api_routes(api: Api) -> list[Route]:
    """The routes mounted under ``/api``."""
    base = "/workflows/{name}/instances"
    one = base + "/{id}"
    workflows, instances, schedules = api.workflows, api.instances, api.schedules
    schedule = "/schedules/{name}"
    paths: dict[str, dict[str, Endpoint]] = {
        "/openapi.json": {"GET": api.openapi},
        "/whoami": {"GET": api.whoami},
        "/workers": {"GET": api.list_workers},
        "/activity": {"GET": api.activity},
        "/workflows": {"GET": workflows.list_workflows},
        "/workflows/{name}": {"GET": workflows.get_workflow},
        "/workflows/{name}/versions": {"GET": workflows.get_versions},
        "/instances": {"GET": instances.list_all_instances},
        "/instances/count": {"GET": api.bulk.count},
        "/bulk": {"GET": api.bulk.list_jobs, "POST": api.bulk.start},
        "/bulk/{id}": {"GET": api.bulk.get_job},
        "/bulk/{id}/cancel": {"POST": api.bulk.cancel_job},
        base: {"GET": instances.list_instances, "POST": instances.create_instance},
        base + "/batch": {"POST": instances.create_batch},
        one: {"GET": instances.get_instance, "DELETE": instances.delete_instance},
        one + "/status": {"PATCH": instances.change_status},
        one + "/events": {"GET": instances.list_events},
        one + "/events/{type}": {"POST": instances.send_event},
        one + "/stream": {"GET": api.stream.stream},
        one + "/queries/{query}": {"GET": api.messages.query},
        one + "/updates/{update}": {"POST": api.messages.update},
        one + "/subscribe": {"GET": api.messages.subscribe},
        "/schedules": {"GET": schedules.list_schedules, "POST": schedules.create},
        schedule: {
            "GET": schedules.get_schedule,
            "PATCH": schedules.update,
            "DELETE": schedules.delete,
        },
        schedule + "/pause": {"POST": schedules.pause},
        schedule + "/resume": {"POST": schedules.resume},
        schedule + "/trigger": {"POST": schedules.trigger},
        schedule + "/backfill": {"POST": schedules.backfill},
    }
    return [
        Route(path, by_method(guarded("api", path, handlers)), methods=list(handlers))
        for path, handlers in paths.items()
    ]
