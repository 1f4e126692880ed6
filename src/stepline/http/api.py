"""The JSON API under ``/api``: workflows, instances, status changes, events, live stream.

Paths follow Cloudflare's Workflows REST API without the account part. Every handler sits on
the client API (:class:`stepline.Engine`, :class:`stepline.Instance`); nothing here touches the
worker or the runtime. Bad input never produces a 500: it is answered with
``{"error": {"code", "message"}}`` and 400, 404, 409, 413 or 422 (see :mod:`.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .._json import dumps as json_dumps
from .._json import loads_exact
from ..client import Instance
from ..dag import node_states
from ..engine import Engine
from ..errors import (
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    InvalidPayloadError,
    StoreError,
    WorkflowNotFoundError,
)
from ..records import (
    FINISHED_STATUSES,
    INSTANCE_STATUSES,
    InstanceRecord,
    StepRecord,
    WorkflowInfo,
)
from .errors import ApiError, JsonResponse
from .openapi import openapi_document

DEFAULT_PAGE_SIZE = 25
MAX_PAGE_SIZE = 100
MAX_BATCH = 100
DEFINITION_TTL = 30.0
STATUS_ACTIONS = ("pause", "resume", "terminate", "restart")
_MISSING: Any = object()

Endpoint = Callable[[Request], Awaitable[Response]]


@contextlib.contextmanager
def client_errors() -> Iterator[None]:
    """Translate the client API's exceptions into API errors with the right status."""
    try:
        yield
    except ApiError:
        raise
    except WorkflowNotFoundError as exc:
        raise ApiError(404, "workflow_not_found", str(exc)) from exc
    except InstanceNotFoundError as exc:
        raise ApiError(404, "instance_not_found", str(exc)) from exc
    except InstanceAlreadyExistsError as exc:
        raise ApiError(409, "instance_exists", str(exc)) from exc
    except IllegalStateError as exc:
        raise ApiError(409, "illegal_state", str(exc)) from exc
    except StoreError as exc:
        raise ApiError(503, "store_unavailable", f"the database failed: {exc}") from exc
    except (InvalidPayloadError, ValueError, OverflowError) as exc:
        raise ApiError(400, "invalid_input", str(exc)) from exc


def instance_summary(rec: InstanceRecord) -> dict[str, Any]:
    """An instance as listed: everything but params, output and rollback (they can be large)."""
    data = rec.to_json()
    for key in ("params", "output", "rollback", "parent"):
        data.pop(key)
    return data


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


def workflow_json(info: WorkflowInfo) -> dict[str, Any]:
    data = info.to_json()
    counts: dict[str, int] = dict.fromkeys(INSTANCE_STATUSES, 0)
    counts.update(info.counts)
    data["counts"] = counts
    data["total"] = sum(counts.values())
    data["graph"] = graph_of(info.definition)
    return data


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
        self.keepalive = 15.0
        self._known: set[str] = set()
        self._definitions: dict[str, tuple[float, dict[str, Any] | None]] = {}

    # -- helpers ---------------------------------------------------------------------------------

    async def _workflow_info(self, name: str) -> WorkflowInfo:
        infos = await self.engine.list_workflows()
        for info in infos:
            if info.name == name:
                return info
        raise self._unknown_workflow(name, [info.name for info in infos])

    def _unknown_workflow(self, name: str, known: list[str]) -> ApiError:
        return ApiError(404, "workflow_not_found", str(WorkflowNotFoundError(name, known)))

    async def _require_workflow(self, name: str) -> None:
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
            await self._require_workflow(exc.workflow)
        except ApiError as error:
            return error
        return ApiError(404, "instance_not_found", str(exc))

    async def _body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise self._too_large(int(declared))
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise self._too_large(size, at_least=True)
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, size: int, *, at_least: bool = False) -> ApiError:
        amount = f"at least {size:,}" if at_least else f"{size:,}"
        return ApiError(
            413,
            "payload_too_large",
            f"the request body is {amount} bytes, over the limit of {self.max_body:,} bytes; "
            "store large data elsewhere and pass a reference",
        )

    async def _json(self, request: Request) -> Any:
        """The request body parsed as JSON; an empty body is ``_MISSING``."""
        body = await self._body(request)
        if not body.strip():
            return _MISSING
        try:
            return loads_exact(body, what="the request body")
        except orjson.JSONDecodeError as exc:
            raise ApiError(
                422, "invalid_json", f"the request body is not valid JSON: {exc}"
            ) from None
        except InvalidPayloadError as exc:
            raise ApiError(400, "invalid_input", str(exc)) from None

    def _check_size(self, value: Any, what: str) -> None:
        try:
            size = len(json_dumps(value, what=what, limit=1 << 62))
        except InvalidPayloadError as exc:
            raise ApiError(400, "invalid_input", str(exc)) from None
        if size > self.max_payload:
            raise ApiError(
                413,
                "payload_too_large",
                f"{what} is {size:,} bytes encoded, over the limit of {self.max_payload:,} "
                "bytes; store large data elsewhere and pass a reference",
            )

    def _new_instance(self, item: Any, where: str) -> dict[str, Any]:
        if not isinstance(item, dict):
            raise ApiError(
                400, "invalid_input", f"{where} must be a JSON object like "
                '{"id": "optional-id", "params": {...}}',
            )  # fmt: skip
        unknown = sorted(set(item) - {"id", "params"})
        if unknown:
            raise ApiError(
                400, "invalid_input", f"{where} has an unknown key {unknown[0]!r}; "
                "the keys are 'id' and 'params'",
            )  # fmt: skip
        instance_id = item.get("id")
        if instance_id is not None and not isinstance(instance_id, str):
            raise ApiError(400, "invalid_input", f"{where}: 'id' must be a string or null")
        self._check_size(item.get("params"), f"{where}: params")
        return {"id": instance_id, "params": item.get("params")}

    @staticmethod
    def _query_int(request: Request, key: str, default: int, low: int, high: int) -> int:
        raw = request.query_params.get(key)
        if raw is None:
            return default
        if not raw.isdigit() or not low <= int(raw) <= high:
            raise ApiError(
                400, "invalid_input", f"query parameter {key!r} must be a whole number from "
                f"{low} to {high}, got {raw!r}",
            )  # fmt: skip
        return int(raw)

    @staticmethod
    def _query_status(request: Request) -> str | None:
        status = request.query_params.get("status")
        if status is not None and status not in INSTANCE_STATUSES:
            raise ApiError(
                400, "invalid_input", f"unknown status {status!r}; use one of "
                f"{', '.join(INSTANCE_STATUSES)}",
            )  # fmt: skip
        return status

    async def _page(self, request: Request, workflow: str | None) -> Response:
        status = self._query_status(request)
        limit = self._query_int(request, "limit", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
        cursor = request.query_params.get("cursor") or None
        if workflow is not None:
            await self._require_workflow(workflow)
        with client_errors():
            page = await self.engine.list_instances(workflow, status, limit, cursor)
            warnings = await self.engine.unserved_warnings(page.instances)
        summaries = [
            {**instance_summary(r), "warning": warning}
            for r, warning in zip(page.instances, warnings, strict=True)
        ]
        return JsonResponse({"instances": summaries, "cursor": page.cursor})

    async def _detail(self, workflow: str, instance_id: str) -> dict[str, Any]:
        try:
            with client_errors():
                instance = await self.engine.workflow(workflow).get(instance_id)
                record = await instance.record()
                steps = await instance.steps()
                (warning,) = await self.engine.unserved_warnings([record])
        except ApiError as error:
            if isinstance(error.__cause__, InstanceNotFoundError):
                raise await self._instance_missing(error.__cause__) from None
            raise
        graph = graph_of(await self._definition(workflow))
        if graph is not None:
            graph["states"] = self._node_states(graph, steps, instance_id)
        return {
            "workflow": {**record.to_json(), "warning": warning},
            "steps": [s.to_json() for s in steps],
            "graph": graph,
        }

    async def _definition(self, workflow: str) -> dict[str, Any] | None:
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

    @staticmethod
    def _node_states(
        graph: dict[str, Any], steps: list[StepRecord], instance_id: str
    ) -> dict[str, str]:
        try:
            return node_states(graph, steps, instance_id)
        except (KeyError, TypeError, ValueError, AttributeError):
            return {}  # a definition stored by another stepline version: show it uncoloured

    # -- endpoints -------------------------------------------------------------------------------

    async def openapi(self, request: Request) -> Response:
        return JsonResponse(openapi_document(self.max_body, self.max_payload, secured=self.secured))

    async def list_workers(self, request: Request) -> Response:
        with client_errors():
            workers = await self.engine.list_workers()
        now = self.engine.now()
        return JsonResponse({"workers": [worker.to_json(now) for worker in workers]})

    async def list_workflows(self, request: Request) -> Response:
        with client_errors():
            infos = await self.engine.list_workflows()
        self._known = {info.name for info in infos}
        return JsonResponse({"workflows": [workflow_json(info) for info in infos]})

    async def get_workflow(self, request: Request) -> Response:
        name = request.path_params["name"]
        with client_errors():
            info = await self._workflow_info(name)
        return JsonResponse(workflow_json(info))

    async def list_all_instances(self, request: Request) -> Response:
        workflow = request.query_params.get("workflow")
        if workflow == "":
            raise ApiError(400, "invalid_input", "query parameter 'workflow' is empty; leave it "
                           "out to list the instances of every workflow")  # fmt: skip
        return await self._page(request, workflow)

    async def list_instances(self, request: Request) -> Response:
        return await self._page(request, request.path_params["name"])

    async def create_instance(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await self._json(request)
        item = self._new_instance({} if body is _MISSING else body, "the request body")
        with client_errors():
            instance = await self.engine.workflow(name).create(
                item["id"], item["params"], trigger="http"
            )
            status = await instance.status()
        return JsonResponse({"id": instance.id, "status": status.status}, status_code=201)

    async def create_batch(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await self._json(request)
        if not isinstance(body, list) or not body:
            raise ApiError(
                400, "invalid_input", "the request body must be a non-empty JSON array of "
                '{"id"?, "params"?} objects',
            )  # fmt: skip
        if len(body) > MAX_BATCH:
            raise ApiError(
                400, "invalid_input", f"a batch holds at most {MAX_BATCH} instances, got "
                f"{len(body)}; split it into several requests",
            )  # fmt: skip
        items = [self._new_instance(item, f"item {i} of the batch") for i, item in enumerate(body)]
        ids = [item["id"] for item in items if item["id"] is not None]
        if len(ids) != len(set(ids)):
            raise ApiError(400, "invalid_input", "the batch names the same instance id twice")
        with client_errors():
            created = await self.engine.workflow(name).create_batch(items, trigger="http")
            result = [{"id": inst.id, "status": (await inst.status()).status} for inst in created]
        return JsonResponse({"instances": result}, status_code=201)

    async def get_instance(self, request: Request) -> Response:
        params = request.path_params
        return JsonResponse(await self._detail(params["name"], params["id"]))

    async def change_status(self, request: Request) -> Response:
        params = request.path_params
        body = await self._json(request)
        action, from_step, count, rollback = self._status_change(body)
        try:
            with client_errors():
                instance = await self.engine.workflow(params["name"]).get(params["id"])
                if action == "pause":
                    await instance.pause()
                elif action == "resume":
                    await instance.resume()
                elif action == "terminate":
                    await instance.terminate(rollback=rollback)
                else:
                    await instance.restart(from_step, count=count)
                status = await instance.status()
        except ApiError as error:
            if isinstance(error.__cause__, InstanceNotFoundError):
                raise await self._instance_missing(error.__cause__) from None
            raise
        return JsonResponse({"id": instance.id, "status": status.status})

    @staticmethod
    def _status_change(body: Any) -> tuple[str, str | None, int, bool]:
        if not isinstance(body, dict):
            raise ApiError(
                400, "invalid_input", 'the request body must be a JSON object like '
                '{"status": "pause"}',
            )  # fmt: skip
        unknown = sorted(set(body) - {"status", "from", "count", "rollback"})
        if unknown:
            raise ApiError(
                400, "invalid_input", f"unknown key {unknown[0]!r}; the keys are 'status', "
                "'from' and 'count' (restart), 'rollback' (terminate)",
            )  # fmt: skip
        action = body.get("status")
        if action not in STATUS_ACTIONS:
            raise ApiError(
                400, "invalid_input", f"'status' must be one of {', '.join(STATUS_ACTIONS)}, "
                f"got {action!r}",
            )  # fmt: skip
        from_step = body.get("from")
        count = body.get("count", 1)
        rollback = body.get("rollback", False)
        if action != "restart" and ("from" in body or "count" in body):
            raise ApiError(400, "invalid_input", "'from' and 'count' only go with 'restart'")
        if action != "terminate" and "rollback" in body:
            raise ApiError(400, "invalid_input", "'rollback' only goes with 'terminate'")
        if from_step is not None and not isinstance(from_step, str):
            raise ApiError(400, "invalid_input", "'from' must be a step name (a string)")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1 << 31:
            raise ApiError(400, "invalid_input", "'count' must be a whole number from 1")
        if from_step is None and "count" in body:
            raise ApiError(400, "invalid_input", "'count' needs 'from' (the step to restart at)")
        if not isinstance(rollback, bool):
            raise ApiError(400, "invalid_input", "'rollback' must be true or false")
        return action, from_step, count, rollback

    async def send_event(self, request: Request) -> Response:
        params = request.path_params
        event_type = params["type"]
        body = await self._json(request)
        payload = None if body is _MISSING else body
        self._check_size(payload, f"the payload of event {event_type!r}")
        try:
            with client_errors():
                instance = await self.engine.workflow(params["name"]).get(params["id"])
                await instance.send_event(event_type, payload)
                status = await instance.status()
        except ApiError as error:
            if isinstance(error.__cause__, InstanceNotFoundError):
                raise await self._instance_missing(error.__cause__) from None
            raise
        return JsonResponse(
            {"id": instance.id, "type": event_type, "status": status.status}, status_code=202
        )

    async def delete_instance(self, request: Request) -> Response:
        """Delete a finished instance; an unfinished one only with ``?force=true``
        (:meth:`stepline.Instance.delete`: the status is checked as it is deleted)."""
        params = request.path_params
        force = self._query_bool(request, "force")
        try:
            with client_errors():
                instance = await self.engine.workflow(params["name"]).get(params["id"])
                try:
                    await instance.delete(force=force)
                except IllegalStateError as exc:
                    raise ApiError(
                        409, "illegal_state", f"{exc}; terminate it first, or delete it with "
                        "?force=true",
                    ) from exc  # fmt: skip
        except ApiError as error:
            if isinstance(error.__cause__, InstanceNotFoundError):
                raise await self._instance_missing(error.__cause__) from None
            raise
        return JsonResponse({"id": instance.id, "deleted": True})

    @staticmethod
    def _query_bool(request: Request, key: str) -> bool:
        raw = request.query_params.get(key)
        if raw is None or raw == "false":
            return False
        if raw == "true":
            return True
        raise ApiError(
            400, "invalid_input", f"query parameter {key!r} must be true or false, got {raw!r}"
        )

    async def list_events(self, request: Request) -> Response:
        """The events sent to an instance, pending and consumed, in send order."""
        params = request.path_params
        try:
            with client_errors():
                instance = await self.engine.workflow(params["name"]).get(params["id"])
                events = await instance.events()
        except ApiError as error:
            if isinstance(error.__cause__, InstanceNotFoundError):
                raise await self._instance_missing(error.__cause__) from None
            raise
        return JsonResponse({"events": [event.to_json() for event in events]})

    async def stream(self, request: Request) -> Response:
        """Server-Sent Events: the instance detail each time it changes, until it finishes."""
        params = request.path_params
        first = await self._detail(params["name"], params["id"])
        with client_errors():
            instance = await self.engine.get_instance(params["name"], params["id"])
        return StreamingResponse(
            self._events(request, instance, first),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _events(
        self, request: Request, instance: Instance, detail: dict[str, Any]
    ) -> AsyncIterator[bytes]:
        workflow, instance_id = instance.workflow, instance.id
        loop = asyncio.get_running_loop()
        last = orjson.dumps(detail)
        yield b"event: instance\ndata: " + last + b"\n\n"
        quiet_since = loop.time()
        with instance.watch_changes() as changes:
            # The first detail was read before this watch began: read again at once.
            changes.changed()
            while detail["workflow"]["status"] not in FINISHED_STATUSES:
                await changes.wait(self.stream_interval)
                if await request.is_disconnected():
                    return
                try:
                    detail = await self._detail(workflow, instance_id)
                except ApiError as error:
                    data = orjson.dumps({"error": {"code": error.code, "message": error.message}})
                    yield b"event: error\ndata: " + data + b"\n\n"
                    return
                encoded = orjson.dumps(detail)
                if encoded != last:
                    last = encoded
                    quiet_since = loop.time()
                    yield b"event: instance\ndata: " + encoded + b"\n\n"
                elif loop.time() - quiet_since >= self.keepalive:
                    quiet_since = loop.time()
                    yield b": keep-alive\n\n"
        yield b"event: end\ndata: {}\n\n"


def _by_method(handlers: dict[str, Endpoint]) -> Endpoint:
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
    paths: dict[str, dict[str, Endpoint]] = {
        "/openapi.json": {"GET": api.openapi},
        "/workers": {"GET": api.list_workers},
        "/workflows": {"GET": api.list_workflows},
        "/workflows/{name}": {"GET": api.get_workflow},
        "/instances": {"GET": api.list_all_instances},
        base: {"GET": api.list_instances, "POST": api.create_instance},
        base + "/batch": {"POST": api.create_batch},
        one: {"GET": api.get_instance, "DELETE": api.delete_instance},
        one + "/status": {"PATCH": api.change_status},
        one + "/events": {"GET": api.list_events},
        one + "/events/{type}": {"POST": api.send_event},
        one + "/stream": {"GET": api.stream},
    }
    return [
        Route(path, _by_method(handlers), methods=list(handlers))
        for path, handlers in paths.items()
    ]
