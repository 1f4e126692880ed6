"""Blobs in an S3-compatible bucket (``pip install 'stepline[s3]'``): boto3, run in threads."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..errors import BlobStoreError, ConfigError
from .blobs import BlobEntry, BlobStore


class S3BlobStore(BlobStore):
    """Blobs as objects under ``prefix`` in ``bucket``. ``endpoint_url``: an S3-compatible
    server (MinIO, Ceph, R2...); credentials come from boto3's usual chain (environment,
    profile, instance role)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        connect_timeout: float = 5.0,
        attempts: int = 3,
    ) -> None:
        try:
            import boto3  # the optional extra stepline[s3]
            from botocore.config import Config
        except ImportError:  # pragma: no cover - the extra is part of the test install
            raise ConfigError(
                "an s3:// blob store needs boto3: pip install 'stepline[s3]'"
            ) from None
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.url = f"s3://{bucket}/{self.prefix}" + (f" at {endpoint_url}" if endpoint_url else "")
        config = Config(
            connect_timeout=connect_timeout,
            read_timeout=60,
            retries={"max_attempts": attempts, "mode": "standard"},
        )
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=endpoint_url, region_name=region, config=config
        )

    async def _call(self, doing: str, key: str, method: str, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(getattr(self._client, method), **kwargs)
        except Exception as exc:  # botocore's errors have no common root worth naming
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code in ("NoSuchKey", "404"):
                raise BlobStoreError(
                    f"blob store {self.url}: blob {key!r} is missing (deleted, or the store moved)"
                ) from exc
            raise self.failure(doing, key, exc) from exc

    async def put(self, key: str, data: bytes) -> None:
        await self._call(
            "write", key, "put_object", Bucket=self.bucket, Key=self.prefix + key, Body=data
        )

    async def get(self, key: str) -> bytes:
        answer = await self._call(
            "read", key, "get_object", Bucket=self.bucket, Key=self.prefix + key
        )
        try:
            return await asyncio.to_thread(answer["Body"].read)
        except Exception as exc:
            raise self.failure("read", key, exc) from exc

    async def delete(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), 1000):  # the most one request deletes
            batch = [{"Key": self.prefix + key} for key in keys[start : start + 1000]]
            await self._call(
                "delete", keys[start], "delete_objects", Bucket=self.bucket,
                Delete={"Objects": batch, "Quiet": True},
            )  # fmt: skip

    async def list_blobs(self, prefix: str = "") -> list[BlobEntry]:
        found: list[BlobEntry] = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = await self._call("list", prefix, "list_objects_v2", **kwargs)
            for item in page.get("Contents", ()):
                key = item["Key"][len(self.prefix) :]
                found.append(BlobEntry(key, item["LastModified"].timestamp()))
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return found

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)


def s3_store(url: str, *, endpoint_url: str | None, region: str | None) -> S3BlobStore:
    """The store of an ``s3://bucket/prefix`` URL."""
    rest = url[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise BlobStoreError(f"blob store URL {url!r} names no bucket: use s3://bucket/prefix")
    return S3BlobStore(bucket, prefix, endpoint_url=endpoint_url, region=region)
