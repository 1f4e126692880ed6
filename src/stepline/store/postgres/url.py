"""The PostgreSQL store's URL: the libpq connection URL, and what stepline reads of it itself:
the schema and how many connections a store may open."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

DEFAULT_SCHEMA = "stepline"
_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
DEFAULT_CONNECTIONS = 11
"""A store's connections by default: a pool of 8, 2 for lease renewals, claims and heartbeats
(which must not queue behind bulk work), and 1 that LISTENs."""
RESERVED_CONNECTIONS = 3
"""Of ``max_connections``, those outside the main pool: the 2 reserved ones and the listener."""
MIN_CONNECTIONS = RESERVED_CONNECTIONS + 2


@dataclass(frozen=True)
class PostgresUrl:
    """A stepline PostgreSQL URL, parsed."""

    conninfo: str
    """The libpq connection URL: every query parameter but stepline's own."""
    schema: str
    max_connections: int
    """The most server connections one store opens at once (``?max_connections=N``)."""

    @property
    def pool_size(self) -> int:
        """The main pool's share of ``max_connections``."""
        return self.max_connections - RESERVED_CONNECTIONS


def parse_url(url: str) -> PostgresUrl:
    """Read a stepline PostgreSQL URL: ``schema`` and ``max_connections`` are stepline's query
    parameters, removed from the connection URL; every other parameter is kept for libpq."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r} (expected postgresql://user@host/db)")
    schema = DEFAULT_SCHEMA
    connections = str(DEFAULT_CONNECTIONS)
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            schema = value
        elif key == "max_connections":
            connections = value
        else:
            kept.append((key, value))
    if not _SCHEMA_RE.fullmatch(schema):
        raise ValueError(
            f"invalid schema name {schema!r} in the database URL: use 1-63 letters, digits or "
            "underscores, not starting with a digit"
        )
    if not connections.isdigit() or int(connections) < MIN_CONNECTIONS:
        raise ValueError(
            f"invalid max_connections {connections!r} in the database URL: a whole number, at "
            f"least {MIN_CONNECTIONS} (a pool of 2 or more, 2 reserved for leases and claims, "
            "1 that listens for notifications)"
        )
    # quote, not quote_plus: libpq does not decode "+" as a space in URL parameters.
    conninfo = urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urlencode(kept, quote_via=quote), "")
    )
    return PostgresUrl(conninfo, schema, int(connections))


def split_url(url: str) -> tuple[str, str]:
    """Split a stepline PostgreSQL URL into (libpq connection URL, schema name)
    (:func:`parse_url`)."""
    parsed = parse_url(url)
    return parsed.conninfo, parsed.schema


def describe(conninfo: str, schema: str) -> str:
    """``host:port/dbname (schema x)``, without the password, for messages."""
    try:
        info = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return f"schema {schema}"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"{host}:{port}/{info.get('dbname') or ''} (schema {schema})"
