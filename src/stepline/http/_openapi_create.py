"""The OpenAPI schemas of creating and changing instances: one (with flow control,
deduplication and a version), a batch, what a create answers, a status change, and the
versions of a workflow (``/api/workflows/{name}/versions``)."""

from __future__ import annotations

from typing import Any

from ._openapi_common import NAME_PATTERN
from ._openapi_common import ref as _ref
from ._openapi_operations import TAGS_SCHEMA

_VERSION: dict[str, Any] = {
    "type": "string",
    "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,49}$",
}
_COUNTS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {"type": "integer"},
    "description": "Instances by status.",
}
_DURATION: dict[str, Any] = {
    "oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}],
}
"""A duration: seconds, or text such as ``"5 minutes"``."""


def create_schemas(max_payload: int, *, status_enum: dict[str, Any]) -> dict[str, Any]:
    flow_key: dict[str, Any] = {
        "type": ["string", "null"],
        "minLength": 1,
        "maxLength": 200,
        "pattern": "^[^\\x00-\\x1f\\x7f]*$",
    }
    batch_item: dict[str, Any] = {
        "id": {
            "type": ["string", "null"],
            "pattern": NAME_PATTERN,
            "description": "Instance id; a random UUID when absent.",
        },
        "params": {
            "description": f"Any JSON value, at most {max_payload:,} bytes encoded.",
        },
        "key": {**flow_key, "description": "Flow control key (the workflow's key_concurrency)."},
        "priority": {
            "type": "integer",
            "minimum": -(2**31),
            "maximum": 2**31 - 1,
            "default": 0,
            "description": "Lower runs first among runnable instances.",
        },
        "tags": TAGS_SCHEMA,
        "retention": {
            "type": ["object", "null"],
            "additionalProperties": {"type": ["string", "number"]},
            "description": "How long this instance is kept once it ends, by outcome "
            '(`{"complete": "7 days", "errored": "30 days", "terminated": "1 day"}`), '
            "over its workflow's retention.",
        },
        "version": {**_VERSION, "description": "The workflow version (default: newest)."},
        "timeout": {
            **_DURATION,
            "description": "The instance's deadline from now (default: the "
            "workflow's `timeout`): past it, it errors with `WorkflowTimeoutError`.",
        },
        "on_conflict": {
            "enum": ["debounce", "replace_queued"],
            "description": "With `key`: `debounce` (and `debounce`) makes a burst of "
            "creates one instance with the last params; `replace_queued` terminates the "
            "key's instances that have not started. The answer names the instance.",
        },
        "debounce": {**_DURATION, "description": "The quiet period of `debounce`."},
    }
    return {
        "NewInstance": {
            "type": "object",
            "additionalProperties": False,
            "description": (
                "A duplicate `dedup_key` with `on_duplicate: return` answers 200 with the "
                "instance holding it and `duplicate: true`; with `raise`, 409 "
                "`duplicate_instance`."
            ),
            "properties": {
                **batch_item,
                "dedup_key": {
                    **flow_key,
                    "description": "While an unfinished instance holds this key, none other "
                    "is created.",
                },
                "on_duplicate": {"enum": ["return", "raise"], "default": "return"},
            },
        },
        "BatchItem": {
            "type": "object",
            "additionalProperties": False,
            "description": "One instance of a batch: the options of a single create but "
            "`dedup_key` and `on_duplicate`, checked the same way (a bad one is a 400 naming "
            "the item and the field, and nothing is created). Items are created in order: a "
            "later item of a key sees what an earlier one did.",
            "properties": batch_item,
        },
        "InstanceState": {
            "type": "object",
            "required": ["id", "status"],
            "properties": {"id": {"type": "string"}, "status": status_enum},
        },
        "Batch": {
            "type": "object",
            "required": ["instances"],
            "properties": {"instances": {"type": "array", "items": _ref("InstanceState")}},
        },
        "StatusChange": {
            "type": "object",
            "required": ["status"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "string", "enum": ["pause", "resume", "terminate", "restart"]},
                "from": {"type": "string", "description": "restart: the step to restart at."},
                "count": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "restart: which occurrence of `from` (default 1).",
                },
                "version": {
                    **_VERSION,
                    "description": "restart: run it under this version (default: its own).",
                },
                "rollback": {
                    "type": "boolean",
                    "description": "terminate: run the rollbacks of finished steps first.",
                },
            },
        },
        "VersionState": {
            "type": "object",
            "required": ["version", "unfinished", "finished", "workers", "drained"],
            "properties": {
                "version": {"type": "string"},
                "unfinished": _COUNTS,
                "finished": _COUNTS,
                "workers": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The live workers that serve this version.",
                },
                "drained": {"type": "boolean", "description": "No instance is unfinished."},
            },
        },
        "VersionList": {
            "type": "object",
            "required": ["workflow", "versions"],
            "properties": {
                "workflow": {"type": "string"},
                "versions": {"type": "array", "items": _ref("VersionState")},
            },
        },
    }
