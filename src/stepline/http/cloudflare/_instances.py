"""Cloudflare's instance endpoints: list, create (one or a batch), describe, one step, status
changes and events, each one call of the client layer (as ``/api``'s are)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ...engine import Engine
from ...operations.search import Ranges, build_filter, to_seconds
from ...records import InstancePage
from .._input import MISSING, RequestReader, query_status
from .._lookup import Lookup
from ..errors import ApiError, client_errors
from . import _input, shapes
from .envelope import ok, page_info

DEFAULT_PER_PAGE = 50
MAX_PAGED = 10_000
"""The deepest instance a page number reaches: past it, page with ``cursor``."""
_STEP_TYPES = {"step": ("do", "rollback", "start_workflow"), "waitForEvent": ("wait_for_event",)}


class InstanceEndpoints:
    """The instances of ``engine``'s workflows, in Cloudflare's shapes."""

    def __init__(self, engine: Engine, lookup: Lookup, reader: RequestReader) -> None:
        self.engine = engine
        self.lookup = lookup
        self.reader = reader

    async def list_instances(self, request: Request) -> Response:
        """Newest first (``direction=asc``: oldest first), by ``page`` or by ``cursor``; the
        answer's ``result_info.cursor`` is the next page's, absent on the last."""
        name = request.path_params["name"]
        query = request.query_params
        ranges: Ranges = {}
        try:
            if query.get("date_start"):
                ranges["created_after"] = to_seconds(query["date_start"], what="date_start")
            if query.get("date_end"):
                ranges["created_before"] = to_seconds(query["date_end"], what="date_end")
        except ValueError as exc:
            raise _input.bad(str(exc)) from None
        direction = query.get("direction", "desc")
        if direction not in ("asc", "desc"):
            raise _input.bad(f"'direction' must be asc or desc, got {direction!r}")
        cursor = query.get("cursor") or None
        if cursor is not None and "page" in query:
            raise _input.bad("'cursor' and 'page' cannot be combined; page with one of them")
        page, per_page = _input.page_of(request, DEFAULT_PER_PAGE)
        if page * per_page > MAX_PAGED:
            raise _input.bad(f"page {page} of {per_page} reaches past instance {MAX_PAGED:,}; "
                             "page further with 'cursor' (result_info.cursor)")  # fmt: skip
        status = query_status(request)
        await self.lookup.require_workflow(name)
        asc = direction == "asc"
        with client_errors():
            listing = await self._walk(name, status, per_page, cursor, page, asc, ranges)
            if ranges:
                dated = build_filter(workflow=name, status=status, **ranges)
                total = await self.engine.count_instances(dated)
            else:
                info = await self.lookup.workflow_info(name)
                total = info.counts.get(status, 0) if status else sum(info.counts.values())
        result_info = page_info(page, per_page, len(listing.instances), total)
        if listing.cursor is not None:
            result_info["cursor"] = listing.cursor
        return ok([shapes.instance_summary(r) for r in listing.instances], result_info)

    async def _walk(
        self,
        name: str,
        status: str | None,
        size: int,
        cursor: str | None,
        page: int,
        asc: bool,
        ranges: Ranges,
    ) -> InstancePage:
        """The page after ``cursor``, or page number ``page`` (read through the pages before
        it: stepline's pages are cursors); past the last page, an empty one."""
        for number in range(1 if cursor is not None else page):
            listing = await self.engine.list_instances(
                name, status, size, cursor, oldest_first=asc, values=False, **ranges
            )
            cursor = listing.cursor
            if cursor is None and number < page - 1:
                return InstancePage([], None)
        return listing

    async def create_instance(self, request: Request) -> Response:
        body = await self.reader.json(request)
        item = _input.new_instance(self.reader, {} if body is MISSING else body, "the request body")
        binding = self.engine.workflow(request.path_params["name"])
        with client_errors():
            instance = await binding.create(
                item["id"], item["params"], trigger="http", retention=item["retention"]
            )
            record = await instance.record()
        return ok(shapes.created_json(record), status=201)

    async def create_batch(self, request: Request) -> Response:
        given = _input.new_instances(self.reader, await self.reader.json(request))
        keys = ("id", "params", "retention")  # each instance's own retention, as a create's
        items = [{key: item[key] for key in keys} for item in given]
        binding = self.engine.workflow(request.path_params["name"])
        with client_errors():
            created = await binding.create_batch(items, trigger="http")
            records = [await instance.record() for instance in created]
        return ok([shapes.created_json(record) for record in records], status=201)

    async def get_instance(self, request: Request) -> Response:
        """``?simple=true`` leaves the steps out; ``?order=desc`` lists them newest first."""
        params, query = request.path_params, request.query_params
        simple, order = query.get("simple", "false"), query.get("order", "asc")
        if simple not in ("true", "false") or order not in ("asc", "desc"):
            raise _input.bad("'simple' is true or false and 'order' asc or desc")
        record, steps = await self.lookup.read(params["name"], params["id"])
        detail = shapes.instance_detail(
            record, steps, simple=simple == "true", newest_first=order == "desc"
        )
        return ok(detail)

    async def get_step(self, request: Request) -> Response:
        """One step's status, output and error (``?name=fetch-1&type=step&attempt=2``)."""
        params, query = request.path_params, request.query_params
        name, kind = query.get("name"), query.get("type")
        if not name or kind not in _STEP_TYPES:
            raise _input.bad("'name' (as listed, such as fetch-1) and 'type' (step or "
                             "waitForEvent) are required")  # fmt: skip
        _, steps = await self.lookup.read(params["name"], params["id"])
        found = [s for s in steps if s.display_name == name and s.kind in _STEP_TYPES[kind]]
        if not found:
            message = f"instance {params['id']!r} has no {kind} step {name!r}"
            raise ApiError(404, "step_not_found", f"{message}; GET the instance to list its steps")
        step = found[0]
        attempt = None
        if "attempt" in query:
            number = _input.query_number(request, "attempt", 1, 1 << 31)
            attempt = next((a for a in step.attempts if a.number == number), None)
            if attempt is None:
                raise ApiError(404, "step_not_found", f"step {name!r} has no attempt {number} "
                               f"(it has {len(step.attempts)})")  # fmt: skip
        last = attempt is None or attempt.number == len(step.attempts)
        result = {
            "status": shapes.step_status(step, attempt),
            "output": step.output if last else None,
            "error": step.error if attempt is None else attempt.error,
        }
        if kind == "waitForEvent":
            result["event_type"] = (step.info or {}).get("type")
        return ok(result)

    async def change_status(self, request: Request) -> Response:
        params = request.path_params
        change = _input.status_change(await self.reader.json(request))
        async with self.lookup.instance_errors():
            instance = await self.engine.workflow(params["name"]).get(params["id"])
            status = await instance.control(**change)
        return ok({"status": status.status, "timestamp": shapes.iso(self.engine.now())})

    async def send_event(self, request: Request) -> Response:
        params = request.path_params
        event_type = params["type"]
        body = await self.reader.json(request)
        payload = None if body is MISSING else body
        self.reader.check_size(payload, f"the payload of event {event_type!r}")
        async with self.lookup.instance_errors():
            instance = await self.engine.workflow(params["name"]).get(params["id"])
            await instance.send_event(event_type, payload)
        return ok({"instanceId": instance.id, "timestamp": shapes.iso(self.engine.now())})
