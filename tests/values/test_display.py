"""Typed values as the CLI, the HTTP API and the Cloudflare API show them: plain JSON, a
datetime as ISO text, bytes as a size and a prefix (docs/data.md)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import uuid

import orjson
import pytest

from stepline.cli._common import print_json
from stepline.cli._render import json_text
from stepline.http.cloudflare.shapes import step_json
from stepline.http.errors import JsonResponse
from stepline.records import StepRecord

AT = datetime.datetime(2026, 12, 7, 10, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))


@dataclasses.dataclass
class Receipt:
    at: datetime.datetime
    scan: bytes


VALUE = {"receipt": Receipt(AT, b"\x89PNG" + bytes(12 * 1024)), "ids": (uuid.UUID(int=1),)}
SHOWN = {
    "receipt": {"at": "2026-12-07T10:00:00+01:00", "scan": "<bytes 12 KiB: 89504e47…>"},
    "ids": ["00000000-0000-0000-0000-000000000001"],
}


def test_the_cli_shows_typed_values_readably(capsys: pytest.CaptureFixture[str]) -> None:
    assert orjson.loads(json_text(VALUE)) == SHOWN
    print_json({"output": VALUE})
    assert json.loads(capsys.readouterr().out) == {"output": SHOWN}


def test_the_http_apis_show_typed_values_readably() -> None:
    assert orjson.loads(JsonResponse({"answer": VALUE}).body) == {"answer": SHOWN}
    record = StepRecord("scan", 1, 1, "do", "complete", output=VALUE, started_at=1.0, ended_at=2.0)
    assert record.to_json()["output"] == SHOWN
    assert step_json(record)["output"] == SHOWN
