"""API tokens with roles: who a bearer token is and what it may do (docs/operations.md, "Access
tokens and roles").

A token is a random secret the server never stores: the configuration holds its SHA-256 hex
digest, its name and its role. A fast hash is enough because tokens are 256 random bits, not
passwords: no dictionary to try, so a slow hash would only slow every request. A presented token
is hashed and compared with every configured digest in constant time (``hmac.compare_digest``,
no early exit), so neither timing nor the order of the tokens tells which digest came close.

Roles are ordered: ``read`` < ``operate`` < ``admin``; a token may do what its role and every
lower role may. Tokens come from ``[http] tokens`` in stepline.toml, the ``STEPLINE_TOKENS``
environment variable (``name:role:sha256`` items, comma-separated) and the single legacy token
(``STEPLINE_API_TOKEN`` / ``--token``, which is ``admin``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from .errors import ConfigError

Role = Literal["read", "operate", "admin"]
ROLES: tuple[Role, ...] = get_args(Role)
"""The roles, weakest first."""
ENV_TOKENS = "STEPLINE_TOKENS"
TOKEN_PREFIX = "stl_"
"""Minted tokens start with this, so a leaked one is recognisable in logs and scanners."""
TOKEN_KEYS = ("name", "role", "sha256")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


def allows(role: Role, needed: Role) -> bool:
    """Whether ``role`` may do what needs ``needed``."""
    return ROLES.index(role) >= ROLES.index(needed)


def digest(token: str | bytes) -> str:
    """The SHA-256 hex digest of a token, as the configuration stores it."""
    raw = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(raw).hexdigest()


def mint() -> tuple[str, str]:
    """A new random token (256 bits) and its digest."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, digest(token)


@dataclass(frozen=True)
class Token:
    """A configured token: its ``name`` (shown by ``/api/whoami``, never secret), its ``role``
    and the SHA-256 hex digest of the secret."""

    name: str
    role: Role
    sha256: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"invalid token name {self.name!r}: 1-64 ASCII letters, digits, '_', '.' or "
                "'-', starting with a letter or digit"
            )
        if self.role not in ROLES:
            raise ValueError(
                f"invalid role {self.role!r} of token {self.name!r}: use one of "
                f"{', '.join(map(repr, ROLES))}"
            )
        if not isinstance(self.sha256, str) or not _HEX.match(self.sha256):
            raise ValueError(
                f"invalid sha256 of token {self.name!r}: 64 lowercase hex digits, as "
                "'stepline tokens new' prints (the digest of the token, never the token itself)"
            )

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role}


class TokenSet:
    """The tokens a server accepts; empty: the API is open (every caller is ``admin``)."""

    def __init__(self, tokens: Iterable[Token] = ()) -> None:
        self.tokens = tuple(tokens)
        names: set[str] = set()
        digests: dict[str, str] = {}
        for token in self.tokens:
            if token.name in names:
                raise ConfigError(f"two API tokens are named {token.name!r}: give each its own")
            if token.sha256 in digests:
                raise ConfigError(
                    f"API token {token.name!r} has the same sha256 as {digests[token.sha256]!r}: "
                    "mint one token per name ('stepline tokens new')"
                )
            names.add(token.name)
            digests[token.sha256] = token.name
        self._digests = [bytes.fromhex(t.sha256) for t in self.tokens]

    def __bool__(self) -> bool:
        return bool(self.tokens)

    def identify(self, presented: bytes) -> Token | None:
        """The token whose digest matches ``presented``, compared with every one in constant
        time; None if none does."""
        given = hashlib.sha256(presented).digest()
        found: Token | None = None
        for token, stored in zip(self.tokens, self._digests, strict=True):
            if hmac.compare_digest(given, stored):
                found = token  # no break: every digest is compared, whichever matched
        return found

    @classmethod
    def gather(
        cls,
        configured: Sequence[Token] = (),
        environment: str | None = None,
        single: str | None = None,
    ) -> TokenSet:
        """The configured tokens, those of ``$STEPLINE_TOKENS`` (its text) and the single
        legacy token (an ``admin`` named ``token``)."""
        tokens = list(configured)
        if environment:
            tokens.extend(parse_environment(environment))
        if single:
            tokens.append(Token("token", "admin", digest(single)))
        return cls(tokens)


def parse_environment(text: str) -> list[Token]:
    """The tokens of ``$STEPLINE_TOKENS``: ``name:role:sha256`` items separated by commas;
    a bad item is a :class:`~stepline.ConfigError` naming it (its digest left out)."""
    tokens = []
    for index, item in enumerate(text.split(","), 1):
        item = item.strip()
        if not item:
            continue
        parts = item.split(":")
        if len(parts) != 3:
            # Not quoted: a token pasted here by mistake must not reach a log.
            raise ConfigError(
                f"{ENV_TOKENS}: item {index} is not 'name:role:sha256' (separate tokens with "
                "commas; give the sha256 of each token, never the token)"
            )
        try:
            tokens.append(Token(parts[0], parts[1], parts[2]))  # type: ignore[arg-type]
        except ValueError as exc:
            raise ConfigError(f"{ENV_TOKENS}: item {index}: {exc}") from None
    return tokens


def parse_table(raw: Any, where: str) -> list[Token]:
    """The tokens of a TOML array of tables ``[{name, role, sha256}]``; errors name ``where``
    and the item."""
    if not isinstance(raw, list):
        raise ConfigError(
            f"{where} must be an array of tables such as "
            '[{name = "ci", role = "read", sha256 = "<64 hex digits>"}]'
        )
    tokens = []
    for index, item in enumerate(raw):
        at = f"{where}[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{at} must be a table with name, role and sha256")
        unknown = sorted(set(item) - set(TOKEN_KEYS))
        if unknown:
            hint = " (store the sha256 of the token, never the token)" if "token" in item else ""
            raise ConfigError(
                f"{at}: unknown key {unknown[0]!r}; the keys are name, role, sha256{hint}"
            )
        missing = [key for key in TOKEN_KEYS if key not in item]
        if missing:
            raise ConfigError(f"{at}: missing key {missing[0]!r}")
        try:
            tokens.append(Token(item["name"], item["role"], item["sha256"]))
        except ValueError as exc:
            raise ConfigError(f"{at}: {exc}") from None
    return tokens
