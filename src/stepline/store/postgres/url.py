"""The PostgreSQL store's URL: the libpq connection URL and the schema it names."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

DEFAULT_SCHEMA = "stepline"
_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def split_url(url: str) -> tuple[str, str]:
    """Split a stepline PostgreSQL URL into (libpq connection URL, schema name).

    The ``schema`` query parameter is removed; every other parameter is kept for libpq.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r} (expected postgresql://user@host/db)")
    schema = DEFAULT_SCHEMA
    kept: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            schema = value
        else:
            kept.append((key, value))
    if not _SCHEMA_RE.fullmatch(schema):
        raise ValueError(
            f"invalid schema name {schema!r} in the database URL: use 1-63 letters, digits or "
            "underscores, not starting with a digit"
        )
    # quote, not quote_plus: libpq does not decode "+" as a space in URL parameters.
    conninfo = urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urlencode(kept, quote_via=quote), "")
    )
    return conninfo, schema


def describe(conninfo: str, schema: str) -> str:
    """``host:port/dbname (schema x)``, without the password, for messages."""
    try:
        info = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return f"schema {schema}"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    return f"{host}:{port}/{info.get('dbname') or ''} (schema {schema})"
