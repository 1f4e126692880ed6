"""The one check of a configuration table's keys, shared by the readers of stepline.toml."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError


def check_keys(table: Mapping[str, Any], allowed: tuple[str, ...], path: Path, key: str) -> None:
    """Raise ``ConfigError`` naming the file and the first key of ``table`` (at ``key``; empty:
    the top level) that is not ``allowed``, with the keys that are."""
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        where = f"{key}.{unknown[0]}" if key else unknown[0]
        raise ConfigError(
            f"{path}: unknown key '{where}'; allowed keys there: {', '.join(allowed)}"
        )
