"""The OpenAPI 3.1 document served at ``/api/openapi.json``.

Written by hand next to the handlers in :mod:`.api` and checked against their behaviour by a
schemathesis test (tests/engine/test_http_api.py), so it cannot silently drift.
"""

from __future__ import annotations

from typing import Any

from ..access import ROLES
from ..records import INSTANCE_STATUSES, WORKER_LIVE_BEATS
from ._openapi_activity import activity_paths, activity_schemas
from ._openapi_common import ERROR_OBJECT as _ERROR_OBJECT
from ._openapi_common import NUMBER_OR_NULL as _NUMBER_OR_NULL
from ._openapi_common import OBJECT_OR_NULL as _OBJECT_OR_NULL
from ._openapi_common import ok, responses
from ._openapi_common import ref as _ref
from ._openapi_create import create_schemas
from ._openapi_instances import instance_paths
from ._openapi_messages import messages_paths, messages_schemas
from ._openapi_operations import operations_paths, operations_schemas
from ._openapi_schedules import schedule_paths, schedule_schemas
from .roles import needed

_STATUS_ENUM: dict[str, Any] = {"type": "string", "enum": list(INSTANCE_STATUSES)}


def _schemas(max_payload: int) -> dict[str, Any]:
    status_enum = _STATUS_ENUM
    summary_props: dict[str, Any] = {
        "workflow": {"type": "string"},
        "id": {"type": "string"},
        "status": status_enum,
        "error": _ERROR_OBJECT,
        "trigger": {"type": "string"},
        "created_at": {"type": "number", "description": "Seconds since the epoch."},
        "updated_at": {"type": "number"},
        "started_at": _NUMBER_OR_NULL,
        "ended_at": _NUMBER_OR_NULL,
        "wake_at": {**_NUMBER_OR_NULL, "description": "When a waiting instance wakes up."},
        "tags": {"type": "object", "description": "Its tags, in a filtered list (`where`)."},
        "delete_at": {
            **_NUMBER_OR_NULL,
            "description": "When retention deletes this finished instance; null: kept.",
        },
        "schedule": {
            **_OBJECT_OR_NULL,
            "description": (
                "Instances a cron schedule created: `{name, cron, tick}` (tick: seconds since "
                "the epoch); else null."
            ),
        },
        "key": {
            "type": ["string", "null"],
            "description": "The flow control key given at creation (`key_concurrency`).",
        },
        "priority": {
            "type": "integer",
            "description": "Lower runs first among runnable instances (default 0).",
        },
        "dedup_key": {
            "type": ["string", "null"],
            "description": "No other unfinished instance of the workflow has this key.",
        },
        "deadline_at": {
            **_NUMBER_OR_NULL,
            "description": "When it errors with `WorkflowTimeoutError` if still unfinished "
            "(docs/operations.md); null: none, or carried out.",
        },
        "retry": {
            "type": ["object", "null"],
            "required": ["step", "attempt", "error", "next_attempt_at"],
            "properties": {
                "step": {"type": "string", "description": "The step, `name-count`."},
                "attempt": {
                    "type": "integer",
                    "description": "The number of its attempt that failed last (1: the first).",
                },
                "error": _ERROR_OBJECT,
                "next_attempt_at": {
                    **_NUMBER_OR_NULL,
                    "description": (
                        "When the next attempt is due; null while it waits for a slot of a "
                        "named limit."
                    ),
                },
            },
            "description": (
                "While the instance waits to try a failed step again: that step, its attempt "
                "that failed last, the error and when the next attempt is due; else null."
            ),
        },
        "warning": {
            "type": ["string", "null"],
            "description": (
                "`no live worker serves 'NAME'` when the instance is due to run (queued, or "
                "its wake-up time or its dead worker's lease has come) and no live worker runs "
                "its workflow; else null."
            ),
        },
    }
    return {
        "Error": {
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                }
            },
        },
        "Workflow": {
            "type": "object",
            "required": ["name", "class_name", "counts", "total", "definition", "graph"],
            "properties": {
                "name": {"type": "string"},
                "class_name": {"type": "string"},
                "created_at": {"type": "number"},
                "updated_at": {"type": "number"},
                "definition": {
                    **_OBJECT_OR_NULL,
                    "description": "What the workflow's describe() returns.",
                },
                "limits": {
                    **_OBJECT_OR_NULL,
                    "description": "Its flow control: concurrency, worker_concurrency, rate "
                    "([count, seconds]), key_concurrency, limits (named); null without any.",
                },
                "retention": {
                    **_OBJECT_OR_NULL,
                    "description": "How long its finished instances are kept, seconds by "
                    "outcome (complete, errored, terminated); null without one.",
                },
                "counts": {
                    "type": "object",
                    "description": "Instances by status (every status present).",
                    "additionalProperties": {"type": "integer", "minimum": 0},
                },
                "total": {"type": "integer", "minimum": 0},
                "graph": {
                    "type": ["object", "null"],
                    "description": "DAG workflows: nodes, edges and levels.",
                    "properties": {
                        "kind": {"type": ["string", "null"]},
                        "nodes": {},
                        "edges": {},
                        "levels": {},
                    },
                },
            },
        },
        "Worker": {
            "type": "object",
            "required": [
                "id",
                "host",
                "pid",
                "started_at",
                "last_seen",
                "heartbeat",
                "workflows",
                "concurrency",
                "running",
                "live",
            ],
            "properties": {
                "id": {"type": "string"},
                "host": {"type": "string"},
                "pid": {"type": "integer"},
                "started_at": {"type": "number", "description": "Seconds since the epoch."},
                "last_seen": {"type": "number", "description": "Its last heartbeat."},
                "heartbeat": {"type": "number", "description": "Seconds between heartbeats."},
                "workflows": {"type": "array", "items": {"type": "string"}},
                "concurrency": {"type": "integer", "minimum": 1},
                "running": {"type": "integer", "minimum": 0},
                "live": {
                    "type": "boolean",
                    "description": (
                        f"Its last heartbeat is at most {WORKER_LIVE_BEATS} of its heartbeat "
                        "intervals old."
                    ),
                },
            },
        },
        "WorkerList": {
            "type": "object",
            "required": ["workers"],
            "properties": {"workers": {"type": "array", "items": _ref("Worker")}},
        },
        "WorkflowList": {
            "type": "object",
            "required": ["workflows"],
            "properties": {"workflows": {"type": "array", "items": _ref("Workflow")}},
        },
        "InstanceSummary": {
            "type": "object",
            "required": [p for p in summary_props if p != "tags"],
            "properties": summary_props,
        },
        "Instance": {
            "type": "object",
            "required": [
                *(p for p in summary_props if p != "tags"),
                *("params", "output", "rollback", "parent", "held"),
            ],
            "properties": {
                **summary_props,
                "held": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": (
                        "The full limits holding the instance back while it is due to "
                        "run, e.g. `concurrency 10/10`, `rate limit: next start in 12 s`, "
                        "`key customer-42 busy (1/1)`; empty when none is."
                    ),
                },
                "params": {"description": "The params the instance was created with."},
                "output": {"description": "What run() returned (complete instances)."},
                "rollback": _OBJECT_OR_NULL,
                "parent": _OBJECT_OR_NULL,
            },
        },
        "InstancePage": {
            "type": "object",
            "required": ["instances", "cursor"],
            "properties": {
                "instances": {"type": "array", "items": _ref("InstanceSummary")},
                "cursor": {
                    "type": ["string", "null"],
                    "description": "Pass back as `cursor` for the next page; null on the last.",
                },
            },
        },
        "Attempt": {
            "type": "object",
            "required": ["number", "started_at", "ended_at", "state", "error"],
            "properties": {
                "number": {"type": "integer", "minimum": 1},
                "started_at": {"type": "number"},
                "ended_at": _NUMBER_OR_NULL,
                "state": {
                    "type": "string",
                    "enum": ["running", "failed", "success", "interrupted"],
                },
                "error": _ERROR_OBJECT,
            },
        },
        "Step": {
            "type": "object",
            "required": ["name", "step", "count", "type", "status", "attempts"],
            "properties": {
                "name": {"type": "string", "description": "`step-count`, e.g. `charge-1`."},
                "step": {"type": "string"},
                "count": {"type": "integer", "minimum": 1},
                "seq": {"type": "integer"},
                "type": {
                    "type": "string",
                    "enum": [
                        "do",
                        "sleep",
                        "wait_for_event",
                        "rollback",
                        "start_workflow",
                        "wait_for_workflow",
                        "update",
                        "publish",
                    ],
                },
                "status": {
                    "type": "string",
                    "enum": ["running", "waiting", "complete", "errored"],
                },
                "output": {},
                "error": _ERROR_OBJECT,
                "wake_at": _NUMBER_OR_NULL,
                "started_at": _NUMBER_OR_NULL,
                "ended_at": _NUMBER_OR_NULL,
                "info": _OBJECT_OR_NULL,
                "attempts": {"type": "array", "items": _ref("Attempt")},
            },
        },
        "InstanceDetail": {
            "type": "object",
            "required": ["workflow", "steps", "graph"],
            "properties": {
                "workflow": _ref("Instance"),
                "steps": {"type": "array", "items": _ref("Step")},
                "streams": {
                    "type": "array",
                    "description": "The latest item of each stream the instance published to.",
                    "items": {
                        "type": "object",
                        "required": ["stream", "seq", "value", "created_at"],
                        "properties": {
                            "stream": {"type": "string"},
                            "seq": {"type": "integer", "minimum": 1},
                            "value": {},
                            "created_at": {"type": "number"},
                        },
                    },
                },
                "graph": {
                    "type": ["object", "null"],
                    "description": (
                        "DAG and pipeline workflows: nodes, edges, levels, and `states`, the "
                        "state of each node (pending, running, retrying, waiting, complete, "
                        "errored, rolling back, rolled back, rollback failed)."
                    ),
                    "properties": {
                        "states": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        },
                    },
                },
            },
        },
        "EventAccepted": {
            "type": "object",
            "required": ["id", "type", "status"],
            "properties": {
                "id": {"type": "string"},
                "type": {"type": "string"},
                "status": status_enum,
            },
        },
        "Deleted": {
            "type": "object",
            "required": ["id", "deleted"],
            "properties": {"id": {"type": "string"}, "deleted": {"type": "boolean"}},
        },
        "EventList": {
            "type": "object",
            "required": ["events"],
            "properties": {
                "events": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["type", "payload", "sent_at", "consumed_by"],
                        "properties": {
                            "type": {"type": "string"},
                            "payload": {},
                            "sent_at": {
                                "type": "number",
                                "description": "Seconds since the epoch.",
                            },
                            "consumed_by": {
                                "type": ["string", "null"],
                                "description": (
                                    "The wait_for_event step that consumed it (`name-count`); "
                                    "null while it is pending."
                                ),
                            },
                        },
                    },
                }
            },
        },
    }


_WHOAMI: dict[str, Any] = {
    "type": "object",
    "required": ["name", "role", "roles", "secured"],
    "properties": {
        "name": {"type": ["string", "null"], "description": "The token's name; null if open."},
        "role": {"type": "string", "enum": list(ROLES)},
        "roles": {
            "type": "array",
            "items": {"type": "string", "enum": list(ROLES)},
            "description": "Every role the token holds (its own and those below it).",
        },
        "secured": {"type": "boolean", "description": "Whether the API needs a token."},
    },
}


def _whoami_path() -> dict[str, Any]:
    return {
        "/api/whoami": {
            "get": {
                "operationId": "whoami",
                "summary": "The caller's token name and role.",
                "responses": responses(ok(200, "The caller.", "Whoami")),
            }
        }
    }


def _with_roles(paths: dict[str, Any]) -> dict[str, Any]:
    """Each operation with the role it needs (``x-stepline-role``), from the routes' table."""
    for path, operations in paths.items():
        for method, operation in operations.items():
            operation["x-stepline-role"] = needed("api", path.removeprefix("/api"), method.upper())
    return paths


def openapi_document(max_body: int, max_payload: int, *, secured: bool) -> dict[str, Any]:
    """The document; ``secured`` adds the bearer scheme (set when a token is configured)."""
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "stepline",
            "version": "1",
            "description": (
                "Durable workflows over HTTP. Errors are JSON "
                '`{"error": {"code", "message"}}`. Request bodies are limited to '
                f"{max_body:,} bytes; params and event payloads to {max_payload:,} bytes."
            ),
        },
        "paths": _with_roles(
            {
                **instance_paths(),
                **schedule_paths(),
                **activity_paths(),
                **messages_paths(),
                **operations_paths(),
                **_whoami_path(),
            }
        ),
        "components": {
            "schemas": {
                **_schemas(max_payload),
                **create_schemas(max_payload, status_enum=_STATUS_ENUM),
                **schedule_schemas(),
                **operations_schemas(),
                **activity_schemas(),
                **messages_schemas(),
                "Whoami": _WHOAMI,
            }
        },
    }
    if secured:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
