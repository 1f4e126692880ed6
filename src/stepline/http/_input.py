"""Reading and checking API requests: bodies within the size limits, JSON, query parameters,
and the shapes of new instances and status changes. Bad input is an :class:`ApiError`."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from .._json import dumps as json_dumps
from .._json import loads_exact
from ..client import STATUS_ACTIONS
from ..errors import InvalidPayloadError
from ..records import INSTANCE_STATUSES
from .errors import ApiError

DEFAULT_PAGE_SIZE = 25
MAX_PAGE_SIZE = 100
MAX_BATCH = 100
MISSING: Any = object()
"""What :meth:`RequestReader.json` returns for an empty body."""


class RequestReader:
    """Reads request bodies and checks values against the API's limits: ``max_body`` bytes
    of request body, ``max_payload`` bytes of encoded params or event payload."""

    def __init__(self, max_body: int, max_payload: int) -> None:
        self.max_body = max_body
        self.max_payload = max_payload

    async def body(self, request: Request) -> bytes:
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

    async def json(self, request: Request) -> Any:
        """The request body parsed as JSON; an empty body is :data:`MISSING`."""
        body = await self.body(request)
        if not body.strip():
            return MISSING
        try:
            return loads_exact(body, what="the request body")
        except orjson.JSONDecodeError as exc:
            raise ApiError(
                422, "invalid_json", f"the request body is not valid JSON: {exc}"
            ) from None
        except InvalidPayloadError as exc:
            raise ApiError(400, "invalid_input", str(exc)) from None

    def check_size(self, value: Any, what: str) -> None:
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

    def new_instance(self, item: Any, where: str, *, single: bool = True) -> dict[str, Any]:
        """A create's item: ``id``, ``params``, ``key``, ``priority``, ``tags``, ``retention``,
        ``version``, ``timeout``, ``on_conflict`` and ``debounce``, and for a single create
        ``dedup_key`` and ``on_duplicate`` too; absent keys are left out (the client's defaults
        apply). The client checks the values' ranges (durations included)."""
        if not isinstance(item, dict):
            raise ApiError(
                400, "invalid_input", f"{where} must be a JSON object like "
                '{"id": "optional-id", "params": {...}}',
            )  # fmt: skip
        allowed = _SINGLE_KEYS if single else _BATCH_KEYS
        unknown = sorted(set(item) - set(allowed))
        if unknown:
            keys = ", ".join(repr(key) for key in allowed)
            raise ApiError(
                400, "invalid_input", f"{where} has an unknown key {unknown[0]!r}; "
                f"the keys are {keys}",
            )  # fmt: skip
        for key in ("id", "key", "dedup_key", "on_duplicate", "version", "on_conflict"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise ApiError(400, "invalid_input", f"{where}: {key!r} must be a string or null")
        if item.get("retention") is not None and not isinstance(item["retention"], dict):
            raise ApiError(
                400,
                "invalid_input",
                f"{where}: 'retention' must be an object like "
                '{"complete": "7 days", "errored": "30 days"}, or null',
            )
        priority = item.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ApiError(400, "invalid_input", f"{where}: 'priority' must be an integer")
        self.check_size(item.get("params"), f"{where}: params")
        return {key: item[key] for key in allowed if item.get(key) is not None} | {
            "id": item.get("id"),
            "params": item.get("params"),
        }

    def new_instances(self, body: Any) -> list[dict[str, Any]]:
        """The items of a batch create."""
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
        items = [
            self.new_instance(item, f"item {i} of the batch", single=False)
            for i, item in enumerate(body)
        ]
        ids = [item["id"] for item in items if item["id"] is not None]
        if len(ids) != len(set(ids)):
            raise ApiError(400, "invalid_input", "the batch names the same instance id twice")
        return items


_BATCH_KEYS = (
    "id", "params", "key", "priority", "tags", "retention", "version", "timeout",
    "on_conflict", "debounce",
)  # fmt: skip
_SINGLE_KEYS = (*_BATCH_KEYS, "dedup_key", "on_duplicate")


def query_int(request: Request, key: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(key)
    if raw is None:
        return default
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ApiError(
            400, "invalid_input", f"query parameter {key!r} must be a whole number from "
            f"{low} to {high}, got {raw!r}",
        )  # fmt: skip
    return int(raw)


def query_status(request: Request) -> str | None:
    status = request.query_params.get("status")
    if status is not None and status not in INSTANCE_STATUSES:
        raise ApiError(
            400, "invalid_input", f"unknown status {status!r}; use one of "
            f"{', '.join(INSTANCE_STATUSES)}",
        )  # fmt: skip
    return status


def query_bool(request: Request, key: str) -> bool:
    raw = request.query_params.get(key)
    if raw is None or raw == "false":
        return False
    if raw == "true":
        return True
    raise ApiError(
        400, "invalid_input", f"query parameter {key!r} must be true or false, got {raw!r}"
    )


def status_change(body: Any) -> tuple[str, str | None, int, bool, str | None]:
    """The body of a status change: (action, step to restart from, count, rollback, version
    to restart under)."""
    if not isinstance(body, dict):
        raise ApiError(
            400, "invalid_input", 'the request body must be a JSON object like '
            '{"status": "pause"}',
        )  # fmt: skip
    unknown = sorted(set(body) - {"status", "from", "count", "rollback", "version"})
    if unknown:
        raise ApiError(
            400, "invalid_input", f"unknown key {unknown[0]!r}; the keys are 'status', "
            "'from', 'count' and 'version' (restart), 'rollback' (terminate)",
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
    if action != "restart" and ("from" in body or "count" in body or "version" in body):
        raise ApiError(400, "invalid_input", "'from', 'count' and 'version' only go with 'restart'")
    version = body.get("version")
    if version is not None and not isinstance(version, str):
        raise ApiError(400, "invalid_input", "'version' must be a string")
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
    return action, from_step, count, rollback, version
