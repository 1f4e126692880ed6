"""The ``[cloudflare]`` table of ``stepline.toml``: how ``stepline serve`` answers Cloudflare's
Workflows REST API (docs/cloudflare.md)::

    [cloudflare]
    prefix = "/client/v4"      # where the routes are mounted; what CLOUDFLARE_API_BASE_URL ends in
    account_id = "0123abcd"    # the one account id served (default: any id is accepted)
    enabled = true             # false: serve /api and the dashboard only
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._config_keys import check_keys
from .errors import ConfigError

DEFAULT_PREFIX = "/client/v4"
DEFAULT_ACCOUNT = "stepline"
"""The account id listed by ``/accounts`` and ``/memberships`` when none is configured."""
CLOUDFLARE_KEYS = ("prefix", "account_id", "enabled")
_PREFIX = re.compile(r"^(/[A-Za-z0-9._~-]+)+$")
_ACCOUNT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


@dataclass(frozen=True)
class CloudflareConfig:
    """Where and for which account ``stepline serve`` speaks Cloudflare's Workflows API."""

    prefix: str = DEFAULT_PREFIX
    account_id: str | None = None
    """The only account id accepted in paths; None accepts any."""
    enabled: bool = True

    def __post_init__(self) -> None:
        if not _PREFIX.match(self.prefix):
            raise ValueError(
                f"invalid Cloudflare API prefix {self.prefix!r}: a path such as '/client/v4' "
                "(segments of letters, digits, '.', '_', '~' or '-', no trailing '/')"
            )
        if self.prefix == "/api" or self.prefix.startswith("/api/"):
            raise ValueError(f"the Cloudflare API prefix {self.prefix!r} is under /api, which is "
                             "stepline's own API; pick another, such as '/client/v4'")  # fmt: skip
        if self.account_id is not None and not _ACCOUNT.match(self.account_id):
            raise ValueError(
                f"invalid account id {self.account_id!r}: 1-100 ASCII letters, digits, '_' or "
                "'-', starting with a letter or digit"
            )

    @property
    def listed_account(self) -> str:
        """The account id that account lookups (``/accounts``, ``/memberships``) report."""
        return self.account_id or DEFAULT_ACCOUNT


def read_cloudflare(raw: Any, path: Path, prefix: str) -> CloudflareConfig:
    """The ``[cloudflare]`` table (absent: the defaults); bad values are a ``ConfigError``
    naming the file and the key."""
    key = f"{prefix}cloudflare"
    if raw is None:
        return CloudflareConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: key '{key}' must be a table ([cloudflare])")
    check_keys(raw, CLOUDFLARE_KEYS, path, key)
    for name, kind in (("prefix", str), ("account_id", str), ("enabled", bool)):
        if name in raw and not isinstance(raw[name], kind):
            raise ConfigError(f"{path}: key '{key}.{name}' must be a {kind.__name__}")
    try:
        return CloudflareConfig(
            raw.get("prefix", DEFAULT_PREFIX), raw.get("account_id"), raw.get("enabled", True)
        )
    except ValueError as exc:
        raise ConfigError(f"{path}: key '{key}': {exc}") from None
