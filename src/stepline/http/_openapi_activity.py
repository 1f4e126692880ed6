"""The OpenAPI parts of observability: ``GET /api/activity`` (the dashboard's chart) and the
``traceparent`` header that creates take (docs/observability.md)."""

from __future__ import annotations

from typing import Any

from ._openapi_common import NUMBER_OR_NULL, ok, responses
from ._openapi_common import ref as _ref

TRACEPARENT: dict[str, Any] = {
    "name": "traceparent",
    "in": "header",
    "required": False,
    "description": (
        "A W3C trace context: the instances continue this trace (an invalid one is ignored)."
    ),
    "schema": {"type": "string"},
}

_COUNTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}


def activity_paths() -> dict[str, Any]:
    return {
        "/api/activity": {
            "get": {
                "operationId": "getActivity",
                "summary": "Instances ended per minute over the last hour; backlog, held now.",
                "description": (
                    "Read from the database with bounded reads and kept a few seconds: each "
                    "minute counts at most `bucket_cap` ended instances, each count of the "
                    "fleet at most 100,000."
                ),
                "responses": responses(ok(200, "The activity.", "Activity")),
            }
        }
    }


def activity_schemas() -> dict[str, Any]:
    return {
        "Activity": {
            "type": "object",
            "required": [
                "now",
                "since",
                "bucket",
                "bucket_cap",
                "ended",
                "backlog",
                "held",
                "workers_live",
                "workflows",
            ],
            "properties": {
                "now": {"type": "number", "description": "Seconds since the epoch."},
                "since": {"type": "number", "description": "The first minute's start."},
                "bucket": {"type": "number", "description": "Seconds per entry of `ended`."},
                "bucket_cap": {"type": "integer"},
                "ended": {"type": "array", "items": _ref("EndedBucket")},
                "backlog": {"type": "integer", "minimum": 0},
                "held": {"type": "integer", "minimum": 0},
                "workers_live": {"type": "integer", "minimum": 0},
                "workflows": {"type": "array", "items": _ref("WorkflowActivity")},
            },
        },
        "EndedBucket": {
            "type": "object",
            "required": ["start", "complete", "errored", "terminated"],
            "properties": {
                "start": {"type": "number"},
                "complete": {"type": "integer", "minimum": 0},
                "errored": {"type": "integer", "minimum": 0},
                "terminated": {"type": "integer", "minimum": 0},
            },
        },
        "WorkflowActivity": {
            "type": "object",
            "required": ["name", "statuses", "backlog", "oldest_due", "held"],
            "properties": {
                "name": {"type": "string"},
                "statuses": {**_COUNTS, "description": "Unfinished instances by status."},
                "backlog": {"type": "integer", "minimum": 0},
                "oldest_due": {
                    **NUMBER_OR_NULL,
                    "description": "When the oldest instance due to run became due.",
                },
                "held": {**_COUNTS, "description": "Due instances held, by the full limit."},
            },
        },
    }
