"""Cloudflare's response envelope: ``{"success", "errors", "messages", "result"}`` (with
``result_info`` on lists), and its errors.

Handlers raise :class:`~stepline.http.ApiError` with stepline's own codes, as the ``/api``
handlers do (one translation of the client's exceptions, :func:`~stepline.http.errors.
client_errors`); :func:`error_response` renders them with Cloudflare's numeric code and its
error key, followed by stepline's message (what happened and what to do).
"""

from __future__ import annotations

from typing import Any

from ..errors import JsonResponse

#: stepline's error code -> (Cloudflare's numeric code, its error key). The Workflows keys and
#: codes are Cloudflare's where it has one for the case (docs/cloudflare.md lists them).
CODES: dict[str, tuple[int, str]] = {
    "unauthorized": (10000, "Authentication error"),
    "forbidden": (10000, "Authentication error"),
    "account_not_found": (9109, "Unauthorized to access requested resource"),
    "no_user": (9109, "Unauthorized to access requested resource"),
    "workflow_not_found": (10200, "workflows.api.error.workflow.not_found"),
    "instance_not_found": (10400, "workflows.api.error.instance.not_found"),
    "step_not_found": (10400, "workflows.api.error.step.not_found"),
    "version_not_found": (10400, "workflows.api.error.version.not_found"),
    "instance_exists": (10405, "workflows.api.error.instance.already_exists"),
    "duplicate_instance": (10405, "workflows.api.error.instance.already_exists"),
    "illegal_state": (10401, "workflows.api.error.instance.illegal_state"),
    "invalid_input": (10002, "workflows.api.error.body"),
    "invalid_json": (10002, "workflows.api.error.body"),
    "payload_too_large": (10002, "workflows.api.error.body.too_large"),
    "uri_too_long": (10002, "workflows.api.error.uri_too_long"),
    "not_supported": (10003, "workflows.api.error.not_supported"),
    "not_found": (7000, "No route for that URI"),
    "method_not_allowed": (7001, "Method not allowed"),
    "internal_error": (10001, "workflows.api.error.internal_server"),
    "store_unavailable": (10001, "workflows.api.error.internal_server"),
}
_FALLBACK = (10001, "workflows.api.error.internal_server")
#: Statuses Cloudflare gives differently from stepline's own API.
_STATUS = {"invalid_json": 400}


def ok(result: Any, result_info: dict[str, Any] | None = None, status: int = 200) -> JsonResponse:
    """A successful answer in Cloudflare's envelope."""
    body: dict[str, Any] = {"success": True, "errors": [], "messages": [], "result": result}
    if result_info is not None:
        body["result_info"] = result_info
    return JsonResponse(body, status_code=status)


def page_info(page: int, per_page: int, count: int, total: int) -> dict[str, Any]:
    """``result_info`` of a page-numbered list."""
    pages = -(-total // per_page) if per_page else 0
    return {
        "page": page,
        "per_page": per_page,
        "count": count,
        "total_count": total,
        "total_pages": pages,
    }


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JsonResponse:
    """A failure in Cloudflare's envelope. Clients made by Cloudflare's SDK generator retry a
    409 unless told otherwise; nothing but an unavailable database is worth retrying here."""
    number, key = CODES.get(code, _FALLBACK)
    out = dict(headers or {})
    if status < 500:
        out["x-should-retry"] = "false"
    body = {
        "success": False,
        "errors": [{"code": number, "message": f"{key}: {message}"}],
        "messages": [],
        "result": None,
    }
    return JsonResponse(body, status_code=_STATUS.get(code, status), headers=out)
