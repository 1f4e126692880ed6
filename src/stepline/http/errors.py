"""API errors: every failure is JSON ``{"error": {"code", "message"}}`` with a fitting status."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import orjson
from starlette.responses import JSONResponse

from ..errors import (
    DuplicateInstanceError,
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    InvalidPayloadError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    ScheduleReadOnlyError,
    StoreError,
    WorkflowNotFoundError,
)
from ..store.operations import BulkJobNotFoundError
from ..values import readable

#: The error codes the API returns, by HTTP status (the table of docs/http.md lists them).
ERROR_CODES: dict[int, tuple[str, ...]] = {
    400: ("invalid_input",),
    401: ("unauthorized",),
    403: ("forbidden",),
    404: (
        "workflow_not_found",
        "instance_not_found",
        "schedule_not_found",
        "not_found",
        "metrics_off",
        "query_not_found",
        "update_not_found",
        "bulk_job_not_found",
    ),
    405: ("method_not_allowed",),
    409: (
        "instance_exists",
        "duplicate_instance",
        "illegal_state",
        "schedule_exists",
        "schedule_read_only",
    ),
    413: ("payload_too_large",),
    414: ("uri_too_long",),
    422: ("invalid_json", "query_failed", "update_rejected", "update_failed"),
    500: ("internal_error",),
    503: ("store_unavailable", "no_worker"),
    504: ("timeout",),
}


class ApiError(Exception):
    """An error the API reports to its caller: HTTP ``status``, a stable ``code``, a message."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


class JsonResponse(JSONResponse):
    """A JSON response encoded with orjson (the encoder stepline stores data with)."""

    def render(self, content: Any) -> bytes:
        # Responses carry stored values, already checked when they were stored; typed ones
        # (a query's answer, an update's reply) are shown readably (docs/data.md).
        try:
            return orjson.dumps(content)
        except TypeError:
            return orjson.dumps(readable(content))


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JsonResponse:
    """The JSON error body every failing API call returns."""
    return JsonResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


@contextlib.contextmanager
def client_errors() -> Iterator[None]:
    """Translate the client API's exceptions into API errors with the right status."""
    try:
        yield
    except ApiError:
        raise
    except WorkflowNotFoundError as exc:
        raise ApiError(404, "workflow_not_found", str(exc)) from exc
    except InstanceNotFoundError as exc:
        raise ApiError(404, "instance_not_found", str(exc)) from exc
    except ScheduleNotFoundError as exc:
        raise ApiError(404, "schedule_not_found", str(exc)) from exc
    except BulkJobNotFoundError as exc:
        raise ApiError(404, "bulk_job_not_found", str(exc)) from exc
    except ScheduleExistsError as exc:
        raise ApiError(409, "schedule_exists", str(exc)) from exc
    except ScheduleReadOnlyError as exc:
        raise ApiError(409, "schedule_read_only", str(exc)) from exc
    except InstanceAlreadyExistsError as exc:
        raise ApiError(409, "instance_exists", str(exc)) from exc
    except DuplicateInstanceError as exc:
        raise ApiError(409, "duplicate_instance", str(exc)) from exc
    except IllegalStateError as exc:
        raise ApiError(409, "illegal_state", str(exc)) from exc
    except StoreError as exc:
        raise ApiError(503, "store_unavailable", f"the database failed: {exc}") from exc
    except (InvalidPayloadError, ValueError, OverflowError) as exc:
        raise ApiError(400, "invalid_input", str(exc)) from exc
