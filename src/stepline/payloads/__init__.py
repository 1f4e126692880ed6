"""Payload codecs over the JSON text stepline stores: large values offloaded to a blob store,
encryption with rotating keys, and the escaping that tells envelopes from plain values
(docs/data.md). The store sees JSON text; this layer sits between it and the client/runtime.
"""

from .blobs import BlobEntry, BlobStore, FileBlobStore
from .codec import (
    DEFAULT_OFFLOAD_OVER,
    PayloadCodec,
    Slot,
    event_column,
    query_column,
    step_column,
    step_slot,
    stream_column,
    update_column,
)
from .config import BlobsConfig, PayloadConfig, build_codec, parse_size
from .envelope import escaped
from .keys import KeyRing, KeySource, new_key
from .s3 import S3BlobStore
from .sweep import sweep_orphans

__all__ = [
    "DEFAULT_OFFLOAD_OVER",
    "BlobEntry",
    "BlobStore",
    "BlobsConfig",
    "FileBlobStore",
    "KeyRing",
    "KeySource",
    "PayloadCodec",
    "PayloadConfig",
    "S3BlobStore",
    "Slot",
    "build_codec",
    "escaped",
    "event_column",
    "new_key",
    "parse_size",
    "query_column",
    "step_column",
    "step_slot",
    "stream_column",
    "sweep_orphans",
    "update_column",
]
