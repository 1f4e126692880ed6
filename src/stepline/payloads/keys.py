"""Encryption keys (``[encryption]``) and the AEAD cipher that seals values with them.

Keys come from an environment variable or a file, never from the database. Each sealed record
names its key id, so adding a new current key rotates keys: old records stay readable with the
old key. The cipher is AES-256-GCM from ``cryptography``; the associated data binds a record to
its instance and column, so a record moved to another row fails authentication.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, PayloadKeyError

KEY_BYTES = 32
NONCE_BYTES = 12
BLOB_MAGIC = b"SLE1"
"""The first bytes of an encrypted blob: then the key id's length (1 byte), the id, the nonce
and the ciphertext."""


@dataclass(frozen=True)
class KeySource:
    """Where a key is read from: exactly one of ``env`` (a variable's name) or ``file``."""

    id: str
    env: str | None = None
    file: Path | None = None

    def __post_init__(self) -> None:
        if not self.id or len(self.id.encode()) > 255:
            raise ConfigError(f"encryption key id {self.id!r} must be 1 to 255 bytes")
        if (self.env is None) == (self.file is None):
            raise ConfigError(
                f"encryption key {self.id!r} must come from exactly one of env (an environment "
                "variable) or file"
            )

    def where(self) -> str:
        return f"environment variable {self.env}" if self.env else f"file {self.file}"


def parse_key(text: str, where: str) -> bytes:
    """A 256-bit key written as base64 (44 characters) or hex (64 characters)."""
    text = text.strip()
    raw: bytes | None = None
    try:
        if len(text) == 2 * KEY_BYTES:
            raw = bytes.fromhex(text)
        else:
            raw = base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        raw = None
    if raw is None or len(raw) != KEY_BYTES:
        raise ConfigError(
            f"the encryption key in {where} is not a 256-bit key: write 32 random bytes as "
            "base64 (python -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())')"
            " or as 64 hex digits"
        )
    return raw


def new_key() -> str:
    """A fresh key, as base64 text for an environment variable or a key file."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode()


class KeyRing:
    """The keys of one process: the current one seals, any of them opens."""

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        # Imported here: cryptography is the optional extra stepline[encryption].
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:  # pragma: no cover - the extra is part of the test install
            raise ConfigError(
                "[encryption] needs the cryptography package: pip install 'stepline[encryption]'"
            ) from None
        if current not in keys:
            raise ConfigError(f"the current encryption key {current!r} is not among the keys")
        self.current = current
        self._ciphers = {key_id: AESGCM(raw) for key_id, raw in keys.items()}

    @classmethod
    def load(
        cls, sources: Sequence[KeySource], current: str, environ: Mapping[str, str] | None = None
    ) -> KeyRing:
        """Read every key from its source; a missing one is a ``ConfigError`` naming it."""
        env = os.environ if environ is None else environ
        keys: dict[str, bytes] = {}
        for source in sources:
            if source.env is not None:
                text = env.get(source.env)
                if not text:
                    raise ConfigError(
                        f"encryption key {source.id!r}: environment variable {source.env} is "
                        "not set"
                    )
            else:
                try:
                    text = Path(str(source.file)).read_text()
                except OSError as exc:
                    raise ConfigError(
                        f"encryption key {source.id!r}: cannot read {source.file}: "
                        f"{exc.strerror or exc}"
                    ) from None
            keys[source.id] = parse_key(text, source.where())
        return cls(keys, current)

    def encrypt(self, plain: bytes, associated: bytes) -> tuple[str, bytes, bytes]:
        """(key id, nonce, ciphertext) of ``plain`` under the current key."""
        nonce = os.urandom(NONCE_BYTES)
        return self.current, nonce, self._ciphers[self.current].encrypt(nonce, plain, associated)

    def decrypt(
        self, key_id: str, nonce: bytes, sealed: bytes, associated: bytes, where: str
    ) -> bytes:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise PayloadKeyError(
                f"{where} is encrypted with key {key_id!r}, which is not configured "
                f"(configured: {', '.join(sorted(self._ciphers))}); add it to [encryption] keys"
            )
        # Imported here with the cipher: the optional extra.
        from cryptography.exceptions import InvalidTag

        try:
            return cipher.decrypt(nonce, sealed, associated)
        except InvalidTag:
            raise PayloadKeyError(
                f"{where} fails authentication with key {key_id!r}: it was altered, or moved "
                "from another instance or column"
            ) from None

    def seal_blob(self, plain: bytes, associated: bytes) -> bytes:
        key_id, nonce, sealed = self.encrypt(plain, associated)
        kid = key_id.encode()
        return BLOB_MAGIC + bytes([len(kid)]) + kid + nonce + sealed

    def open_blob(self, data: bytes, associated: bytes, where: str) -> bytes:
        if not data.startswith(BLOB_MAGIC) or len(data) < len(BLOB_MAGIC) + 1:
            raise PayloadKeyError(f"{where} is not an encrypted blob")
        at = len(BLOB_MAGIC)
        size = data[at]
        kid = data[at + 1 : at + 1 + size].decode()
        nonce_at = at + 1 + size
        nonce = data[nonce_at : nonce_at + NONCE_BYTES]
        return self.decrypt(kid, nonce, data[nonce_at + NONCE_BYTES :], associated, where)
