"""What configures the payload codec (``[payloads]``, ``[encryption]``, ``Engine(payloads=)``),
and building the codec from it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .._shown import shown
from ..errors import ConfigError
from .blobs import BlobStore, FileBlobStore
from .codec import DEFAULT_OFFLOAD_OVER, PayloadCodec
from .keys import KeyRing, KeySource
from .s3 import s3_store

_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2,
          "gb": 1000**3, "gib": 1024**3}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
DEFAULT_SWEEP_GRACE = 3600.0


def parse_size(value: object, *, what: str) -> int:
    """Bytes: an integer, or text such as ``"256 KiB"`` or ``"2 MB"``; else ``ValueError``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        found = _SIZE.match(value)
        if found is not None and found.group(2).lower() in _UNITS:
            size = int(float(found.group(1)) * _UNITS[found.group(2).lower()])
            if size > 0:
                return size
    raise ValueError(
        f'{what} must be a size such as 262144, "256 KiB" or "2 MB", got {shown(value)}'
    )


@dataclass(frozen=True)
class BlobsConfig:
    """Where offloaded values go: ``url`` ``file:///dir`` or ``s3://bucket/prefix``; None: the
    directory ``<database file>.blobs`` next to a SQLite database."""

    url: str | None = None
    endpoint_url: str | None = None
    """An S3-compatible server's URL (MinIO, Ceph, R2...); None: AWS."""
    region: str | None = None


@dataclass(frozen=True)
class PayloadConfig:
    """The payload codec's configuration; the default changes nothing (no offload, no
    encryption)."""

    offload_over: int = DEFAULT_OFFLOAD_OVER
    """Values whose JSON is larger than this many bytes go to the blob store."""
    blobs: BlobsConfig | None = None
    """Offloading on (None: off; values over ``max_payload`` are refused as before)."""
    keys: tuple[KeySource, ...] = ()
    """Encryption keys; empty: no encryption."""
    current_key: str | None = None
    """The key id that encrypts new records (default: the first key)."""
    sweep_grace: float = DEFAULT_SWEEP_GRACE
    """Seconds a blob no row references is kept before the orphan sweep deletes it."""

    def __post_init__(self) -> None:
        ids = [source.id for source in self.keys]
        if len(set(ids)) != len(ids):
            raise ConfigError(f"encryption key ids must be unique, got {ids}")
        if self.current_key is not None and self.current_key not in ids:
            raise ConfigError(
                f"the current encryption key {self.current_key!r} is not among the keys "
                f"({', '.join(ids) or 'none'})"
            )


def blob_store(config: BlobsConfig, database_url: str) -> BlobStore:
    """The blob store ``config`` names (``ConfigError`` for a URL it cannot use)."""
    url = config.url
    if url is None:
        if not database_url.startswith("sqlite:///") or database_url.endswith(":memory:"):
            raise ConfigError(
                "[payloads.blobs] needs a url (file:///path or s3://bucket/prefix) unless the "
                f"database is a SQLite file (it is {database_url.split('@')[-1]!r})"
            )
        database = Path(database_url[len("sqlite:///") :].split("?")[0])
        return FileBlobStore(database.with_name(database.name + ".blobs"))
    if url.startswith("file://"):
        path = Path(url[len("file://") :])
        if not path.is_absolute():
            raise ConfigError(f"[payloads.blobs] url {url!r} must be absolute: file:///path")
        return FileBlobStore(path)
    if url.startswith("s3://"):
        return s3_store(url, endpoint_url=config.endpoint_url, region=config.region)
    raise ConfigError(
        f"[payloads.blobs] url {url!r} is not supported: use file:///path or s3://bucket/prefix"
    )


def build_codec(
    config: PayloadConfig | None,
    database_url: str,
    max_payload: int,
    environ: Mapping[str, str] | None = None,
) -> PayloadCodec:
    """The codec of an engine (keys read now, from their environment variables or files)."""
    if config is None:
        return PayloadCodec(max_payload=max_payload)
    keys = None
    if config.keys:
        current = config.current_key or config.keys[0].id
        keys = KeyRing.load(config.keys, current, environ)
    blobs = None if config.blobs is None else blob_store(config.blobs, database_url)
    return PayloadCodec(
        max_payload=max_payload, offload_over=config.offload_over, blobs=blobs, keys=keys
    )
