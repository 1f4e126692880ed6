"""What the parts of the OpenAPI document share: the name pattern, references, JSON content,
the error responses and path parameters."""

from __future__ import annotations

from typing import Any

NAME_PATTERN = "^[a-zA-Z0-9_][a-zA-Z0-9_-]{0,99}$"
REF = "#/components/schemas/"
NUMBER_OR_NULL: dict[str, Any] = {"type": ["number", "null"]}
OBJECT_OR_NULL: dict[str, Any] = {"type": ["object", "null"]}
ERROR_OBJECT: dict[str, Any] = {
    "type": ["object", "null"],
    "properties": {"name": {"type": "string"}, "message": {"type": "string"}},
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": REF + name}


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


ERRORS = {
    400: "Invalid input (a bad id, status, cursor, limit or body shape, an integer past 64 bits).",
    401: "Missing or wrong bearer token.",
    403: "The token's role does not allow this (see `x-stepline-role`).",
    404: "Unknown workflow, instance or schedule.",
    409: (
        "Duplicate instance id or schedule name, a change the instance's status does not "
        "allow, or a change of a schedule declared in code."
    ),
    413: "Request body or payload over the size limit.",
    414: "URL (path and query string) over the size limit.",
    422: "The request body is not valid JSON.",
    503: "The database failed.",
    504: "Timed out waiting for an answer.",
}


def responses(ok: dict[str, Any], *statuses: int) -> dict[str, Any]:
    out: dict[str, Any] = dict(ok)
    for status in (400, 401, 403, *statuses, 414, 503):
        out[str(status)] = {
            "description": ERRORS[status],
            "content": json_content(ref("Error")),
        }
    return out


def ok(status: int, description: str, schema: str) -> dict[str, Any]:
    return {str(status): {"description": description, "content": json_content(ref(schema))}}


def path_param(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": NAME_PATTERN},
    }
