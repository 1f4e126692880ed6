"""Blob stores: where values over ``offload_over`` are kept (a directory, or an S3 bucket).

A blob's key is ``<workflow>/<instance id>/<sha256 of its bytes>`` (each part percent-encoded),
so that the blobs of an instance can be listed and deleted with it, and writing the same bytes
twice writes one blob.
"""

from __future__ import annotations

import abc
import asyncio
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from ..errors import BlobStoreError


def blob_prefix(workflow: str, instance_id: str) -> str:
    """The key prefix of an instance's blobs (ends with ``/``)."""
    return f"{quote(workflow, safe='')}/{quote(instance_id, safe='')}/"


def split_key(key: str) -> tuple[str, str, str] | None:
    """(workflow, instance id, name) of a blob key, or None for a key stepline did not write."""
    parts = key.split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return unquote(parts[0]), unquote(parts[1]), parts[2]


@dataclass(frozen=True)
class BlobEntry:
    """A stored blob, as a listing shows it."""

    key: str
    modified: float
    """When it was written (seconds since the epoch)."""


class BlobStore(abc.ABC):
    """Where offloaded values live. Every failure raises :class:`~stepline.BlobStoreError`
    naming the store (:attr:`url`) and the blob."""

    url: str

    @abc.abstractmethod
    async def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` durably (replacing what was there) before returning."""

    @abc.abstractmethod
    async def get(self, key: str) -> bytes:
        """The bytes stored under ``key``; a missing blob is a ``BlobStoreError``."""

    @abc.abstractmethod
    async def delete(self, keys: Sequence[str]) -> None:
        """Delete the blobs ``keys``; keys that do not exist are skipped."""

    @abc.abstractmethod
    async def list_blobs(self, prefix: str = "") -> list[BlobEntry]:
        """Every blob whose key starts with ``prefix``."""

    async def close(self) -> None:  # noqa: B027 - most stores hold nothing to release
        """Release connections. Idempotent."""

    def failure(self, doing: str, key: str, exc: BaseException) -> BlobStoreError:
        return BlobStoreError(f"blob store {self.url}: cannot {doing} blob {key!r}: {exc}")


class FileBlobStore(BlobStore):
    """Blobs as files under a directory (created on first write)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root.as_uri() if root.is_absolute() else str(root)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    async def put(self, key: str, data: bytes) -> None:
        try:
            await asyncio.to_thread(self._put, key, data)
        except OSError as exc:
            raise self.failure("write", key, exc) from exc

    def _put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written aside then renamed: a reader never sees half a blob.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    async def get(self, key: str) -> bytes:
        try:
            return await asyncio.to_thread(self._path(key).read_bytes)
        except FileNotFoundError as exc:
            raise BlobStoreError(
                f"blob store {self.url}: blob {key!r} is missing (deleted, or the store moved)"
            ) from exc
        except OSError as exc:
            raise self.failure("read", key, exc) from exc

    async def delete(self, keys: Sequence[str]) -> None:
        try:
            await asyncio.to_thread(self._delete, keys)
        except OSError as exc:
            raise self.failure("delete", keys[0] if keys else "", exc) from exc

    def _delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            path = self._path(key)
            path.unlink(missing_ok=True)
            for parent in (path.parent, path.parent.parent):
                try:
                    parent.rmdir()  # the instance's and workflow's directories, once empty
                except OSError:
                    break

    async def list_blobs(self, prefix: str = "") -> list[BlobEntry]:
        try:
            return await asyncio.to_thread(self._list, prefix)
        except OSError as exc:
            raise self.failure("list", prefix, exc) from exc

    def _list(self, prefix: str) -> list[BlobEntry]:
        # Only the directory the prefix names is walked (an instance's own, for its delete).
        folder = self.root.joinpath(*prefix.split("/")[:-1])
        if not folder.is_dir():
            return []
        found = []
        for path in folder.rglob("*"):
            if not path.is_file() or path.name.startswith(".tmp-"):
                continue
            key = path.relative_to(self.root).as_posix()
            if key.startswith(prefix):
                found.append(BlobEntry(key, path.stat().st_mtime))
        return found
