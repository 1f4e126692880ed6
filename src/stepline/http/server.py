"""Running the app: :func:`serve` (what ``stepline serve`` calls) and the safety check on binds."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from uvicorn.config import LOGGING_CONFIG

from .. import _loop
from .._project_cloudflare import CloudflareConfig
from ..access import ENV_TOKENS, TokenSet
from ..engine import Engine
from ..errors import ConfigError
from ..telemetry import JsonFormatter, LogContextFilter
from .app import create_app

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
ENV_TOKEN = "STEPLINE_API_TOKEN"

EngineSource = Engine | Callable[[], Engine] | str | None


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and addresses in 127.0.0.0/8 or ``::1``; False otherwise
    (including ``0.0.0.0``, ``::`` and host names, which may reach other machines)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | TokenSet | None, insecure: bool) -> None:
    """Refuse to expose the API beyond this machine without a token (or a non-empty token
    set), unless ``insecure``."""
    if token or insecure or is_loopback(host):
        return
    raise ConfigError(
        f"refusing to serve on {host!r} without a token: anyone who can reach it could start, "
        f"stop and delete instances. Set {ENV_TOKEN} (or pass --token), {ENV_TOKENS} or "
        "[http] tokens in stepline.toml, bind to 127.0.0.1, "
        "or pass --insecure if the network is trusted"
    )


BACKLOG = 2048
"""Connections the kernel queues for the server (uvicorn's default)."""


def listen(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> list[socket.socket]:
    """Listening sockets on ``host`` (each of its addresses) and ``port``, bound before anything
    else starts, so that a port in use is one :class:`~stepline.ConfigError` naming it, and the
    server is reachable once this returns (connections queue until the app has started)."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot serve on {where}: unknown host ({exc.strerror})") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # Each address family gets its own socket, as asyncio's create_server does.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ConfigError(f"cannot serve on {where}: {_bind_problem(exc)}") from None
    return sockets


def _bind_problem(exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            "the port is in use (by another `stepline serve`?); stop what listens there, or "
            "choose another --port"
        )
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges); choose another --port"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "the address is not one of this machine's; check --host"
    return exc.strerror or str(exc)


HEAD_LIMIT = 128 * 1024
"""Bytes of a request line and headers that reach the app, which refuses a URL over 8 KiB
with 414; a longer head closes the connection."""


def json_log_config() -> dict[str, Any]:
    """uvicorn's logging (and stepline's) as one JSON object per line on stderr, with the log
    context's ids (:class:`stepline.telemetry.JsonFormatter`)."""
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "json",
        "filters": ["context"],
        "stream": "ext://sys.stderr",
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "filters": {"context": {"()": LogContextFilter}},
        "handlers": {"json": handler},
        "loggers": {
            name: {"handlers": ["json"], "level": "INFO", "propagate": False}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "stepline")
        },
    }


def build_server(
    app: Starlette,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    log_level: str = "info",
    access_log: bool = True,
    log_config: dict[str, Any] | None = None,
) -> uvicorn.Server:
    """A uvicorn server for ``app`` (HTTP/1.1 via h11, no websockets, lifespan on)."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http="h11",
        # h11 drops a request whose head is still incomplete past this size, so whether a long
        # URL got its 414 (from the app, past 8 KiB) depended on how its bytes arrived.
        h11_max_incomplete_event_size=HEAD_LIMIT,
        ws="none",
        loop=_loop.loop_name(),  # uvicorn makes the loop: the kind stepline's CLI runs on
        lifespan="on",
        log_level=log_level,
        access_log=access_log,
        server_header=False,
        timeout_graceful_shutdown=5,
        log_config=LOGGING_CONFIG if log_config is None else log_config,
    )
    return uvicorn.Server(config)


def _engine(source: EngineSource) -> Engine:
    if isinstance(source, Engine):
        return source
    if source is None or isinstance(source, str):
        return Engine(source, worker=False)
    return source()


def serve(
    engine: EngineSource = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    tokens: TokenSet | None = None,
    insecure: bool = False,
    max_body: int | None = None,
    log_level: str = "info",
    cloudflare_api: CloudflareConfig | None = None,
    log_config: dict[str, Any] | None = None,
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve the APIs and the dashboard until SIGINT/SIGTERM (blocking).

    ``engine`` is an unopened :class:`~stepline.Engine` (its worker runs in this process if it
    has workflows and ``worker=True``), a function returning one, or a database URL (default
    ``$STEPLINE_DATABASE_URL``) for an engine that only serves. ``token`` (an ``admin`` token)
    defaults to ``$STEPLINE_API_TOKEN``; ``tokens``, the tokens with roles, default to those of
    ``$STEPLINE_TOKENS`` and ``token`` (:mod:`stepline.access`). Binding to an address other
    than loopback without a token raises :class:`~stepline.ConfigError` unless ``insecure`` is
    true. ``cloudflare_api`` says where Cloudflare's Workflows API is served
    (:func:`~stepline.http.create_app`). ``sockets``: those :func:`listen` returned, else it
    listens on ``host`` and ``port`` first: a port in use raises :class:`~stepline.ConfigError`
    before the engine opens. ``log_config``: uvicorn's logging configuration
    (:func:`json_log_config` for JSON lines).
    """
    if tokens is None:
        single = token or os.environ.get(ENV_TOKEN) or None
        tokens = TokenSet.gather((), os.environ.get(ENV_TOKENS), single)
    check_bind(host, tokens, insecure)
    if sockets is None:
        sockets = listen(host, port)
    app = create_app(
        _engine(engine),
        tokens=tokens,
        max_body=max_body,
        manage_engine=True,
        cloudflare_api=cloudflare_api,
    )
    server = build_server(app, host=host, port=port, log_level=log_level, log_config=log_config)
    # uvicorn shuts down gracefully, then re-raises the signal it caught: SIGINT arrives here as
    # KeyboardInterrupt (Ctrl-C is a normal way to stop), SIGTERM ends the process as usual.
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
