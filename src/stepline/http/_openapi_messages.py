"""The messages' part of the OpenAPI document (docs/messaging.md): queries, updates and stream
subscriptions of an instance."""

from __future__ import annotations

from typing import Any

from ._openapi_common import ERRORS, json_content, path_param, ref

_ONE = "/api/workflows/{name}/instances/{id}"
_NAME = path_param("name", "The workflow name.")
_ID = path_param("id", "The instance id.")


def _errors(**described: str) -> dict[str, Any]:
    """Error responses: the shared ones, with these statuses described as given."""
    out: dict[str, Any] = {}
    for status in ("400", "401", "404", "409", "413", "414", "422", "503", "504"):
        text = described.get(f"s{status}") or ERRORS.get(int(status))
        if text is not None:
            out[status] = {"description": text, "content": json_content(ref("Error"))}
    return out


def messages_schemas() -> dict[str, Any]:
    return {
        "QueryAnswer": {
            "type": "object",
            "required": ["query", "answer"],
            "properties": {"query": {"type": "string"}, "answer": {}},
        },
        "UpdateRequest": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "args": {"type": "array", "description": "The handler's arguments (JSON)."},
                "update_id": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 200,
                    "description": (
                        "Idempotency key (default: a new UUID): the same id gets the recorded "
                        "reply, with no second run."
                    ),
                },
                "timeout": {
                    "type": ["number", "string"],
                    "description": "How long to wait for the reply (default 60 seconds).",
                },
                "wait": {
                    "type": "boolean",
                    "description": "false: answer 202 once the update is recorded.",
                },
            },
        },
        "UpdateReply": {
            "type": "object",
            "required": ["update", "update_id", "reply"],
            "properties": {
                "update": {"type": "string"},
                "update_id": {"type": "string"},
                "reply": {"description": "What the handler returned."},
            },
        },
        "UpdateSent": {
            "type": "object",
            "required": ["update", "update_id"],
            "properties": {"update": {"type": "string"}, "update_id": {"type": "string"}},
        },
    }


def messages_paths() -> dict[str, Any]:
    query = path_param("query", "The query's name (`@stepline.query`).")
    update = path_param("update", "The update's name (`@stepline.update`).")
    return {
        _ONE + "/queries/{query}": {
            "get": {
                "operationId": "queryInstance",
                "summary": "Ask a query: its handler on the state replayed from the history.",
                "description": (
                    "Nothing runs and nothing is written. Answered by this server when it has "
                    "the workflow's code, else by a live worker that serves it."
                ),
                "parameters": [
                    _NAME,
                    _ID,
                    query,
                    {
                        "name": "args",
                        "in": "query",
                        "description": "The handler's arguments, a JSON array.",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "timeout",
                        "in": "query",
                        "description": "How long a worker may take (default 10 seconds).",
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "The answer.",
                        "content": json_content(ref("QueryAnswer")),
                    },
                    **_errors(
                        s404="Unknown workflow, instance or query.",
                        s422="The handler raised, or tried to change the state or run a step.",
                        s503="The database failed, or no live worker has the workflow's code.",
                        s504="No worker answered in time.",
                    ),
                },
            }
        },
        _ONE + "/updates/{update}": {
            "post": {
                "operationId": "updateInstance",
                "summary": "Send an update and wait for its handler's reply.",
                "description": (
                    "Recorded before the server waits; the handler runs once, when run() is "
                    "idle. Sending the same `update_id` again answers with the recorded reply."
                ),
                "parameters": [_NAME, _ID, update],
                "requestBody": {
                    "required": False,
                    "content": json_content(ref("UpdateRequest")),
                },
                "responses": {
                    "200": {
                        "description": "The reply.",
                        "content": json_content(ref("UpdateReply")),
                    },
                    "202": {
                        "description": "Recorded (`wait: false`).",
                        "content": json_content(ref("UpdateSent")),
                    },
                    **_errors(
                        s404="Unknown workflow, instance or update.",
                        s409="The instance has ended.",
                        s422=(
                            "Not valid JSON, the validator turned it down, the handler raised, "
                            "or the instance ended before it ran."
                        ),
                        s504="No reply in time (send the same update_id again to wait more).",
                    ),
                },
            }
        },
        _ONE + "/subscribe": {
            "get": {
                "operationId": "subscribeInstance",
                "summary": "Server-Sent Events: the items of a stream after a cursor.",
                "description": (
                    "Each `item` event carries `{stream, seq, value, created_at}` with `seq` as "
                    "its id: a client reconnecting with `Last-Event-ID` (or `after`) misses "
                    "nothing. An `end` event closes it once the instance has ended."
                ),
                "parameters": [
                    _NAME,
                    _ID,
                    {
                        "name": "stream",
                        "in": "query",
                        "required": True,
                        "description": "The stream's name.",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "after",
                        "in": "query",
                        "description": "Send the items after this seq (default 0).",
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "An event stream.",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    **_errors(s404="Unknown workflow or instance."),
                },
            }
        },
    }
