"""The live stream of one instance: ``GET .../instances/{id}/stream``, Server-Sent Events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..client import Instance
from ..engine import Engine
from ..records import FINISHED_STATUSES
from ._lookup import Lookup
from .errors import ApiError, client_errors


class InstanceStream:
    """Streams an instance's detail each time it changes, looking every ``interval`` seconds
    at most (sooner when this process sees it change), with a comment line as keep-alive."""

    def __init__(self, engine: Engine, lookup: Lookup, interval: float) -> None:
        self.engine = engine
        self.lookup = lookup
        self.interval = interval
        self.keepalive = 15.0

    async def stream(self, request: Request) -> Response:
        """Server-Sent Events: the instance detail each time it changes, until it finishes."""
        params = request.path_params
        first = await self.lookup.detail(params["name"], params["id"])
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
                await changes.wait(self.interval)
                if await request.is_disconnected():
                    return
                try:
                    detail = await self.lookup.detail(workflow, instance_id)
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
