"""The ``[http]`` table of ``stepline.toml``: what ``stepline serve`` accepts as API tokens
(docs/operations.md, "Access tokens and roles")::

    [http]
    tokens = [
        {name = "ci", role = "read", sha256 = "<64 hex digits>"},
        {name = "ops", role = "admin", sha256 = "<64 hex digits>"},
    ]
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._config_keys import check_keys
from .access import Token, TokenSet, parse_table
from .errors import ConfigError

HTTP_KEYS = ("tokens",)


@dataclass(frozen=True)
class HttpConfig:
    """The server's settings from the configuration file."""

    tokens: tuple[Token, ...] = ()


def read_http(raw: Any, path: Path, prefix: str) -> HttpConfig:
    """The ``[http]`` table (absent: no tokens); bad values are a ``ConfigError`` naming the
    file and the key."""
    key = f"{prefix}http"
    if raw is None:
        return HttpConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: key '{key}' must be a table ([http])")
    check_keys(raw, HTTP_KEYS, path, key)
    tokens = parse_table(raw.get("tokens", []), f"{path}: key '{key}.tokens'")
    try:
        TokenSet(tokens)  # duplicate names or digests
    except ConfigError as exc:
        raise ConfigError(f"{path}: key '{key}.tokens': {exc}") from None
    return HttpConfig(tuple(tokens))
