"""The ``[payloads]`` and ``[encryption]`` tables of ``stepline.toml`` (docs/data.md)::

[payloads]
offload_over = "256 KiB"         # values larger than this go to the blob store
sweep_grace = "1 hour"           # unreferenced blobs older than this are deleted

[payloads.blobs]                 # offloading on; url default: a directory next to SQLite's file
url = "s3://bucket/prefix"       # or "file:///var/lib/stepline/blobs"
endpoint_url = "http://127.0.0.1:9000"  # an S3-compatible server (optional)
region = "eu-west-1"             # (optional)

[encryption]
keys = [{id = "k2", env = "STEPLINE_KEY_K2"}, {id = "k1", file = "keys/k1"}]
current = "k2"                   # default: the first key
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._config_keys import check_keys
from .durations import parse_duration
from .errors import ConfigError
from .payloads import BlobsConfig, KeySource, PayloadConfig, parse_size

PAYLOADS_KEYS = ("offload_over", "sweep_grace", "blobs")
BLOBS_KEYS = ("url", "endpoint_url", "region")
ENCRYPTION_KEYS = ("keys", "current")
KEY_KEYS = ("id", "env", "file")


def _text(table: dict[str, Any], name: str, path: Path, key: str) -> str | None:
    value = table.get(name)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"{path}: key '{key}.{name}' must be a non-empty string")
    return value


def read_payloads(payloads: Any, encryption: Any, path: Path, prefix: str) -> PayloadConfig | None:
    """The two tables (both absent: None, the codec changes nothing); a bad value is a
    ``ConfigError`` naming the file and the key."""
    if payloads is None and encryption is None:
        return None
    found: dict[str, Any] = {}
    key = f"{prefix}payloads"
    if payloads is not None:
        if not isinstance(payloads, dict):
            raise ConfigError(f"{path}: key '{key}' must be a table ([payloads])")
        check_keys(payloads, PAYLOADS_KEYS, path, key)
        for name, parse in (("offload_over", parse_size), ("sweep_grace", parse_duration)):
            if name in payloads:
                try:
                    found[name] = parse(payloads[name], what="the value")
                except ValueError as exc:
                    raise ConfigError(f"{path}: key '{key}.{name}': {exc}") from None
        blobs = payloads.get("blobs")
        if blobs is not None:
            if not isinstance(blobs, dict):
                raise ConfigError(f"{path}: key '{key}.blobs' must be a table ([payloads.blobs])")
            check_keys(blobs, BLOBS_KEYS, path, f"{key}.blobs")
            where = f"{key}.blobs"
            found["blobs"] = BlobsConfig(
                _text(blobs, "url", path, where),
                _text(blobs, "endpoint_url", path, where),
                _text(blobs, "region", path, where),
            )
    if encryption is not None:
        found.update(_encryption(encryption, path, f"{prefix}encryption"))
    return PayloadConfig(**found)


def _encryption(table: Any, path: Path, key: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: key '{key}' must be a table ([encryption])")
    check_keys(table, ENCRYPTION_KEYS, path, key)
    keys = table.get("keys")
    if not isinstance(keys, list) or not keys:
        raise ConfigError(
            f"{path}: key '{key}.keys' must be a list of keys such as "
            '[{id = "k1", env = "STEPLINE_KEY_K1"}]'
        )
    sources: list[KeySource] = []
    for index, entry in enumerate(keys):
        where = f"{key}.keys[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: key '{where}' must be a table {{id = ..., env = ...}}")
        check_keys(entry, KEY_KEYS, path, where)
        key_id = _text(entry, "id", path, where)
        if key_id is None or len(key_id.encode()) > 255:
            raise ConfigError(f"{path}: key '{where}.id' must be a key id of 1 to 255 bytes")
        env, file = _text(entry, "env", path, where), _text(entry, "file", path, where)
        if (env is None) == (file is None):
            raise ConfigError(
                f"{path}: key '{where}' must name exactly one of env (an environment variable) "
                "or file (a file holding the key); never the key itself"
            )
        source = path.parent / file if file is not None else None
        sources.append(KeySource(key_id, env=env, file=source))
    current = _text(table, "current", path, key)
    ids = [source.id for source in sources]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{path}: key '{key}.keys': key ids must be unique, got {ids}")
    if current is not None and current not in ids:
        raise ConfigError(
            f"{path}: key '{key}.current': {current!r} is not among the keys ({', '.join(ids)})"
        )
    return {"keys": tuple(sources), "current_key": current}
