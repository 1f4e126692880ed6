"""Reading Cloudflare-shaped requests: pages, new instances and status changes, checked into
what the client layer takes. Bad input is an :class:`~stepline.http.ApiError` (400)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from ...client import STATUS_ACTIONS
from ...retention import from_cloudflare
from .._input import MAX_BATCH, RequestReader
from ..errors import ApiError

MAX_PER_PAGE = 100
_CREATE_KEYS = ("instance_id", "params", "instance_retention", "location_hint")
_STATUS_KEYS = ("status", "rollback", "from")
_FROM_KEYS = ("name", "count", "type")
_FROM_TYPES = ("do", "sleep", "waitForEvent")


def bad(message: str) -> ApiError:
    return ApiError(400, "invalid_input", message)


def query_number(request: Request, key: str, default: int, high: int) -> int:
    """A whole-number query parameter from 1 to ``high``; SDKs may send ``2.0`` for 2."""
    raw = request.query_params.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if not value.is_integer() or not 1 <= value <= high:
        raise bad(f"query parameter {key!r} must be a whole number from 1 to {high}, got {raw!r}")
    return int(value)


def page_of(request: Request, default_per_page: int) -> tuple[int, int]:
    """``(page, per_page)`` of a page-numbered list."""
    return (
        query_number(request, "page", 1, 1 << 31),
        query_number(request, "per_page", default_per_page, MAX_PER_PAGE),
    )


def new_instance(reader: RequestReader, item: Any, where: str) -> dict[str, Any]:
    """A create's ``{"instance_id"?, "params"?, ...}`` as the client's ``{"id", "params",
    "retention"}``: ``instance_retention`` (``success_retention``, ``error_retention``) is the
    instance's retention; ``location_hint`` is accepted and has no effect (it runs where its
    workers are)."""
    if not isinstance(item, dict):
        raise bad(f'{where} must be a JSON object like {{"instance_id"?: ..., "params"?: ...}}')
    unknown = sorted(set(item) - set(_CREATE_KEYS))
    if unknown:
        raise bad(
            f"{where} has an unknown key {unknown[0]!r}; the keys are {', '.join(_CREATE_KEYS)}"
        )
    instance_id = item.get("instance_id")
    if instance_id is not None and not isinstance(instance_id, str):
        raise bad(f"{where}: 'instance_id' must be a string")
    try:
        retention = from_cloudflare(
            item.get("instance_retention"),
            "success_retention",
            "error_retention",
            where=f"{where}: 'instance_retention'",
        )
    except ValueError as exc:
        raise bad(str(exc)) from None
    hint = item.get("location_hint")
    if hint is not None and not isinstance(hint, str):
        raise bad(f"{where}: 'location_hint' must be a string")
    reader.check_size(item.get("params"), f"{where}: params")
    return {"id": instance_id, "params": item.get("params"), "retention": retention}


def new_instances(reader: RequestReader, body: Any) -> list[dict[str, Any]]:
    """The items of a batch create: a JSON array of 1 to 100 creates."""
    if not isinstance(body, list) or not body:
        raise bad('the request body must be a non-empty JSON array of {"instance_id"?, "params"?}')
    if len(body) > MAX_BATCH:
        raise bad(f"a batch holds at most {MAX_BATCH} instances, got {len(body)}; split it")
    items = [new_instance(reader, item, f"item {i} of the batch") for i, item in enumerate(body)]
    ids = [item["id"] for item in items if item["id"] is not None]
    if len(ids) != len(set(ids)):
        raise bad("the batch names the same instance_id twice")
    return items


def status_change(body: Any) -> dict[str, Any]:
    """``{"status", "rollback"?, "from"?: {"name", "count"?, "type"?}}`` as the keyword
    arguments of :meth:`stepline.Instance.control`. A step is named by its name and count in
    stepline; ``type`` is checked and otherwise unused."""
    if not isinstance(body, dict):
        raise bad('the request body must be a JSON object like {"status": "pause"}')
    unknown = sorted(set(body) - set(_STATUS_KEYS))
    if unknown:
        raise bad(f"unknown key {unknown[0]!r}; the keys are {', '.join(_STATUS_KEYS)}")
    action = body.get("status")
    if action not in STATUS_ACTIONS:
        raise bad(f"'status' must be one of {', '.join(STATUS_ACTIONS)}, got {action!r}")
    change: dict[str, Any] = {"action": action}
    if "rollback" in body:
        if action != "terminate" or not isinstance(body["rollback"], bool):
            raise bad("'rollback' is true or false, and goes with 'terminate' only")
        change["rollback"] = body["rollback"]
    start = body.get("from")
    if start is not None:
        if action != "restart" or not isinstance(start, dict):
            raise bad(
                '\'from\' is an object {"name", "count"?, "type"?} and goes with \'restart\' only'
            )
        unknown = sorted(set(start) - set(_FROM_KEYS))
        if unknown:
            raise bad(f"'from' has an unknown key {unknown[0]!r}; the keys are name, count, type")
        count = start.get("count", 1)
        if not isinstance(start.get("name"), str):
            raise bad("'from.name' must be the step's name (a string)")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1 << 31:
            raise bad("'from.count' must be a whole number from 1")
        if start.get("type", "do") not in _FROM_TYPES:
            raise bad(f"'from.type' must be one of {', '.join(_FROM_TYPES)}")
        change |= {"from_step": start["name"], "count": count}
    return change
