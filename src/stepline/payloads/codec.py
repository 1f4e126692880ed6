"""The payload codec: a value's JSON text -> the text stored (offloaded, encrypted, escaped),
and a stored value -> the value, fetching and decrypting only when asked.

One codec per engine, shared by the client (params, event payloads; reads) and the runtime
(step results, outputs; replays). Without blobs or keys it only escapes the rare user value
that looks like an envelope (:mod:`.envelope`), so plain databases read and write as before.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from .._json import DEFAULT_MAX_PAYLOAD, loads
from ..errors import BlobStoreError, InvalidPayloadError, PayloadKeyError
from .blobs import BlobStore, blob_prefix
from .envelope import BLOB, ENC, envelope_kind, escaped, unescaped
from .keys import KeyRing

log = logging.getLogger("stepline.payloads")

DEFAULT_OFFLOAD_OVER = 256 * 1024


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a value is stored: the instance and the column (``params``, ``output``,
    ``step:<name>-<count>``, ``event:<type>``). Encryption binds a record to it."""

    workflow: str
    instance_id: str
    column: str

    def associated(self) -> bytes:
        return f"stepline\x00{self.workflow}\x00{self.instance_id}\x00{self.column}".encode()

    def describe(self) -> str:
        return f"the {self.column} of instance {self.workflow}/{self.instance_id}"


def step_column(name: str, count: int) -> str:
    """The column of a step's result (each step's record is bound to its own)."""
    return f"step:{name}-{count}"


def event_column(event_type: str) -> str:
    return f"event:{event_type}"


def stream_column(stream: str) -> str:
    return f"stream:{stream}"


def update_column(update_id: str) -> str:
    """The column of an update's arguments (on its record) and its reply."""
    return f"update:{update_id}"


def query_column(name: str) -> str:
    """The column of a routed query's arguments and answer (rows kept until it is answered)."""
    return f"query:{name}"


def step_slot(workflow: str, instance_id: str, name: str, count: int) -> Slot:
    return Slot(workflow, instance_id, step_column(name, count))


class PayloadCodec:
    """Seals values for storage and opens them again (see the module's docstring)."""

    def __init__(
        self,
        *,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        offload_over: int = DEFAULT_OFFLOAD_OVER,
        blobs: BlobStore | None = None,
        keys: KeyRing | None = None,
    ) -> None:
        self.max_payload = max_payload
        self.offload_over = offload_over
        self.blobs = blobs
        self.keys = keys
        # Attributes, not properties (every step reads them): a codec is not reconfigured.
        self.encode_limit: Final = 1 << 62 if blobs is not None else max_payload
        """The largest JSON encoding a value may have: any size when values can be offloaded,
        else ``max_payload``."""
        self.plain: Final = blobs is None and keys is None
        """Whether values are stored as their JSON (escaped): no blob store and no keys, so a
        caller may skip :meth:`seal` and use :func:`escaped`."""

    async def seal(self, text: str, slot: Slot, *, offload: bool = True) -> str:
        """The text to store for a value whose JSON is ``text``. Raises ``BlobStoreError``
        when the blob store fails (nothing is stored then), ``InvalidPayloadError`` when the
        value is over ``max_payload`` and cannot be offloaded. ``offload=False``: kept in its
        row whatever its size (stream items, which their stream's bounds delete)."""
        body = escaped(text)
        blobs, keys = self.blobs if offload else None, self.keys
        if blobs is None and keys is None:
            return body
        size = len(body)
        # Over max_payload a value is offloaded too, whatever offload_over says.
        over = min(self.offload_over, self.max_payload)
        if blobs is not None and size * 4 > over:  # a character is 1 to 4 bytes
            data = body.encode()
            if len(data) > over:
                return await self._offload(blobs, data, slot)
        if size > self.max_payload and len(body.encode()) > self.max_payload:
            raise InvalidPayloadError(
                f"{slot.describe()} is over the limit of {self.max_payload:,} bytes; configure "
                "a blob store ([payloads.blobs]) to offload large values"
            )
        if keys is None:
            return body
        key_id, nonce, sealed = keys.encrypt(body.encode(), slot.associated())
        envelope = {ENC: {"k": key_id, "n": _b64(nonce), "c": _b64(sealed)}}
        return orjson.dumps(envelope).decode()

    async def _offload(self, blobs: BlobStore, data: bytes, slot: Slot) -> str:
        size = len(data)
        encrypted = self.keys is not None
        if self.keys is not None:
            data = self.keys.seal_blob(data, slot.associated())
        digest = hashlib.sha256(data).hexdigest()
        key = blob_prefix(slot.workflow, slot.instance_id) + digest
        await blobs.put(key, data)  # before the row that references it: never a dangling ref
        ref = {"store": blobs.url, "key": key, "size": size, "sha256": digest, "enc": encrypted}
        return orjson.dumps({BLOB: ref}).decode()

    def is_sealed(self, value: Any) -> bool:
        """Whether a decoded stored value is an envelope that :meth:`open` must open."""
        return envelope_kind(value) is not None

    async def open(self, value: Any, slot: Slot) -> Any:
        """The value a decoded stored value holds: itself when plain; decrypted, fetched (and
        checked against its size and hash) or unescaped when an envelope."""
        kind = envelope_kind(value)
        if kind is None:
            return value
        if kind == ENC:
            return unescaped(loads(self._decrypt(value[ENC], slot)))
        if kind == BLOB:
            return unescaped(loads(await self._fetch(value[BLOB], slot)))
        return unescaped(value)

    def _decrypt(self, record: Any, slot: Slot) -> bytes:
        where = slot.describe()
        if self.keys is None:
            key_id = record.get("k") if isinstance(record, dict) else None
            raise PayloadKeyError(
                f"{where} is encrypted (key {key_id!r}) but no [encryption] keys are configured"
            )
        try:
            nonce, sealed = base64.b64decode(record["n"]), base64.b64decode(record["c"])
            key_id = str(record["k"])
        except (KeyError, TypeError, binascii.Error):
            raise PayloadKeyError(f"{where} is a malformed encrypted record") from None
        return self.keys.decrypt(key_id, nonce, sealed, slot.associated(), where)

    async def _fetch(self, ref: Any, slot: Slot) -> bytes:
        where = slot.describe()
        if self.blobs is None:
            raise BlobStoreError(
                f"{where} is offloaded to {ref.get('store')!r} but no blob store is configured "
                "([payloads.blobs] url)"
            )
        key = str(ref["key"])
        data = await self.blobs.get(key)
        if hashlib.sha256(data).hexdigest() != ref["sha256"]:
            raise BlobStoreError(
                f"blob store {self.blobs.url}: blob {key!r} of {where} does not match its hash"
            )
        if ref.get("enc"):
            if self.keys is None:
                raise PayloadKeyError(f"{where} is an encrypted blob but no keys are configured")
            data = self.keys.open_blob(data, slot.associated(), where)
        return data

    async def forget(self, instances: Iterable[tuple[str, str]]) -> None:
        """Delete the blobs of deleted instances, ``(workflow, instance id)`` each, right after
        their rows (no-op without a blob store). A blob store that fails is logged, not raised:
        the rows are gone, and the orphan sweep deletes what is left after its grace period."""
        blobs = self.blobs
        if blobs is None:
            return
        for workflow, instance_id in instances:
            try:
                entries = await blobs.list_blobs(blob_prefix(workflow, instance_id))
                if entries:
                    await blobs.delete([entry.key for entry in entries])
            except BlobStoreError as exc:
                log.warning(
                    "the blobs of deleted instance %s/%s are left to the orphan sweep: %s",
                    workflow, instance_id, exc,
                )  # fmt: skip

    async def close(self) -> None:
        if self.blobs is not None:
            await self.blobs.close()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


PLAIN = PayloadCodec()
"""The codec of an engine with no blobs and no keys (escaping only)."""
