"""The message endpoints of an instance (docs/messaging.md): ``GET .../queries/{query}``,
``POST .../updates/{update}`` and ``GET .../subscribe?stream=``, Server-Sent Events with one
item per event, its ``seq`` as the event id (a reconnecting ``EventSource`` sends the last one
back as ``Last-Event-ID`` and misses nothing)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .._json import parse_json_argument
from ..client import Instance
from ..durations import Duration, parse_duration
from ..engine import Engine
from ..errors import InvalidPayloadError, QueryError, UpdateFailedError, UpdateRejectedError
from ..messages import check_cursor, check_stream, check_update_id
from ..records import FINISHED_STATUSES
from ._input import MISSING, RequestReader
from ._lookup import Lookup
from .errors import ApiError, JsonResponse

DEFAULT_UPDATE_TIMEOUT = 60.0
"""How long an update waits for its reply over HTTP unless the body says (seconds)."""
_PAGE = 100
_UPDATE_KEYS = ("args", "update_id", "timeout", "wait")


@contextlib.contextmanager
def message_errors() -> Iterator[None]:
    """A query's or update's failure as an API error."""
    try:
        yield
    except QueryError as exc:
        status, code = {
            "UnknownQueryError": (404, "query_not_found"),
            "InvalidArgumentsError": (400, "invalid_input"),
            "NoWorkerError": (503, "no_worker"),
        }.get(exc.error_name, (422, "query_failed"))
        raise ApiError(status, code, str(exc)) from exc
    except UpdateRejectedError as exc:
        status, code = {
            "UnknownUpdateError": (404, "update_not_found"),
            "InvalidArgumentsError": (400, "invalid_input"),
        }.get(exc.error_name, (422, "update_rejected"))
        raise ApiError(status, code, str(exc)) from exc
    except UpdateFailedError as exc:
        raise ApiError(422, "update_failed", str(exc)) from exc
    except TimeoutError as exc:
        raise ApiError(504, "timeout", str(exc)) from exc


def _duration(value: Any, what: str) -> float:
    try:
        return parse_duration(value, what=what, allow_zero=True)
    except ValueError as exc:
        raise ApiError(400, "invalid_input", str(exc)) from None


class MessageEndpoints:
    """Queries, updates and stream subscriptions, through the client API."""

    def __init__(
        self, engine: Engine, lookup: Lookup, reader: RequestReader, interval: float
    ) -> None:
        self.engine = engine
        self.lookup = lookup
        self.reader = reader
        self.interval = interval
        self.keepalive = 15.0

    async def _instance(self, request: Request) -> Instance:
        params = request.path_params
        async with self.lookup.instance_errors():
            return await self.engine.workflow(params["name"]).get(params["id"])

    def _args(self, value: Any, what: str) -> list[Any]:
        if not isinstance(value, list):
            raise ApiError(400, "invalid_input", f"{what} must be a JSON array of arguments")
        self.reader.check_size(value, what)
        return value

    async def query(self, request: Request) -> Response:
        """``GET .../queries/{query}?args=[...]&timeout=...``: the query's answer."""
        name = request.path_params["query"]
        raw = request.query_params.get("args")
        args: list[Any] = []
        if raw is not None:
            try:
                parsed = parse_json_argument(raw, what="query parameter 'args'")
            except InvalidPayloadError as exc:
                raise ApiError(400, "invalid_input", str(exc)) from None
            args = self._args(parsed, "query parameter 'args'")
        timeout = request.query_params.get("timeout")
        seconds: Duration | None = None if timeout is None else _duration(timeout, "timeout")
        instance = await self._instance(request)
        async with self.lookup.instance_errors():
            with message_errors():
                answer = await instance.query(name, *args, timeout=seconds)
        return JsonResponse({"query": name, "answer": answer})

    async def update(self, request: Request) -> Response:
        """``POST .../updates/{update}`` with ``{"args", "update_id", "timeout", "wait"}``
        (each optional): the reply, or 202 at once with ``"wait": false``."""
        name = request.path_params["update"]
        body = await self.reader.json(request)
        body = {} if body is MISSING else body
        if not isinstance(body, dict):
            raise ApiError(400, "invalid_input", 'the request body must be a JSON object like '
                           '{"args": [...], "update_id": "..."}')  # fmt: skip
        unknown = sorted(set(body) - set(_UPDATE_KEYS))
        if unknown:
            raise ApiError(400, "invalid_input", f"unknown key {unknown[0]!r}; the keys are "
                           + ", ".join(repr(k) for k in _UPDATE_KEYS))  # fmt: skip
        args = self._args(body.get("args", []), "'args'")
        wait = body.get("wait", True)
        if not isinstance(wait, bool):
            raise ApiError(400, "invalid_input", f"'wait' must be true or false, got {wait!r}")
        raw_timeout = body.get("timeout", DEFAULT_UPDATE_TIMEOUT)
        timeout = _duration(raw_timeout, "'timeout'")
        try:
            update_id = check_update_id(body.get("update_id"))
        except ValueError as exc:
            raise ApiError(400, "invalid_input", str(exc)) from None
        instance = await self._instance(request)
        async with self.lookup.instance_errors():
            with message_errors():
                if not wait:
                    await instance.send_update(name, *args, update_id=update_id)
                    body = {"update": name, "update_id": update_id}
                    return JsonResponse(body, status_code=202)
                reply = await instance.update(name, *args, update_id=update_id, timeout=timeout)
        return JsonResponse({"update": name, "update_id": update_id, "reply": reply})

    async def subscribe(self, request: Request) -> Response:
        """``GET .../subscribe?stream=NAME[&after=SEQ]``: the stream's items as Server-Sent
        Events (``Last-Event-ID`` wins over ``after``), until the instance has ended."""
        stream = request.query_params.get("stream")
        if stream is None:
            raise ApiError(400, "invalid_input", "query parameter 'stream' is required: the "
                           "name of the stream to read")  # fmt: skip
        raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        try:
            check_stream(stream)
            after = check_cursor(int(raw) if raw.isdigit() else raw)
        except ValueError as exc:
            raise ApiError(400, "invalid_input", str(exc)) from None
        instance = await self._instance(request)
        return StreamingResponse(
            self._events(request, instance, stream, after),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _events(
        self, request: Request, instance: Instance, stream: str, after: int
    ) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        with instance.watch_changes() as changes:
            while True:
                read = await instance.read_stream(stream, after=after, limit=_PAGE)
                for item in read.items:
                    after = item.seq
                    data = orjson.dumps(item.to_json())
                    yield b"id: %d\nevent: item\ndata: %b\n\n" % (item.seq, data)
                if read.items:
                    quiet_since = loop.time()
                    if len(read.items) == _PAGE:
                        continue
                if read.instance_status in FINISHED_STATUSES:
                    status = orjson.dumps({"status": read.instance_status})
                    yield b"event: end\ndata: " + status + b"\n\n"
                    return
                await changes.wait(self.interval)
                if await request.is_disconnected():
                    return
                if loop.time() - quiet_since >= self.keepalive:
                    quiet_since = loop.time()
                    yield b": keep-alive\n\n"
