"""Encryption on both stores: a dump of the database holds no plaintext of params, results,
event payloads or outputs; keys rotate; a record of an unknown key fails clearly."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import stepline
from stepline import (
    Engine,
    ManualClock,
    PayloadKeyError,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
)
from stepline import workflow as workflow_decorator
from stepline.payloads import BlobsConfig, KeySource, PayloadConfig

from ..conftest import drain

KEYS = {
    "TEST_STEPLINE_K1": base64.b64encode(b"a" * 32).decode(),
    "TEST_STEPLINE_K2": base64.b64encode(b"b" * 32).decode(),
}
MARKERS = (
    "PARAMS-PLAINTEXT",
    "RESULT-PLAINTEXT",
    "EVENT-PLAINTEXT",
    "OUTPUT-PLAINTEXT",
    "STREAM-PLAINTEXT",
)


@workflow_decorator(name="secret")
async def secret(event: WorkflowEvent, step: WorkflowStep) -> Any:
    await step.publish("progress", {"s": "STREAM-PLAINTEXT"})
    result = await step.do("result", lambda: {"r": "RESULT-PLAINTEXT", "big": "z" * 3000})
    got = await step.wait_for_event("go", type="go", timeout="1 hour")
    return {"o": "OUTPUT-PLAINTEXT", "p": event.payload, "r": result["r"], "e": got.payload}


def config(*ids: str, blobs: Path | None = None) -> PayloadConfig:
    sources = tuple(KeySource(i, env=f"TEST_STEPLINE_{i.upper()}") for i in ids)
    return PayloadConfig(
        offload_over=1024,
        blobs=None if blobs is None else BlobsConfig(url=blobs.as_uri()),
        keys=sources,
        current_key=ids[0],
    )


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)


def dump(store_url: str) -> bytes:
    """Every byte the database holds: the SQLite files, or a pg_dump of the test's schema."""
    if store_url.startswith("sqlite:///"):
        path = Path(store_url[len("sqlite:///") :])
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())
    parts = urlsplit(store_url)
    schema = parse_qs(parts.query)["schema"][0]
    base = parts._replace(query="").geturl()
    return subprocess.run(
        ["pg_dump", "--no-owner", "-n", schema, base], check=True, capture_output=True
    ).stdout


async def test_a_dump_holds_no_plaintext(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    blobs = tmp_path / "blobs"
    payloads = config("k1", blobs=blobs)
    async with Engine(store_url, [secret], worker=False, clock=clock, payloads=payloads) as eng:
        instance = await eng.workflow("secret").create("s", {"p": "PARAMS-PLAINTEXT"})
        await drain(eng)
        await instance.send_event("go", {"e": "EVENT-PLAINTEXT"})
        await drain(eng)
        status = await instance.status()
        assert status.output == {
            "o": "OUTPUT-PLAINTEXT",
            "p": {"p": "PARAMS-PLAINTEXT"},
            "r": "RESULT-PLAINTEXT",
            "e": {"e": "EVENT-PLAINTEXT"},
        }
        assert [e.payload for e in await instance.events()] == [{"e": "EVENT-PLAINTEXT"}]
        (item,) = await instance.streams()
        assert item.value == {"s": "STREAM-PLAINTEXT"}
        read = await instance.read_stream("progress")
        assert [i.value for i in read.items] == [{"s": "STREAM-PLAINTEXT"}]
        async for followed in instance.subscribe("progress", follow=False):
            assert followed.value == {"s": "STREAM-PLAINTEXT"}
    data = dump(store_url) + b"".join(p.read_bytes() for p in blobs.rglob("*") if p.is_file())
    assert b"$enc" in data or b'"$blob"' in data  # the dump did read the rows
    for marker in MARKERS:
        assert marker.encode() not in data, marker


async def test_keys_rotate_and_an_unknown_key_fails_clearly(
    store_url: str, clock: ManualClock
) -> None:
    async with Engine(store_url, [secret], worker=False, clock=clock, payloads=config("k1")) as e:
        await e.workflow("secret").create("old", {"p": "PARAMS-PLAINTEXT"})
    rotated = config("k2", "k1")
    async with Engine(store_url, [secret], worker=False, clock=clock, payloads=rotated) as e:
        wf = e.workflow("secret")
        await wf.create("new", {"p": "new"})
        assert (await (await wf.get("old")).record()).params == {"p": "PARAMS-PLAINTEXT"}
        await drain(e)  # the old record runs under the rotated keys
        assert (await (await wf.get("old")).status()).status == "waiting"
        raw = await e.store.get_instance("secret", "new")
        assert raw.params["$enc"]["k"] == "k2"
    async with Engine(store_url, [secret], worker=False, clock=clock, payloads=config("k2")) as e:
        wf = e.workflow("secret")
        assert (await (await wf.get("new")).record()).params == {"p": "new"}
        with pytest.raises(PayloadKeyError) as info:
            await (await wf.get("old")).record()
        message = str(info.value)
        assert "the params of instance secret/old" in message
        assert "key 'k1', which is not configured" in message


async def test_a_missing_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from stepline import ConfigError

    monkeypatch.delenv("TEST_STEPLINE_K2")
    with pytest.raises(ConfigError, match="'k2': environment variable TEST_STEPLINE_K2 is not set"):
        Engine("sqlite:///:memory:", payloads=config("k2"))


class Tally(Workflow):
    """Sums its params' numbers in steps; a query replays the (encrypted) history."""

    name = "tally"

    def __init__(self) -> None:
        self.sum = 0

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        for n in event.payload["numbers"]:
            self.sum += await step.do(f"add {n}", lambda n=n: n)
        await step.wait_for_event("close", type="close", timeout="1 day")
        return self.sum

    @stepline.query
    def total(self) -> int:
        return self.sum


async def test_a_query_replays_an_encrypted_history(store_url: str, clock: ManualClock) -> None:
    async with Engine(store_url, [Tally], worker=False, clock=clock, payloads=config("k1")) as e:
        instance = await e.workflow("tally").create("t", {"numbers": [1, 2, 3]})
        await drain(e)
        raw = await e.store.get_steps("tally", "t")
        assert all("$enc" in step.output for step in raw if step.kind == "do")
        assert await instance.query("total") == 6


FLOWS = """
from stepline import workflow


@workflow(name="hello")
async def hello(event, step):
    return await step.do("greet", lambda: "hello " + event.payload["name"])
"""


def test_the_cli_reads_its_keys_from_stepline_toml(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(FLOWS, encoding="utf-8")
    (tmp_path / "k1.key").write_text(KEYS["TEST_STEPLINE_K1"], encoding="utf-8")
    (tmp_path / "stepline.toml").write_text(
        '[[workflows]]\nname = "hello"\nclass_name = "flows:hello"\n'
        '[encryption]\nkeys = [{id = "k1", file = "k1.key"}]\n',
        encoding="utf-8",
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stepline.cli", *args],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = cli("run", "hello", '{"name": "PLAINTEXT-NAME"}', "--id", "h1")
    assert done.returncode == 0, done.stderr
    shown = cli("workflows", "instances", "describe", "hello", "h1", "--json")
    assert shown.returncode == 0 and "hello PLAINTEXT-NAME" in shown.stdout, shown.stderr
    assert b"PLAINTEXT-NAME" not in dump(f"sqlite:///{tmp_path / 'stepline.db'}")
    (tmp_path / "k1.key").unlink()
    missing = cli("workflows", "instances", "describe", "hello", "h1")
    assert missing.returncode == 2
    assert f"encryption key 'k1': cannot read {tmp_path / 'k1.key'}" in missing.stderr


@workflow_decorator(name="checked")
async def checked(event: WorkflowEvent, step: WorkflowStep) -> Any:
    big = await step.do("big", lambda: "b" * 5000)  # offloaded and encrypted
    return await step.do("small", lambda: len(big) + len(event.payload["p"]))


async def test_replay_check_opens_sealed_histories(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    from stepline.testing import replay_check

    payloads = config("k1", blobs=tmp_path / "blobs")
    async with Engine(store_url, [checked], worker=False, clock=clock, payloads=payloads) as e:
        done = await e.workflow("checked").create("c", {"p": "PARAMS-PLAINTEXT"})
        await drain(e)
        assert (await done.status()).output == 5016
    # A complete instance's output compares with the replay's, both opened (not envelopes).
    report = await replay_check(store_url, [checked], payloads=payloads)
    assert report.ok and [r.id for r in report.results] == ["c"]
    with pytest.raises(PayloadKeyError, match=r"replay of checked/c: .* encrypted \(key 'k1'\)"):
        await replay_check(store_url, [checked])


MESSAGE_MARKERS = (
    "UPDATE-ARG-PLAINTEXT",
    "UPDATE-REPLY-PLAINTEXT",
    "QUERY-ARG-PLAINTEXT",
    "QUERY-ANSWER-PLAINTEXT",
)


class Vault(Workflow):
    """Keeps the notes its updates bring; a query searches them."""

    name = "vault"

    def __init__(self) -> None:
        self.notes: list[str] = []

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.wait_for_event("close", type="close", timeout="1 day")
        return len(self.notes)

    @stepline.query
    def find(self, word: str) -> list[str]:
        return [n for n in self.notes if word not in n] + ["QUERY-ANSWER-PLAINTEXT"]

    @stepline.update
    async def note(self, step: WorkflowStep, text: str) -> dict[str, Any]:
        self.notes.append(text)
        return {"reply": "UPDATE-REPLY-PLAINTEXT", "big": "y" * 3000}  # offloaded too


async def driven(eng: Engine, call: Any) -> Any:
    """``call``'s result, the engine's worker driven (its routed queries answered) meanwhile."""
    task = asyncio.create_task(asyncio.wait_for(call, 20))
    for _ in range(500):
        await drain(eng)
        await eng.worker.answer_queries_now()
        if task.done():
            break
        await asyncio.sleep(0.005)
    return await task


async def test_update_arguments_replies_and_routed_queries_are_encrypted(
    store_url: str, tmp_path: Path, clock: ManualClock
) -> None:
    blobs = tmp_path / "blobs"
    payloads = config("k1", blobs=blobs)
    async with Engine(store_url, [Vault], worker=False, clock=clock, payloads=payloads) as eng:
        instance = await eng.workflow("vault").create("v", {})
        await drain(eng)
        reply = {"reply": "UPDATE-REPLY-PLAINTEXT", "big": "y" * 3000}
        sent = instance.update("note", "UPDATE-ARG-PLAINTEXT", update_id="u1")
        assert await driven(eng, sent) == reply
        assert await instance.update("note", "again", update_id="u1") == reply  # recorded
        assert await instance.update_result("u1") == reply
        (marker,) = [s for s in await instance.steps() if s.kind == "update"]
        assert marker.output == reply and marker.info is not None
        assert marker.info["args"] == ["UPDATE-ARG-PLAINTEXT"]
        # The state the update left replays under the keys (it is read back to be answered).
        assert await instance.query("find", "nothing") == [
            "UPDATE-ARG-PLAINTEXT",
            "QUERY-ANSWER-PLAINTEXT",
        ]
        await eng.worker.beat_now()
        async with Engine(store_url, worker=False, clock=clock, payloads=payloads) as client:
            remote = await client.workflow("vault").get("v")
            asked = remote.query("find", "QUERY-ARG-PLAINTEXT", timeout=30)
            assert await driven(eng, asked) == ["UPDATE-ARG-PLAINTEXT", "QUERY-ANSWER-PLAINTEXT"]
        raw = await eng.store.get_steps("vault", "v")
        assert any("$blob" in str(s.output) for s in raw if s.kind == "update")
    data = dump(store_url) + b"".join(p.read_bytes() for p in blobs.rglob("*") if p.is_file())
    assert b"query_requests" in data or store_url.startswith("sqlite")
    for marker in MESSAGE_MARKERS:
        assert marker.encode() not in data, marker
