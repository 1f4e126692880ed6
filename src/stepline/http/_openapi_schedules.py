"""The cron schedules' part of the OpenAPI document: their schemas and paths."""

from __future__ import annotations

from typing import Any

from ..schedule import CATCH_UPS, MAX_TICKS, NAME_MAX, OVERLAPS
from ._openapi_common import (
    NAME_PATTERN,
    NUMBER_OR_NULL,
    json_content,
    ok,
    path_param,
    ref,
    responses,
)

_TIME: dict[str, Any] = {
    "type": ["string", "number"],
    "description": (
        "An ISO 8601 time (`2024-01-31T09:00Z`; UTC without an offset) or seconds since the "
        "epoch, from 1970 to 9999."
    ),
}
_SCHEDULE = path_param("name", "The schedule name.")
_NO_BODY: dict[str, Any] = {
    "required": False,
    "content": json_content({"type": "object", "additionalProperties": False}),
}


def schedule_schemas() -> dict[str, Any]:
    properties: dict[str, Any] = {
        "name": {"type": "string"},
        "source": {
            "type": "string",
            "enum": ["code", "api"],
            "description": "`code`: declared by a workflow, read-only here; `api`: made at run "
            "time, changed and deleted through the API.",
        },
        "workflow": {"type": "string"},
        "cron": {"type": "string", "description": "Five fields, as cron reads them."},
        "timezone": {"type": "string", "description": "The IANA zone ticks are computed in."},
        "params": {"description": "The params of every instance it creates."},
        "catch_up": {"type": "string", "enum": list(CATCH_UPS)},
        "catch_up_limit": {"type": "integer", "minimum": 1},
        "overlap": {"type": "string", "enum": list(OVERLAPS)},
        "paused": {"type": "boolean"},
        "last_tick": {**NUMBER_OR_NULL, "description": "The latest tick handled."},
        "last_instance": {
            "type": ["string", "null"],
            "description": "The id of the instance it last created.",
        },
        "buffered_tick": {
            **NUMBER_OR_NULL,
            "description": "A tick held back by overlap `buffer_one`.",
        },
        "created_at": {"type": "number", "description": "Seconds since the epoch."},
        "updated_at": {"type": "number"},
        "next_run": {**NUMBER_OR_NULL, "description": "Its next tick; null while paused."},
        "last_run": {**NUMBER_OR_NULL, "description": "Its latest tick handled."},
    }
    created_props: dict[str, Any] = {"id": {"type": "string"}, "status": {"type": "string"}}
    created = {"type": "object", "required": ["id", "status"], "properties": created_props}
    definition: dict[str, Any] = {
        "workflow": {"type": "string", "pattern": NAME_PATTERN},
        "cron": {
            "type": "string",
            "description": "Five fields (minute hour day-of-month month day-of-week).",
        },
        "timezone": {"type": "string", "description": "An IANA zone (default `UTC`)."},
        "params": {"description": "The params of every instance it creates (default null)."},
        "catch_up": {"type": "string", "enum": list(CATCH_UPS)},
        "catch_up_limit": {"type": "integer", "minimum": 1, "maximum": MAX_TICKS},
        "overlap": {"type": "string", "enum": list(OVERLAPS)},
    }
    return {
        "Schedule": {"type": "object", "required": list(properties), "properties": properties},
        "NewSchedule": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "workflow", "cron"],
            "properties": {"name": {"type": "string", "maxLength": NAME_MAX}, **definition},
        },
        "ScheduleChange": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "properties": definition,
        },
        "ScheduleList": {
            "type": "object",
            "required": ["schedules"],
            "properties": {"schedules": {"type": "array", "items": ref("Schedule")}},
        },
        "ScheduleTrigger": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "at": {
                    **_TIME,
                    "type": ["string", "number", "null"],
                    "description": "The tick (truncated to its minute); default now. "
                    + _TIME["description"],
                }
            },
        },
        "ScheduleBackfill": {
            "type": "object",
            "additionalProperties": False,
            "required": ["from", "to"],
            "properties": {"from": _TIME, "to": _TIME},
        },
        "TickInstance": {
            "type": "object",
            "required": ["schedule", "workflow", "id", "status"],
            "properties": {
                "schedule": {"type": "string"},
                "workflow": {"type": "string"},
                **created_props,
            },
        },
        "Backfilled": {
            "type": "object",
            "required": ["schedule", "count", "created", "existing", "instances"],
            "properties": {
                "schedule": {"type": "string"},
                "count": {"type": "integer", "minimum": 0, "description": "Ticks in the range."},
                "created": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Instances this request created.",
                },
                "existing": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Instances that existed already (left as they were).",
                },
                "instances": {"type": "array", "items": created},
            },
        },
    }


def schedule_paths() -> dict[str, Any]:
    one = "/api/schedules/{name}"
    return {
        "/api/schedules": {
            "get": {
                "operationId": "listSchedules",
                "summary": "Stored cron schedules (of `workflow`), sorted by name.",
                "parameters": [
                    {
                        "name": "workflow",
                        "in": "query",
                        "description": "Only the schedules of this workflow.",
                        "schema": {"type": "string", "pattern": NAME_PATTERN},
                    }
                ],
                "responses": responses(ok(200, "The schedules.", "ScheduleList"), 404),
            },
            "post": {
                "operationId": "createSchedule",
                "summary": "Create a schedule at run time; running schedulers fire it from now on.",
                "requestBody": {"required": True, "content": json_content(ref("NewSchedule"))},
                "responses": responses(ok(201, "Created.", "Schedule"), 409, 413, 422),
            },
        },
        one: {
            "get": {
                "operationId": "getSchedule",
                "summary": "One schedule with its last and next run.",
                "parameters": [_SCHEDULE],
                "responses": responses(ok(200, "The schedule.", "Schedule"), 404),
            },
            "patch": {
                "operationId": "updateSchedule",
                "summary": "Change fields of a run-time schedule; its state (paused, last tick) "
                "stays. Schedules declared in code answer 409.",
                "parameters": [_SCHEDULE],
                "requestBody": {"required": True, "content": json_content(ref("ScheduleChange"))},
                "responses": responses(ok(200, "Changed.", "Schedule"), 404, 409, 413, 422),
            },
            "delete": {
                "operationId": "deleteSchedule",
                "summary": "Delete a run-time schedule (its instances stay). Schedules declared "
                "in code answer 409.",
                "parameters": [_SCHEDULE],
                "requestBody": _NO_BODY,
                "responses": responses(
                    ok(200, "Deleted, as it was.", "Schedule"), 404, 409, 413, 422
                ),
            },
        },
        one + "/pause": {
            "post": {
                "operationId": "pauseSchedule",
                "summary": "Stop firing its ticks until it is resumed.",
                "parameters": [_SCHEDULE],
                "requestBody": _NO_BODY,
                "responses": responses(ok(200, "Paused.", "Schedule"), 404, 413, 422),
            }
        },
        one + "/resume": {
            "post": {
                "operationId": "resumeSchedule",
                "summary": "Fire its ticks again from now on (those due while paused are skipped).",
                "parameters": [_SCHEDULE],
                "requestBody": _NO_BODY,
                "responses": responses(ok(200, "Active.", "Schedule"), 404, 413, 422),
            }
        },
        one + "/trigger": {
            "post": {
                "operationId": "triggerSchedule",
                "summary": "Create the instance of one tick (`at`, default now), as the "
                "scheduler would; an existing one is returned unchanged.",
                "parameters": [_SCHEDULE],
                "requestBody": {"required": False, "content": json_content(ref("ScheduleTrigger"))},
                "responses": responses(
                    ok(200, "The tick's instance.", "TickInstance"), 404, 413, 422
                ),
            }
        },
        one + "/backfill": {
            "post": {
                "operationId": "backfillSchedule",
                "summary": "Create the instances of every tick from `from` to `to` (included), "
                f"oldest first; existing ones are kept. At most {MAX_TICKS:,} ticks.",
                "parameters": [_SCHEDULE],
                "requestBody": {"required": True, "content": json_content(ref("ScheduleBackfill"))},
                "responses": responses(
                    ok(200, "The ticks' instances.", "Backfilled"), 404, 413, 422
                ),
            }
        },
    }
