"""Metrics in one process, parsed with prometheus-client's own parser: every metric that
docs/observability.md lists is exposed with exactly its labels once its events happened (a
cron tick, a queue message, a takeover, a limit holding instances, a store error), and the
fleet's gauges read the store."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from stepline import (
    Engine,
    ManualClock,
    Schedule,
    StoreUnavailableError,
    Workflow,
    WorkflowEvent,
    WorkflowStep,
)
from stepline.store.base import StepWrite
from stepline.telemetry import Telemetry
from stepline.triggers import QueueTrigger
from stepline.triggers.queues import Consumer

from ..brokers import _redis
from ..conftest import EngineFactory, drain
from ..triggers.conftest import stream  # noqa: F401 - the fixture

DOC = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text("utf-8")
ROW = re.compile(r"^\| `(stepline_[a-z_]+)` \| (counter|gauge|histogram) \|([^|]*)\|", re.M)


def documented() -> dict[str, tuple[str, set[str]]]:
    """The metric table of docs/observability.md: name -> (type, labels)."""
    return {
        name: (kind, set(re.findall(r"`([a-z_]+)`", labels)))
        for name, kind, labels in ROW.findall(DOC)
    }


class Ticking(Workflow):
    name = "ticking"
    schedules = (Schedule("* * * * *", name="every-minute"),)

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("tick", lambda: 1)


class Limited(Workflow):
    name = "limited"
    concurrency = 1

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("work", lambda: 1)


class Echo(Workflow):
    name = "echo"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("echo", lambda: event.payload)


def families(text: str) -> dict[str, tuple[str, list[Sample]]]:
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(text)}


@pytest.mark.broker
async def test_every_documented_metric_is_exposed_with_its_labels(
    make_engine: EngineFactory,
    clock: ManualClock,
    stream: str,  # noqa: F811
) -> None:
    telemetry = Telemetry(metrics=True, fleet_ttl=0)
    async with make_engine([Ticking, Limited, Echo], clock=clock, telemetry=telemetry) as engine:
        worker = engine.worker
        await engine.workflow("echo").create("e1", {"n": 1})
        await drain(engine)
        # A cron tick, fired by the scheduler.
        await engine.scheduler.sync()
        clock.advance(61)
        assert await engine.scheduler.run_once(engine.now())
        # A queue message, consumed into an instance.
        broker = _redis.make(stream)
        await broker.connect()
        await broker.publish(b'{"n": 2}', message_id="m1")
        await broker.close()
        consumer = Consumer(engine, QueueTrigger(broker=_redis.URL, queue=stream, workflow="echo"))
        assert await consumer.run_once(0.5) == 1
        await consumer.close()
        assert telemetry.metrics is not None
        telemetry.metrics.watch_consumers([consumer])
        # A takeover: a worker that died in a step, its lease expired.
        await engine.workflow("echo").create("lost", {"n": 3})
        (gone,) = (await engine.store.claim("dead-worker", ["echo"], 1, 5.0, engine.now())).claims
        write = StepWrite("echo", 1, 1, "do", "running", started_at=engine.now())
        await engine.store.record_step(gone.lease, write, engine.now())
        clock.advance(10)
        await drain(engine)
        # A limit holding an instance: two of a workflow with concurrency 1, one running.
        await engine.workflow("limited").create_batch([{"id": "l1"}, {"id": "l2"}])
        (running,) = (await engine.store.claim("other", ["limited"], 5, 60.0, engine.now())).claims
        # A store error, as the worker's claim loop reports one.
        assert engine.observer is not None
        engine.observer.store_error("claim", StoreUnavailableError("the database is gone"))
        body, content_type = await telemetry.exposition()
        assert content_type.startswith("text/plain")
        exposed = families(body.decode())
        assert worker.active_count == 0
    wanted = documented()
    assert len(wanted) == 18
    for name, (kind, labels) in wanted.items():
        family = name.removesuffix("_total") if kind == "counter" else name
        assert family in exposed, f"{name} is documented but not exposed"
        exposed_kind, samples = exposed[family]
        assert exposed_kind == kind, name
        main = [s for s in samples if not s.name.endswith("_created")]
        assert main, name
        for sample in main:
            assert set(sample.labels) - {"le"} == labels, (name, sample)
    known = {n.removesuffix("_total") for n in wanted}
    # prometheus-client's _created timestamps parse as families of their own.
    undocumented = {
        n for n in exposed if n not in known and n.removesuffix("_created") not in known
    }
    assert not undocumented, f"exposed but not in docs/observability.md: {undocumented}"

    def value(name: str, **labels: str) -> float:
        for sample in exposed[name][1]:
            if sample.labels == labels and not sample.name.endswith(("_created", "_bucket")):
                return float(sample.value)
        raise AssertionError(f"no sample {name} {labels}")

    assert value("stepline_schedule_ticks", schedule="every-minute", outcome="fired") == 1
    assert value("stepline_queue_messages", trigger=stream, outcome="consumed") == 1
    assert value("stepline_lease_takeovers", workflow="echo") == 1
    assert value("stepline_store_errors", operation="claim", kind="unavailable") == 1
    assert value("stepline_instances_held", workflow="limited", limit="concurrency") == 1
    assert value("stepline_instances", workflow="limited", status="running") == 1
    assert value("stepline_instances", workflow="limited", status="queued") == 1
    assert value("stepline_backlog", workflow="limited") == 1
    assert value("stepline_backlog_oldest_age_seconds", workflow="limited") == 0
    assert value("stepline_instances_created", workflow="ticking", trigger="cron") == 1
    assert value("stepline_instances_created", workflow="echo", trigger=f"queue:{stream}") == 1
    assert running.instance.id == "l1"


def test_the_plain_engine_imports_neither_library(tmp_path: Path) -> None:
    """No import of OpenTelemetry or prometheus-client unless turned on (a fresh interpreter)."""
    code = (
        "import asyncio, sys\n"
        "from stepline import Engine, workflow\n"
        "@workflow(name='w')\n"
        "async def w(event, step):\n"
        "    return await step.do('s', lambda: 1)\n"
        "async def main():\n"
        f"    async with Engine('sqlite:///{tmp_path}/x.db', [w]) as engine:\n"
        "        i = await engine.workflow('w').create()\n"
        "        await i.wait(10)\n"
        "asyncio.run(main())\n"
        "extras = ('opentelemetry', 'prometheus_client')\n"
        "print([m for m in sys.modules if m.startswith(extras)])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


async def test_a_feature_without_its_library_names_the_extra(
    make_engine: EngineFactory, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "stepline.telemetry._metrics", raising=False)
    engine = Engine("sqlite:///:memory:", worker=False, telemetry=Telemetry(metrics=True))
    with pytest.raises(Exception, match=r"pip install 'stepline\[metrics\]'"):
        engine.observer  # noqa: B018
    await engine.close()


def test_the_grafana_dashboard_queries_only_documented_metrics() -> None:
    root = Path(__file__).resolve().parents[2]
    board = json.loads((root / "docs" / "grafana" / "stepline.json").read_text("utf-8"))
    exprs = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    used = {
        re.sub(r"_(bucket|sum|count)$", "", m)
        for e in exprs
        for m in re.findall(r"stepline_[a-z_]+", e)
    }
    assert used == set(documented()), used ^ set(documented())
