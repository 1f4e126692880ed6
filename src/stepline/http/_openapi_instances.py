"""The workflows', instances' and workers' part of the OpenAPI document: their paths (their
schemas are in :mod:`.openapi`)."""

from __future__ import annotations

from typing import Any

from ..records import INSTANCE_STATUSES, WORKER_EXPIRE_BEATS
from ._openapi_activity import TRACEPARENT
from ._openapi_common import NAME_PATTERN
from ._openapi_common import json_content as _json_content
from ._openapi_common import ok as _ok
from ._openapi_common import path_param as _path_param
from ._openapi_common import ref as _ref
from ._openapi_common import responses as _responses
from ._openapi_operations import FILTER_PARAMS

_NAME = _path_param("name", "The workflow name.")
_ID = _path_param("id", "The instance id.")
_TYPE = _path_param("type", "The event type (what `wait_for_event(type=...)` waits for).")
_PAGING = [
    {
        "name": "status",
        "in": "query",
        "description": "Only instances in this status.",
        "schema": {"type": "string", "enum": list(INSTANCE_STATUSES)},
    },
    {
        "name": "limit",
        "in": "query",
        "description": "Page size (default 25).",
        "schema": {"type": "integer", "minimum": 1, "maximum": 100},
    },
    {
        "name": "cursor",
        "in": "query",
        "description": "The `cursor` of the previous page.",
        "schema": {"type": "string"},
    },
]


def instance_paths() -> dict[str, Any]:
    instances = "/api/workflows/{name}/instances"
    one = instances + "/{id}"
    json_body = {"required": True, "content": _json_content({})}
    return {
        "/api/workers": {
            "get": {
                "operationId": "listWorkers",
                "summary": "Workers registered in the database, live or not, oldest first.",
                "description": (
                    "A worker registers when it starts and writes a heartbeat every few "
                    "seconds; it deregisters when it stops gracefully. The row of a worker "
                    f"that died stays (`live` false) until it is {WORKER_EXPIRE_BEATS} heartbeat "
                    "intervals old."
                ),
                "responses": _responses(_ok(200, "The workers.", "WorkerList")),
            }
        },
        "/api/workflows": {
            "get": {
                "operationId": "listWorkflows",
                "summary": "Workflows known to the database, with instance counts by status.",
                "responses": _responses(_ok(200, "The workflows.", "WorkflowList")),
            }
        },
        "/api/workflows/{name}": {
            "get": {
                "operationId": "getWorkflow",
                "summary": "One workflow: definition, DAG graph if any, counts by status.",
                "parameters": [_NAME],
                "responses": _responses(_ok(200, "The workflow.", "Workflow"), 404),
            }
        },
        "/api/workflows/{name}/versions": {
            "get": {
                "operationId": "getWorkflowVersions",
                "summary": "A deploy: per version, instances by status, live workers, drained.",
                "parameters": [_NAME],
                "responses": _responses(_ok(200, "The versions.", "VersionList"), 404),
            }
        },
        "/api/instances": {
            "get": {
                "operationId": "listAllInstances",
                "summary": "Instances of every workflow (or of `workflow`), newest first.",
                "parameters": [
                    {
                        "name": "workflow",
                        "in": "query",
                        "description": "Only instances of this workflow.",
                        "schema": {"type": "string", "pattern": NAME_PATTERN},
                    },
                    *_PAGING,
                    *FILTER_PARAMS,
                ],
                "responses": _responses(_ok(200, "One page.", "InstancePage"), 404),
            }
        },
        instances: {
            "get": {
                "operationId": "listInstances",
                "summary": "Instances of a workflow, newest first, in pages.",
                "parameters": [_NAME, *_PAGING, *FILTER_PARAMS],
                "responses": _responses(_ok(200, "One page.", "InstancePage"), 404),
            },
            "post": {
                "operationId": "createInstance",
                "summary": "Create an instance (queued; durable when this answers).",
                "parameters": [_NAME, TRACEPARENT],
                "requestBody": {"content": _json_content(_ref("NewInstance"))},
                "responses": _responses(
                    {
                        **_ok(201, "Created.", "InstanceState"),
                        **_ok(
                            200, "Not created: the instance holding the dedup key.", "InstanceState"
                        ),
                    },
                    404,
                    409,
                    413,
                    422,
                ),
            },
        },
        instances + "/batch": {
            "post": {
                "operationId": "createBatch",
                "summary": "Create up to 100 instances at once; existing ids are skipped.",
                "parameters": [
                    _NAME,
                    TRACEPARENT,
                    {
                        "name": "version",
                        "in": "query",
                        "description": "The workflow version of every item that names none "
                        "(default: the newest); an unknown one is a 400 and nothing is created.",
                        "schema": {"type": "string"},
                    },
                ],
                "requestBody": {
                    "required": True,
                    "content": _json_content(
                        {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": 100,
                            "items": _ref("BatchItem"),
                        }
                    ),
                },
                "responses": _responses(_ok(201, "Created.", "Batch"), 404, 413, 422),
            }
        },
        one: {
            "get": {
                "operationId": "getInstance",
                "summary": "An instance with its steps and their attempts.",
                "parameters": [_NAME, _ID],
                "responses": _responses(_ok(200, "The instance.", "InstanceDetail"), 404),
            },
            "delete": {
                "operationId": "deleteInstance",
                "summary": "Delete a finished instance with its steps and events.",
                "description": (
                    "Complete, errored and terminated instances are deleted; an unfinished one "
                    "answers 409 unless `force=true` (the status is checked as it is deleted)."
                ),
                "parameters": [
                    _NAME,
                    _ID,
                    {
                        "name": "force",
                        "in": "query",
                        "description": "Also delete an unfinished instance.",
                        "schema": {"type": "string", "enum": ["true", "false"]},
                    },
                ],
                "responses": _responses(_ok(200, "Deleted.", "Deleted"), 404, 409),
            },
        },
        one + "/events": {
            "get": {
                "operationId": "listEvents",
                "summary": "Events sent to the instance, pending and consumed, in send order.",
                "parameters": [_NAME, _ID],
                "responses": _responses(_ok(200, "The events.", "EventList"), 404),
            }
        },
        one + "/status": {
            "patch": {
                "operationId": "changeStatus",
                "summary": "Pause, resume, terminate (optionally with rollback) or restart.",
                "parameters": [_NAME, _ID],
                "requestBody": {"required": True, "content": _json_content(_ref("StatusChange"))},
                "responses": _responses(
                    _ok(200, "The new status.", "InstanceState"), 404, 409, 413, 422
                ),
            }
        },
        one + "/events/{type}": {
            "post": {
                "operationId": "sendEvent",
                "summary": "Send an event; the body (any JSON, or empty for null) is the payload.",
                "parameters": [_NAME, _ID, _TYPE],
                "requestBody": {**json_body, "required": False},
                "responses": _responses(
                    _ok(202, "Stored; the instance is woken if it waits.", "EventAccepted"),
                    404,
                    409,
                    413,
                    422,
                ),
            }
        },
        one + "/stream": {
            "get": {
                "operationId": "streamInstance",
                "summary": "Server-Sent Events: the instance detail whenever it changes.",
                "description": (
                    "Each `instance` event carries the same JSON as getInstance. The stream "
                    "ends with an `end` event once the instance is complete, errored or "
                    "terminated."
                ),
                "parameters": [_NAME, _ID],
                "responses": _responses(
                    {
                        "200": {
                            "description": "An event stream.",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        }
                    },
                    404,
                ),
            }
        },
        "/api/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document.",
                "responses": _responses(
                    {
                        "200": {
                            "description": "The OpenAPI document.",
                            "content": _json_content({"type": "object"}),
                        }
                    }
                ),
            }
        },
    }
