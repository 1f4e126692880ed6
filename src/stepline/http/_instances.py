"""The instance endpoints: list, create (one or a batch), detail, status changes, events,
delete. Requests are checked by :mod:`._input`; lookups shared with other endpoints are in
:mod:`._lookup`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..engine import Engine
from ..errors import DuplicateInstanceError, IllegalStateError
from ..records import InstanceRecord
from ._bulk import list_filters
from ._input import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    MISSING,
    RequestReader,
    query_bool,
    query_int,
    query_status,
    status_change,
)
from ._lookup import Lookup
from .errors import ApiError, JsonResponse, client_errors


def instance_summary(rec: InstanceRecord) -> dict[str, Any]:
    """An instance as listed: everything but params, output and rollback (they can be large)."""
    data = rec.to_json()
    for key in ("params", "output", "rollback", "parent"):
        data.pop(key)
    return data


class InstanceEndpoints:
    """The instances of ``engine``'s workflows, read and changed through its client API."""

    def __init__(self, engine: Engine, lookup: Lookup, reader: RequestReader) -> None:
        self.engine = engine
        self.lookup = lookup
        self.reader = reader

    async def list_all_instances(self, request: Request) -> Response:
        workflow = request.query_params.get("workflow")
        if workflow == "":
            raise ApiError(400, "invalid_input", "query parameter 'workflow' is empty; leave it "
                           "out to list the instances of every workflow")  # fmt: skip
        return await self._page(request, workflow)

    async def list_instances(self, request: Request) -> Response:
        return await self._page(request, request.path_params["name"])

    async def _page(self, request: Request, workflow: str | None) -> Response:
        status = query_status(request)
        limit = query_int(request, "limit", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
        cursor = request.query_params.get("cursor") or None
        if workflow is not None:
            await self.lookup.require_workflow(workflow)
        filters = list_filters(request)
        with client_errors():
            # The summaries leave params and outputs out: nothing offloaded is fetched.
            page = await self.engine.list_instances(
                workflow, status, limit, cursor, values=False, **filters
            )
            warnings = await self.engine.unserved_warnings(page.instances)
            retries = await self.engine.retries(page.instances)
        summaries = [
            {**instance_summary(r), "warning": warning, "retry": retry and retry.to_json()}
            for r, warning, retry in zip(page.instances, warnings, retries, strict=True)
        ]
        return JsonResponse({"instances": summaries, "cursor": page.cursor})

    async def create_instance(self, request: Request) -> Response:
        name = request.path_params["name"]
        body = await self.reader.json(request)
        item = self.reader.new_instance({} if body is MISSING else body, "the request body")
        options = {k: v for k, v in item.items() if k not in ("id", "params", "on_duplicate")}
        on_duplicate = item.get("on_duplicate", "return")
        if on_duplicate not in ("return", "raise"):
            raise ApiError(
                400,
                "invalid_input",
                f"invalid on_duplicate {on_duplicate!r}: use 'return' or 'raise'",
            )
        binding = self.engine.workflow(name)
        with client_errors():
            try:
                instance = await binding.create(
                    item["id"], item["params"], trigger="http", on_duplicate="raise",
                    traceparent=request.headers.get("traceparent"), **options,
                )  # fmt: skip
            except DuplicateInstanceError as exc:
                if on_duplicate != "return":
                    raise
                # Not created: the instance holding the dedup key, as 200 rather than 201.
                existing = await binding.get(exc.instance_id)
                held = await existing.record()
                body = {"id": existing.id, "status": held.status, "duplicate": True}
                return JsonResponse(body, status_code=200)
            created = await instance.record()
        return JsonResponse({"id": instance.id, "status": created.status}, status_code=201)

    async def create_batch(self, request: Request) -> Response:
        name = request.path_params["name"]
        items = self.reader.new_instances(await self.reader.json(request))
        traceparent = request.headers.get("traceparent")
        if traceparent is not None:  # the caller's trace, for every instance of the batch
            items = [{"traceparent": traceparent, **item} for item in items]
        version = request.query_params.get("version")  # for the items that name none
        with client_errors():
            binding = self.engine.workflow(name)
            created = await binding.create_batch(items, trigger="http", version=version)
            result = [{"id": inst.id, "status": (await inst.record()).status} for inst in created]
        return JsonResponse({"instances": result}, status_code=201)

    async def get_instance(self, request: Request) -> Response:
        params = request.path_params
        return JsonResponse(await self.lookup.detail(params["name"], params["id"]))

    async def change_status(self, request: Request) -> Response:
        params = request.path_params
        body = await self.reader.json(request)
        action, from_step, count, rollback, version = status_change(body)
        async with self.lookup.instance_errors():
            instance = await self.engine.workflow(params["name"]).get(params["id"])
            status = await instance.control(
                action, rollback=rollback, from_step=from_step, count=count, version=version
            )
        return JsonResponse({"id": instance.id, "status": status.status})

    async def send_event(self, request: Request) -> Response:
        params = request.path_params
        event_type = params["type"]
        body = await self.reader.json(request)
        payload = None if body is MISSING else body
        self.reader.check_size(payload, f"the payload of event {event_type!r}")
        async with self.lookup.instance_errors():
            instance = await self.engine.workflow(params["name"]).get(params["id"])
            await instance.send_event(event_type, payload)
            after = await instance.record()
        return JsonResponse(
            {"id": instance.id, "type": event_type, "status": after.status}, status_code=202
        )

    async def delete_instance(self, request: Request) -> Response:
        """Delete a finished instance; an unfinished one only with ``?force=true``
        (:meth:`stepline.Instance.delete`: the status is checked as it is deleted)."""
        params = request.path_params
        force = query_bool(request, "force")
        async with self.lookup.instance_errors():
            instance = await self.engine.workflow(params["name"]).get(params["id"])
            try:
                await instance.delete(force=force)
            except IllegalStateError as exc:
                raise ApiError(
                    409, "illegal_state", f"{exc}; terminate it first, or delete it with "
                    "?force=true",
                ) from exc  # fmt: skip
        return JsonResponse({"id": instance.id, "deleted": True})

    async def list_events(self, request: Request) -> Response:
        """The events sent to an instance, pending and consumed, in send order."""
        params = request.path_params
        async with self.lookup.instance_errors():
            instance = await self.engine.workflow(params["name"]).get(params["id"])
            events = await instance.events()
        return JsonResponse({"events": [event.to_json() for event in events]})
