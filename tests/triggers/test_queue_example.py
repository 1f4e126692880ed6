"""examples/queue_documents.py runs for real against Redis: uploads publish, the consumer
creates one documents instance per upload (the retried publish included), each completes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ..brokers import _redis

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "queue_documents.py"


@pytest.mark.slow
def test_queue_documents_example(tmp_path: Path) -> None:
    stream = f"example-{uuid.uuid4().hex[:12]}"
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "STEPLINE_DATABASE_URL"}
    try:
        done = subprocess.run(
            [
                sys.executable,
                str(EXAMPLE),
                "--redis",
                _redis.URL,
                "--stream",
                stream,
                "--database",
                f"sqlite:///{tmp_path}/example.db",
                "--out",
                str(out),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        _redis.cleanup(stream)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    created = next(
        line for line in done.stdout.splitlines() if line.startswith("documents instances")
    )
    assert created.count("index-") == 3
    # Each upload's step published twice (it fails once after publishing): six messages.
    assert "messages handled: 6" in done.stdout
    notifications = sorted((out / "notifications").iterdir())
    assert len(notifications) == 3
    assert json.loads(notifications[0].read_text())["subject"] == "4 documents are ready to search"
