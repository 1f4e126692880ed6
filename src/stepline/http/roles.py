"""Which role each route needs: ONE table for the whole app, checked in one place.

The guard (:mod:`.app`) finds who the bearer token is and puts its :class:`~stepline.access.Token`
in the request scope; :func:`guarded` wraps each route's handler with the role its method needs,
from :data:`ROUTE_ROLES`. A route missing from the table needs ``admin`` (closed by default), and
tests/engine/test_http_roles.py enumerates every route of the app so that one cannot be added
without a row here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from ..access import Role, Token, allows
from .errors import ApiError

Endpoint = Callable[[Request], Awaitable[Response]]

SCOPE_KEY = "stepline.token"
"""Where the guard puts the caller's token (None: the API is open, the caller is ``admin``)."""

_I = "/workflows/{name}/instances"
_ONE = _I + "/{id}"
_S = "/schedules/{name}"
_CF = "/accounts/{account_id}/workflows/{name}"
_CF_ONE = _CF + "/instances/{id}"

ROUTE_ROLES: dict[str, dict[str, dict[str, Role]]] = {
    "api": {
        "/openapi.json": {"GET": "read"},
        "/whoami": {"GET": "read"},
        "/workers": {"GET": "read"},
        "/activity": {"GET": "read"},
        "/workflows": {"GET": "read"},
        "/workflows/{name}": {"GET": "read"},
        "/workflows/{name}/versions": {"GET": "read"},
        "/instances": {"GET": "read"},
        "/instances/count": {"GET": "read"},
        # A bulk action may delete or terminate any number of instances: admin only.
        "/bulk": {"GET": "read", "POST": "admin"},
        "/bulk/{id}": {"GET": "read"},
        "/bulk/{id}/cancel": {"POST": "admin"},
        _I: {"GET": "read", "POST": "operate"},
        _I + "/batch": {"POST": "operate"},
        _ONE: {"GET": "read", "DELETE": "admin"},
        _ONE + "/status": {"PATCH": "operate"},
        _ONE + "/events": {"GET": "read"},
        _ONE + "/events/{type}": {"POST": "operate"},
        _ONE + "/stream": {"GET": "read"},
        _ONE + "/queries/{query}": {"GET": "read"},
        _ONE + "/updates/{update}": {"POST": "operate"},
        _ONE + "/subscribe": {"GET": "read"},
        "/schedules": {"GET": "read", "POST": "admin"},
        _S: {"GET": "read", "PATCH": "admin", "DELETE": "admin"},
        _S + "/pause": {"POST": "admin"},
        _S + "/resume": {"POST": "admin"},
        _S + "/trigger": {"POST": "admin"},
        _S + "/backfill": {"POST": "admin"},
    },
    "cloudflare": {
        "/user/tokens/verify": {"GET": "read"},
        "/user": {"GET": "read"},
        "/accounts": {"GET": "read"},
        "/memberships": {"GET": "read"},
        "/accounts/{account_id}": {"GET": "read"},
        "/accounts/{account_id}/workflows": {"GET": "read"},
        _CF: {"GET": "read", "PUT": "admin", "DELETE": "admin"},
        _CF + "/versions": {"GET": "read"},
        _CF + "/versions/{version}": {"GET": "read"},
        _CF + "/versions/{version}/graph": {"GET": "read"},
        _CF + "/instances": {"GET": "read", "POST": "operate"},
        _CF + "/instances/batch": {"POST": "operate"},
        _CF_ONE: {"GET": "read"},
        _CF_ONE + "/step": {"GET": "read"},
        _CF_ONE + "/status": {"PATCH": "operate"},
        _CF_ONE + "/events/{type}": {"POST": "operate"},
    },
}
"""Area (``api``: under ``/api``; ``cloudflare``: under the Cloudflare prefix) -> route path
-> method -> the role it needs. ``read``: lists, describe, metrics; ``operate``: create, events,
pause, resume, terminate, restart, bulk; ``admin``: delete, purge, schedules."""

METRICS_ROLE: Role = "read"


def needed(area: str, path: str, method: str) -> Role:
    """The role ``method`` on route ``path`` of ``area`` needs; ``admin`` if it has no row."""
    method = "GET" if method == "HEAD" else method
    return ROUTE_ROLES.get(area, {}).get(path, {}).get(method, "admin")


def caller(request: Request) -> Token | None:
    """The caller's token, None when the API is open."""
    token: Token | None = request.scope.get(SCOPE_KEY)
    return token


def check(request: Request, role: Role) -> None:
    """Raise 403 unless the caller's role allows ``role``."""
    token = caller(request)
    if token is None or allows(token.role, role):
        return
    raise ApiError(
        403,
        "forbidden",
        f"token {token.name!r} has role {token.role!r}; {request.method} "
        f"{request.url.path} needs role {role!r} or above",
    )


def guarded(area: str, path: str, handlers: dict[str, Endpoint]) -> dict[str, Endpoint]:
    """``handlers`` (by method) of route ``path``, each checking the role the table gives it
    before it runs."""

    def wrap(method: str, handler: Endpoint) -> Endpoint:
        role = needed(area, path, method)

        async def endpoint(request: Request) -> Response:
            check(request, role)
            return await handler(request)

        return endpoint

    return {method: wrap(method, handler) for method, handler in handlers.items()}
