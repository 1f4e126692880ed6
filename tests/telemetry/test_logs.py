"""JSON logs: ``stepline worker --log-format json`` writes one JSON object per line, with the
instance, step, attempt and trace ids where they apply; the application's own loggers get the
same ids through :class:`~stepline.telemetry.LogContextFilter`."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stepline import Engine, ManualClock, StepContext, Workflow, WorkflowEvent, WorkflowStep
from stepline.telemetry import JsonFormatter, LogContextFilter, Telemetry

from ..conftest import EngineFactory, drain
from ._project import Project, wait_until
from ._spans import Recorder, from_json_lines


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    made = Project(tmp_path)
    yield made
    made.kill_all()


@pytest.mark.slow
async def test_a_worker_logs_one_json_object_per_line_with_the_ids(project: Project) -> None:
    worker = project.start("worker", "--log-format", "json", spans=True)
    wait_until(lambda: "started for" in worker.log.read_text(), what="the worker")  # type: ignore[attr-defined]
    async with Engine(project.url, worker=False) as engine:
        instance = await engine.workflow("batch").create("j1")
        assert (await instance.wait(timeout=60)).status == "complete"
    text = project.stop(worker)
    lines = [json.loads(line) for line in text.splitlines()]  # every line is one JSON object
    assert all({"timestamp", "level", "logger", "message"} <= set(line) for line in lines)
    assert any("started for batch" in line["message"] for line in lines)
    about = [line for line in lines if line.get("instance_id") == "j1"]
    assert about and all(line["workflow"] == "batch" for line in about)
    assert any(line["message"].endswith("-> complete") for line in about)
    in_step = [line for line in about if line.get("step") == "work-1"]
    assert in_step and all(line["attempt"] == 1 for line in in_step)
    (run,) = [s for s in from_json_lines(project.spans.glob("*.jsonl")) if s.name == "run batch"]
    assert {line["trace_id"] for line in about} == {run.trace_id}
    assert lines[0]["timestamp"].endswith("+00:00")
    # The application's logger, its own format, stepline's ids through the filter.
    (own,) = (project.marks / "flows.log").read_text().splitlines()
    assert own == f"j1 work-1 1 {run.trace_id} working on j1"


def _step_logs(ctx: StepContext) -> None:
    logging.getLogger("app").info("inside %s", ctx.step_name)


class Logs(Workflow):
    name = "logs"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("sync", _step_logs)  # in a thread

        async def in_loop(ctx: StepContext) -> None:
            logging.getLogger("app").info("inside %s", ctx.step_name)

        await step.do("async", in_loop)
        logging.getLogger("app").info("between steps")


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[dict[str, Any]] = []
        self.setFormatter(JsonFormatter())
        self.addFilter(LogContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


async def test_the_log_context_reaches_sync_and_async_steps_and_leaves_after(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    capture = Capture()
    logger = logging.getLogger("app")
    logger.addHandler(capture)
    logger.setLevel(logging.INFO)
    recorder = Recorder()
    telemetry = Telemetry(log_context=True, tracer_provider=recorder.provider)
    try:
        async with make_engine([Logs], clock=clock, telemetry=telemetry) as engine:
            await engine.workflow("logs").create("l1")
            await drain(engine)
            logger.info("outside")
    finally:
        logger.removeHandler(capture)
    sync, in_loop, between, outside = capture.lines
    steps = {s.name: s for s in recorder.spans()}
    for line, name in ((sync, "sync"), (in_loop, "async")):
        assert (line["instance_id"], line["step"], line["attempt"]) == ("l1", f"{name}-1", 1)
        assert line["span_id"] == steps[f"step {name}"].span_id
    assert between["instance_id"] == "l1" and "step" not in between
    assert between["span_id"] == steps["run logs"].span_id
    assert "instance_id" not in outside and "trace_id" not in outside


async def test_without_the_log_context_the_filter_adds_nothing(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    capture = Capture()
    logger = logging.getLogger("app")
    logger.addHandler(capture)
    try:
        async with make_engine([Logs], clock=clock) as engine:
            assert engine.observer is None
            await engine.workflow("logs").create("l2")
            await drain(engine)
    finally:
        logger.removeHandler(capture)
    assert capture.lines and all("instance_id" not in line for line in capture.lines)
