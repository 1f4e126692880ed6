"""The ASGI application: the JSON API under ``/api``, Cloudflare's Workflows API under its
prefix (``/client/v4``) and the dashboard at ``/``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Protocol

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._project_cloudflare import CloudflareConfig
from ..access import Token, TokenSet
from ..engine import Engine
from ..errors import ConfigError
from . import cloudflare
from .api import Api, api_routes
from .errors import ApiError, error_response
from .roles import SCOPE_KEY

log = logging.getLogger("stepline.http")

#: Default limit of a request body: four times the engine's payload limit (4 MiB by default).
BODY_FACTOR = 4
#: Longest URL (path and query string) served, in bytes; the API's URLs stay well under it.
MAX_URL = 8192

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'; require-trusted-types-for 'script'"
)
"""Trusted Types turn any HTML string reaching an HTML sink (``innerHTML``) into an error in
browsers that support them: the dashboard builds its DOM with text nodes only."""
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


class ErrorRenderer(Protocol):
    """How an API writes an error: status, stepline's error code, message, headers."""

    def __call__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> Response: ...


Areas = Sequence[tuple[str, ErrorRenderer]]
"""The APIs by path prefix, each with its error format; every one needs the token."""


def _area(path: str, areas: Areas) -> ErrorRenderer | None:
    """The error format of the API ``path`` is in, or None outside every API."""
    for prefix, render in areas:
        if path == prefix or path.startswith(prefix + "/"):
            return render
    return None


class _Guard:
    """Pure ASGI middleware: the URL size limit, the bearer-token check on the APIs (the
    caller's token goes in the scope for the routes' role checks, :mod:`.roles`) and security
    headers everywhere."""

    def __init__(self, app: ASGIApp, tokens: TokenSet, areas: Areas) -> None:
        self.app = app
        self._tokens = tokens
        self._areas = areas

    def _caller(self, scope: Scope) -> Token | None:
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                if scheme.lower() == b"bearer":
                    return self._tokens.identify(credentials.strip())
                return None
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        render = _area(scope["path"], self._areas)
        is_api = render is not None
        url_size = len(scope.get("raw_path") or scope["path"].encode()) + len(
            scope.get("query_string", b"")
        )

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Referrer-Policy", "no-referrer")
                headers.setdefault("X-Frame-Options", "DENY")
                headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
                if is_api:
                    headers.setdefault("Cache-Control", "no-store")
            await send(message)

        if url_size > MAX_URL:
            response = (render or error_response)(
                414,
                "uri_too_long",
                f"the URL is {url_size:,} bytes (path and query string), over the limit of "
                f"{MAX_URL:,} bytes; send large data in a request body",
            )
            await response(scope, receive, send_with_headers)
            return
        caller = self._caller(scope) if render is not None and self._tokens else None
        scope[SCOPE_KEY] = caller
        if render is not None and self._tokens and caller is None:
            response = render(
                401,
                "unauthorized",
                "this API needs 'Authorization: Bearer <token>' with one of the server's "
                "tokens (STEPLINE_API_TOKEN, --token, STEPLINE_TOKENS or [http] tokens)",
                {"WWW-Authenticate": 'Bearer realm="stepline"'},
            )
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


def _renderer(request: Request) -> ErrorRenderer:
    return _area(request.url.path, request.app.state.error_areas) or error_response


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _renderer(request)(exc.status, exc.code, exc.message, exc.headers or None)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        message = f"no such page or API route: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        allowed = ", ".join(sorted(m.strip() for m in headers.get("Allow", "").split(",")))
        headers["Allow"] = allowed
        message = f"{request.method} is not allowed on {request.url.path}; allowed: {allowed}"
    else:
        message = str(exc.detail)
    return _renderer(request)(exc.status_code, code, message, headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return _renderer(request)(
        500,
        "internal_error",
        f"the server failed: {type(exc).__name__}; this is a bug in stepline, please report it",
    )


async def _metrics(request: Request) -> Response:
    """``GET /metrics``: the Prometheus text format, when the engine keeps metrics."""
    engine: Engine = request.app.state.engine
    try:
        body, content_type = await engine.telemetry.exposition()
    except ConfigError as exc:
        raise ApiError(404, "metrics_off", str(exc)) from None
    return Response(body, media_type=content_type)


def create_app(
    engine: Engine,
    *,
    token: str | None = None,
    tokens: TokenSet | Iterable[Token] = (),
    max_body: int | None = None,
    manage_engine: bool = False,
    stream_interval: float = 1.0,
    cloudflare_api: CloudflareConfig | None = None,
) -> Starlette:
    """The ASGI app: the API under ``/api``, Cloudflare's Workflows API under
    ``cloudflare_api.prefix`` (default ``/client/v4``; ``enabled=False`` leaves it out), the
    Prometheus metrics at ``/metrics`` (when the engine keeps metrics) and the dashboard at
    ``/``.

    ``token``: when set, every call of either API needs ``Authorization: Bearer <token>``
    (an ``admin`` token); ``tokens``: more tokens with roles (:mod:`stepline.access`), each
    route allowing the roles :mod:`.roles` gives it. With neither, the APIs are open.
    ``max_body``: largest request body in bytes (default: 4 x the engine's payload limit);
    params and event payloads are also held to the engine's ``max_payload``. With
    ``manage_engine`` the app opens the engine (and its worker, if it has one) on startup and
    closes it on shutdown; otherwise the caller keeps the engine open while the app serves.
    """
    limit = max_body if max_body is not None else BODY_FACTOR * engine.settings.max_payload
    if limit < 1:
        raise ValueError(f"max_body must be positive, got {limit}")
    accepted = TokenSet.gather(
        tokens.tokens if isinstance(tokens, TokenSet) else tuple(tokens), single=token or None
    )
    api = Api(engine, max_body=limit, secured=bool(accepted), stream_interval=stream_interval)
    dashboard = StaticFiles(packages=[("stepline.http", "static")], html=True)
    mounts = [Mount("/api", routes=api_routes(api))]
    areas: list[tuple[str, ErrorRenderer]] = [
        ("/api", error_response),
        ("/metrics", error_response),
    ]
    config = cloudflare_api or CloudflareConfig()
    if config.enabled:
        speaker = cloudflare.CloudflareApi(
            engine, config, lookup=api.lookup, reader=api.reader, token=token or None
        )
        mounts.append(Mount(config.prefix, routes=speaker.routes()))
        areas.append((config.prefix, cloudflare.error_response))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if manage_engine:
            async with engine:
                yield
        else:
            yield

    app = Starlette(
        routes=[*mounts, Route("/metrics", _metrics), Mount("/", dashboard, name="dashboard")],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _server_error,
        },
        lifespan=lifespan,
    )
    app.add_middleware(_Guard, tokens=accepted, areas=areas)
    app.state.error_areas = areas
    app.state.engine = engine
    app.state.api = api
    return app
