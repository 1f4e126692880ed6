"""Stepline over HTTP: a JSON API under ``/api`` and a web dashboard at ``/``.

:func:`create_app` builds the Starlette app around an :class:`~stepline.Engine`; :func:`serve`
runs it on uvicorn (``stepline serve``, whose click command is
:data:`stepline.http.command.serve_command`). The API sits on the client API only.
"""

from .app import create_app
from .errors import ApiError
from .server import DEFAULT_HOST, DEFAULT_PORT, build_server, check_bind, is_loopback, serve

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ApiError",
    "build_server",
    "check_bind",
    "create_app",
    "is_loopback",
    "serve",
]
