"""One trace across worker processes: an instance created here, begun by a worker that is
killed (SIGKILL) in a step, resumed by another worker; each worker set up OpenTelemetry's SDK
in its own code, and stepline traced because a tracer provider was configured."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepline import Engine
from stepline.telemetry import Telemetry

from ._project import Project, wait_until
from ._spans import Recorder, from_json_lines

pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    made = Project(tmp_path)
    yield made
    made.kill_all()


async def test_one_trace_across_two_workers_a_sigkill_and_a_resume(project: Project) -> None:
    recorder = Recorder()
    telemetry = Telemetry(tracer_provider=recorder.provider)
    async with Engine(project.url, worker=False, telemetry=telemetry) as engine:
        first = project.start("worker", spans=True)
        wait_until(lambda: (project.root / "stepline.db").exists(), what="the database")
        wait_until(lambda: "started for" in first.log.read_text(), what="worker 1")  # type: ignore[attr-defined]
        instance = await engine.workflow("relay").create("r1")
        wait_until(lambda: (project.marks / "blocked").exists(), what="the blocking step")
        await _until_running(engine, "block")
        first.kill()  # SIGKILL, in step 'block', its running record written
        first.wait(timeout=10)
        second = project.start("worker", spans=True)
        status = await instance.wait(timeout=60)
        assert status.status == "complete" and status.output == 2
        project.stop(second)
    create = recorder.one("create relay")
    killed = from_json_lines(project.spans.glob(f"spans-{first.pid}.jsonl"))
    resumed = from_json_lines(project.spans.glob(f"spans-{second.pid}.jsonl"))
    assert {s.trace_id for s in killed + resumed} == {create.trace_id}
    # The killed worker ended its first step's span; its activation's never ended.
    assert [s.name for s in killed] == ["step one"]
    (lost_run,) = {s.parent_id for s in killed}
    (run,) = [s for s in resumed if s.name == "run relay"]
    assert run.parent_id == create.span_id and run.span_id != lost_run
    assert run.outcome == "complete"
    (block,) = [s for s in resumed if s.name == "step block"]
    assert block.parent_id == run.span_id and block.outcome == "success"
    assert block.attributes["workflow.step.attempt"] == 2  # the first was interrupted
    assert [s.name for s in resumed if s.parent_id == run.span_id] == ["step block", "step two"]


async def _until_running(engine: Engine, step: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        steps = await (await engine.get_instance("relay", "r1")).steps()
        if any(s.name == step and s.status == "running" for s in steps):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"step {step!r} was never recorded running")
