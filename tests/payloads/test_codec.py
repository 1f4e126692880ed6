"""The payload codec alone: envelopes told apart from plain values, encryption bound to its slot,
key rotation and unknown keys, offload with its hash check, and the configuration's errors."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from stepline import BlobStoreError, ConfigError, InvalidPayloadError, PayloadKeyError
from stepline.payloads import (
    FileBlobStore,
    KeyRing,
    KeySource,
    PayloadCodec,
    Slot,
    parse_size,
)

SLOT = Slot("wf", "id-1", "params")
K1 = base64.b64encode(b"1" * 32).decode()
K2 = bytes(range(32)).hex()


def ring(*ids: str, current: str | None = None) -> KeyRing:
    keys = {"k1": base64.b64decode(K1), "k2": bytes.fromhex(K2)}
    return KeyRing({i: keys[i] for i in ids}, current or ids[0])


def files(root: Path) -> list[bytes]:
    return [p.read_bytes() for p in root.rglob("*") if p.is_file()]


async def roundtrip(codec: PayloadCodec, value: Any, slot: Slot = SLOT) -> tuple[str, Any]:
    stored = await codec.seal(orjson.dumps(value).decode(), slot)
    return stored, await codec.open(orjson.loads(stored), slot)


LOOK_ALIKES: list[Any] = [
    {"$enc": {"k": "k1", "n": "", "c": ""}},
    {"$blob": {"key": "x"}},
    {"$esc": 1},
    {"$esc": {"$esc": 2}},
    {"$other": 1},
    {"$enc": 1, "more": 2},
    ["$enc"],
    "$enc",
]


@pytest.mark.parametrize("value", LOOK_ALIKES)
async def test_user_values_like_envelopes_read_back_equal(value: Any, tmp_path: Path) -> None:
    for codec in (
        PayloadCodec(),
        PayloadCodec(keys=ring("k1")),
        PayloadCodec(blobs=FileBlobStore(tmp_path), offload_over=10),
    ):
        _, back = await roundtrip(codec, value)
        assert back == value


async def test_plain_codec_stores_plain_values_unchanged() -> None:
    codec = PayloadCodec()
    text = orjson.dumps({"a": [1, 2]}).decode()
    assert await codec.seal(text, SLOT) == text
    # Rows written before payload codecs existed read as they are.
    assert await codec.open({"a": [1, 2]}, SLOT) == {"a": [1, 2]}


async def test_encrypted_record_names_its_key_and_holds_no_plaintext() -> None:
    codec = PayloadCodec(keys=ring("k1"))
    stored, back = await roundtrip(codec, {"secret": "hunter2"})
    assert back == {"secret": "hunter2"}
    assert "hunter2" not in stored
    assert orjson.loads(stored)["$enc"]["k"] == "k1"


async def test_a_record_moved_to_another_slot_fails_authentication() -> None:
    codec = PayloadCodec(keys=ring("k1"))
    stored, _ = await roundtrip(codec, "value")
    with pytest.raises(PayloadKeyError, match="fails authentication with key 'k1'"):
        await codec.open(orjson.loads(stored), Slot("wf", "id-2", "params"))


async def test_rotation_reads_old_records_and_writes_with_the_current_key() -> None:
    old = PayloadCodec(keys=ring("k1"))
    stored, _ = await roundtrip(old, "before")
    rotated = PayloadCodec(keys=ring("k2", "k1", current="k2"))
    assert await rotated.open(orjson.loads(stored), SLOT) == "before"
    new, _ = await roundtrip(rotated, "after")
    assert orjson.loads(new)["$enc"]["k"] == "k2"
    without_k1 = PayloadCodec(keys=ring("k2"))
    with pytest.raises(PayloadKeyError, match="key 'k1', which is not configured"):
        await without_k1.open(orjson.loads(stored), SLOT)
    with pytest.raises(PayloadKeyError, match="no \\[encryption\\] keys are configured"):
        await PayloadCodec().open(orjson.loads(stored), SLOT)


async def test_offload_keeps_a_small_reference_and_checks_the_hash(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    codec = PayloadCodec(blobs=store, offload_over=1000)
    value = "x" * 5000
    stored, back = await roundtrip(codec, value)
    assert back == value and len(stored) < 400
    ref = orjson.loads(stored)["$blob"]
    assert ref["size"] == 5002 and ref["key"].startswith("wf/id-1/")
    # Small values stay inline.
    small, _ = await roundtrip(codec, "small")
    assert small == '"small"'
    # An altered blob is refused, never returned.
    (tmp_path / "blobs" / ref["key"]).write_bytes(b'"y"')
    with pytest.raises(BlobStoreError, match="does not match its hash"):
        await codec.open(orjson.loads(stored), SLOT)
    (tmp_path / "blobs" / ref["key"]).unlink()
    with pytest.raises(BlobStoreError, match="is missing"):
        await codec.open(orjson.loads(stored), SLOT)


async def test_offloaded_blobs_are_encrypted_too(tmp_path: Path) -> None:
    codec = PayloadCodec(blobs=FileBlobStore(tmp_path), offload_over=100, keys=ring("k1"))
    stored, back = await roundtrip(codec, "secret-" * 100)
    assert back == "secret-" * 100
    (blob,) = files(tmp_path)
    assert b"secret" not in blob and "secret" not in stored


async def test_over_max_payload_a_value_is_offloaded_whatever_offload_over(
    tmp_path: Path,
) -> None:
    codec = PayloadCodec(max_payload=100, offload_over=10_000, blobs=FileBlobStore(tmp_path))
    stored, back = await roundtrip(codec, "x" * 200)
    assert back == "x" * 200 and "$blob" in stored


async def test_without_a_blob_store_the_limit_refuses_large_values() -> None:
    codec = PayloadCodec(max_payload=100, keys=ring("k1"))
    with pytest.raises(InvalidPayloadError, match="over the limit of 100 bytes"):
        await codec.seal(orjson.dumps("x" * 200).decode(), SLOT)


def test_keys_come_from_the_environment_or_a_file(tmp_path: Path) -> None:
    key_file = tmp_path / "k2"
    key_file.write_text(K2 + "\n")
    sources = [KeySource("k1", env="TEST_KEY_K1"), KeySource("k2", file=key_file)]
    keys = KeyRing.load(sources, "k2", {"TEST_KEY_K1": K1})
    assert keys.current == "k2"
    with pytest.raises(ConfigError, match="'k1': environment variable TEST_KEY_K1 is not set"):
        KeyRing.load(sources, "k2", {})
    with pytest.raises(ConfigError, match=f"'k2': cannot read {tmp_path / 'nope'}"):
        KeyRing.load([KeySource("k2", file=tmp_path / "nope")], "k2", {})
    with pytest.raises(ConfigError, match="environment variable TEST_KEY_K1 is not a 256-bit"):
        KeyRing.load(sources, "k2", {"TEST_KEY_K1": "short"})


def test_a_key_source_names_one_place() -> None:
    with pytest.raises(ConfigError, match="exactly one of env"):
        KeySource("k1")
    with pytest.raises(ConfigError, match="exactly one of env"):
        KeySource("k1", env="A", file=Path("b"))


def test_sizes() -> None:
    assert parse_size("256 KiB", what="x") == 256 * 1024
    assert parse_size("2MB", what="x") == 2_000_000
    assert parse_size(10, what="x") == 10
    for bad in ("lots", 0, -1, True, "3 parsecs"):
        with pytest.raises(ValueError, match="offload_over must be a size"):
            parse_size(bad, what="offload_over")


CONFIGS: list[tuple[str, str]] = [
    ("[payloads]\noffload_over = 'big'", "key 'payloads.offload_over'"),
    ("[payloads]\nmore = 1", "unknown key 'payloads.more'"),
    ("[payloads]\nsweep_grace = 'soon'", "key 'payloads.sweep_grace'"),
    ("[payloads.blobs]\nurl = 'ftp://x'", "url 'ftp://x' is not supported"),
    ("[payloads.blobs]\nurl = 'file://relative'", "must be absolute"),
    ("[encryption]\nkeys = []", "key 'encryption.keys' must be a list"),
    ("[encryption]\nkeys = [{id = 'k1'}]", "key 'encryption.keys[0]' must name exactly one"),
    (
        "[encryption]\nkeys = [{id = 'k1', env = 'A', file = 'b'}]",
        "key 'encryption.keys[0]' must name exactly one",
    ),
    ("[encryption]\nkeys = [{id = 'k1', env = 'A'}]\ncurrent = 'k9'", "'k9' is not among"),
    ("[encryption]\nkeys = [{id = 'k1', env = 'NOT_SET_ANYWHERE_K1'}]", "NOT_SET_ANYWHERE_K1"),
]


@pytest.mark.parametrize(("toml", "message"), CONFIGS)
def test_bad_configuration_names_the_key(tmp_path: Path, toml: str, message: str) -> None:
    from stepline import Engine
    from stepline.project import load_project

    (tmp_path / "stepline.toml").write_text(toml + "\n")
    with pytest.raises(ConfigError, match=message.replace("[", "\\[").replace("]", "\\]")):
        project = load_project(tmp_path, environ={})
        Engine(project.database, payloads=project.payloads)


def test_configuration_reads_into_the_engine(tmp_path: Path) -> None:
    from stepline import Engine
    from stepline.project import load_project

    (tmp_path / "key").write_text(K1)
    (tmp_path / "stepline.toml").write_text(
        "[payloads]\noffload_over = '1 KiB'\n[payloads.blobs]\n"
        "[encryption]\nkeys = [{id = 'k2', env = 'TEST_K2'}, {id = 'k1', file = 'key'}]\n"
        "current = 'k2'\n"
    )
    project = load_project(tmp_path, environ={})
    os.environ["TEST_K2"] = K2
    try:
        engine = Engine(project.database, payloads=project.payloads)
    finally:
        del os.environ["TEST_K2"]
    codec = engine.payloads
    assert codec.offload_over == 1024 and codec.keys is not None and codec.keys.current == "k2"
    assert isinstance(codec.blobs, FileBlobStore)
    assert codec.blobs.root == tmp_path / "stepline.db.blobs"
