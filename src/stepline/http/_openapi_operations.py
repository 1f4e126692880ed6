"""The operations' part of the OpenAPI document: the filter parameters of the lists, tags on
creates, the instance count, and bulk jobs."""

from __future__ import annotations

from typing import Any

from ..operations.language.tags import MAX_KEY, MAX_TAGS, MAX_VALUE
from ..store.operations import BULK_ACTIONS
from ._openapi_common import NUMBER_OR_NULL, json_content, ok, ref, responses

_TIME_PARAM: dict[str, Any] = {
    "type": "string",
    "description": "An ISO 8601 time (`2026-12-01T09:00Z`; UTC without an offset) or seconds "
    "since the epoch.",
}

FILTER_PARAMS: list[dict[str, Any]] = [
    {
        "name": "where",
        "in": "query",
        "description": (
            "A filter (docs/operations.md), e.g. `customer = 'c-42' and status = 'errored'`. "
            "A bad one answers 400 naming the column of the mistake."
        ),
        "schema": {"type": "string"},
    },
    *(
        {
            "name": name,
            "in": "query",
            "description": f"Only instances {text}.",
            "schema": _TIME_PARAM,
        }
        for name, text in (
            ("created_after", "created at or after this time"),
            ("created_before", "created before this time"),
            ("ended_after", "ended at or after this time"),
            ("ended_before", "ended before this time"),
        )
    ),
]

TAGS_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "maxProperties": MAX_TAGS,
    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_-]*$", "maxLength": MAX_KEY},
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "maxLength": MAX_VALUE, "pattern": "^[^\\x00]*$"},
            {"type": "number", "minimum": -(2**53) + 1, "maximum": 2**53 - 1},
            {"type": "boolean"},
        ]
    },
    "description": f"Tags to find the instance by: at most {MAX_TAGS} keys, each a text (up to "
    f"{MAX_VALUE} characters), a number or a boolean.",
}


def operations_schemas() -> dict[str, Any]:
    job: dict[str, Any] = {
        "id": {"type": "string"},
        "action": {"type": "string", "enum": list(BULK_ACTIONS)},
        "filter": {"type": "string"},
        "from_step": {"type": ["string", "null"]},
        "status": {"type": "string", "enum": ["running", "complete", "cancelled"]},
        "total": {"type": "integer", "description": "Matched when the job started."},
        "done": {"type": "integer"},
        "skipped": {"type": "integer", "description": "Reached, but the action did not apply."},
        "last_skip": {"type": ["string", "null"]},
        "created_at": {"type": "number"},
        "updated_at": {"type": "number"},
        "ended_at": NUMBER_OR_NULL,
        "started_by": {
            "type": ["string", "null"],
            "description": "Who started it: the API token's name (null when the API is open), "
            "or what the Python caller or the CLI said.",
        },
    }
    return {
        "BulkJob": {"type": "object", "required": list(job), "properties": job},
        "BulkJobList": {
            "type": "object",
            "required": ["jobs"],
            "properties": {"jobs": {"type": "array", "items": ref("BulkJob")}},
        },
        "NewBulkJob": {
            "type": "object",
            "required": ["action"],
            "additionalProperties": False,
            "properties": {
                "action": {"type": "string", "enum": list(BULK_ACTIONS)},
                "where": {"type": ["string", "null"]},
                "workflow": {"type": ["string", "null"]},
                "from_step": {"type": ["string", "null"]},
                "dry_run": {"type": "boolean", "default": False},
            },
        },
        "BulkDryRun": {
            "type": "object",
            "required": ["action", "filter", "count", "first"],
            "properties": {
                "action": {"type": "string"},
                "filter": {"type": "string"},
                "count": {"type": "integer"},
                "first": {"type": "array", "items": {"type": "object"}},
            },
        },
        "InstanceCount": {
            "type": "object",
            "required": ["count"],
            "properties": {"count": {"type": "integer"}},
        },
    }


def operations_paths() -> dict[str, Any]:
    job_id = {
        "name": "id",
        "in": "path",
        "required": True,
        "description": "The bulk job id.",
        "schema": {"type": "string"},
    }
    started = ok(201, "The job, started.", "BulkJob")
    dry = ok(200, "A dry run: how many match, and the first.", "BulkDryRun")
    return {
        "/api/instances/count": {
            "get": {
                "operationId": "countInstances",
                "summary": "How many instances match a filter (and `workflow`).",
                "parameters": [
                    FILTER_PARAMS[0],
                    {"name": "workflow", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": responses(ok(200, "The count.", "InstanceCount")),
            }
        },
        "/api/bulk": {
            "get": {
                "operationId": "listBulkJobs",
                "summary": "Bulk jobs, newest first.",
                "parameters": [
                    {
                        "name": "status",
                        "in": "query",
                        "schema": {"type": "string", "enum": ["running", "complete", "cancelled"]},
                    },
                    {
                        "name": "limit",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                    },
                ],
                "responses": responses(ok(200, "The jobs.", "BulkJobList")),
            },
            "post": {
                "operationId": "startBulkJob",
                "summary": "Act on every instance a filter matches now, as a durable job.",
                "description": (
                    "The workers act on the instances in batches, each exactly once, resuming "
                    "after a crash. `dry_run` counts them and shows the first instead. "
                    "`delete` acts on finished instances only."
                ),
                "requestBody": {"required": True, "content": json_content(ref("NewBulkJob"))},
                "responses": responses({**started, **dry}, 422),
            },
        },
        "/api/bulk/{id}": {
            "get": {
                "operationId": "getBulkJob",
                "summary": "A bulk job's status and progress.",
                "parameters": [job_id],
                "responses": responses(ok(200, "The job.", "BulkJob"), 404),
            }
        },
        "/api/bulk/{id}/cancel": {
            "post": {
                "operationId": "cancelBulkJob",
                "summary": "Stop a running bulk job (what was done stays done).",
                "parameters": [job_id],
                "responses": responses(ok(200, "The job.", "BulkJob"), 404),
            }
        },
    }
