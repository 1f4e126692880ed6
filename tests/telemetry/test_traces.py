"""Traces in one process, read with the OpenTelemetry SDK's in-memory exporter: one trace per
instance through its activations, retries, waits, children and rollbacks; the caller's span,
an HTTP header and a queue message as parents; no span at all when tracing is off."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler

from stepline import Engine, ManualClock, StepContext, Workflow, WorkflowEvent, WorkflowStep
from stepline.http import create_app
from stepline.telemetry import Telemetry
from stepline.triggers import QueueTrigger, publish
from stepline.triggers.queues import Consumer

from ..brokers import _redis
from ..conftest import EngineFactory, drain
from ..triggers.conftest import stream  # noqa: F401 - the fixture
from ._spans import Recorder, Seen

failures: dict[str, int] = {}


def flaky(ctx: StepContext) -> str:
    """Fails its first attempt, then returns the span it ran in."""
    failures[ctx.instance_id] = failures.get(ctx.instance_id, 0) + 1
    if failures[ctx.instance_id] == 1:
        raise ConnectionError("the first attempt fails")
    return ctx.traceparent or ""


class Kid(Workflow):
    name = "kid"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return await step.do("grow", lambda: event.payload["n"] + 1)


class Traced(Workflow):
    name = "traced"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        seen = await step.do("flaky", {"retries": {"limit": 2, "delay": "1 second"}}, flaky)
        await step.sleep("nap", "1 minute")
        approval = await step.wait_for_event("approval", type="approve", timeout="1 hour")
        kid = await step.start_workflow("kid", {"n": approval.payload})
        grown = await step.wait_for_workflow("kid", kid, timeout="1 hour")
        return {"seen": seen, "grown": grown}


class Undone(Workflow):
    name = "undone"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        await step.do("book", lambda: 1, rollback=lambda: None)
        await step.do("pay", {"retries": {"limit": 0}}, _refuse)


def _refuse() -> None:
    raise ValueError("card refused")


def traced(recorder: Recorder) -> Telemetry:
    return traced_by(recorder.provider)


def traced_by(provider: TracerProvider) -> Telemetry:
    return Telemetry(tracer_provider=provider)


async def _run_traced(engine: Engine, clock: ManualClock) -> None:
    failures.clear()
    instance = await engine.workflow("traced").create("t1")
    await drain(engine)  # the first attempt fails
    clock.advance(1)
    await drain(engine)  # the retry, then the nap
    clock.advance(60)
    await drain(engine)  # waits for the event
    await instance.send_event("approve", 41)
    await drain(engine)  # starts the kid and waits for it; the kid runs; the parent ends
    assert (await instance.status()).output["grown"] == 42


async def test_an_instance_is_one_trace_through_its_activations_steps_and_waits(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    recorder = Recorder()
    async with make_engine([Traced, Kid], clock=clock, telemetry=traced(recorder)) as engine:
        await _run_traced(engine, clock)
    spans = recorder.spans()
    create = recorder.one("create traced")
    assert create.parent_id is None and create.attributes["workflow.trigger"] == "api"
    assert {s.trace_id for s in spans} == {create.trace_id}  # the kid's too
    runs = recorder.named("run traced")  # how many: the engine's business (4 or 5)
    assert len(runs) >= 4 and {r.parent_id for r in runs} == {create.span_id}
    assert [r.outcome for r in runs] == ["waiting"] * (len(runs) - 1) + ["complete"]
    run_ids = {r.span_id for r in runs}
    assert all(r.attributes["workflow.instance.id"] == "t1" for r in runs)
    first, retry = recorder.named("step flaky")
    assert (first.outcome, first.status, first.attributes["error.type"]) == (
        "retry", "ERROR", "ConnectionError",
    )  # fmt: skip
    assert "exception" in first.events
    assert (retry.outcome, retry.status, retry.attributes["workflow.step.attempt"]) == (
        "success", "UNSET", 2,
    )  # fmt: skip
    assert first.parent_id == runs[0].span_id and retry.parent_id == runs[1].span_id
    # The step saw its own span's trace context.
    output = (await _output(make_engine, clock, "traced", "t1"))["seen"]
    assert output.startswith(f"00-{retry.trace_id}-{retry.span_id}-")
    nap = recorder.one("sleep")
    assert (nap.parent_id, nap.end - nap.start) == (runs[1].span_id, pytest.approx(60.0))
    wait = recorder.one("wait_for_event")
    assert wait.outcome == "received" and wait.parent_id in run_ids
    kid_run = recorder.one("run kid")
    assert kid_run.parent_id == wait.parent_id  # the activation that started it
    assert recorder.one("step grow").parent_id == kid_run.span_id
    child_wait = recorder.one("wait_for_workflow")
    assert (child_wait.outcome, child_wait.parent_id) == ("complete", runs[-1].span_id)


async def _output(make_engine: EngineFactory, clock: ManualClock, workflow: str, id_: str) -> Any:
    async with make_engine([], clock=clock) as engine:
        return (await (await engine.get_instance(workflow, id_)).status()).output


async def test_a_failed_instance_records_its_error_and_its_rollbacks(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    recorder = Recorder()
    async with make_engine([Undone], clock=clock, telemetry=traced(recorder)) as engine:
        await engine.workflow("undone").create("u1")
        await drain(engine)
    run = recorder.one("run undone")
    assert (run.outcome, run.status, run.attributes["error.type"]) == (
        "errored", "ERROR", "ValueError",
    )  # fmt: skip
    pay = recorder.one("step pay")
    assert (pay.outcome, pay.attributes["error.type"]) == ("failed", "ValueError")
    rollback = recorder.one("rollback undone")
    assert (rollback.outcome, rollback.parent_id) == ("complete", run.span_id)
    assert recorder.one("step book:rollback").parent_id == rollback.span_id


class Instrumented(Workflow):
    """Steps that open spans of their own, as an instrumented library would."""

    name = "instrumented"
    tracer: Any = None

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        async def query() -> int:
            with Instrumented.tracer.start_as_current_span("query"):
                return 1

        def call() -> int:  # a sync step: in a step thread
            with Instrumented.tracer.start_as_current_span("call"):
                return 2

        return await step.do("query", query) + await step.do("call", call)


async def test_a_steps_own_spans_are_children_of_its_attempts_span(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    recorder = Recorder()
    Instrumented.tracer = recorder.provider.get_tracer("the application")
    async with make_engine([Instrumented], clock=clock, telemetry=traced(recorder)) as engine:
        await engine.workflow("instrumented").create("i1")
        await drain(engine)
    run = recorder.one("run instrumented")
    for step, own in (("step query", "query"), ("step call", "call")):
        attempt = recorder.one(step)
        assert attempt.parent_id == run.span_id
        assert recorder.one(own).parent_id == attempt.span_id


class Asked(Sampler):
    """OpenTelemetry's default sampler, dropping every trace, that counts what it was asked."""

    def __init__(self) -> None:
        self.inner = ParentBased(ALWAYS_OFF)
        self.asked: list[str] = []

    def should_sample(self, parent_context: Any, trace_id: int, name: str, *args: Any) -> Any:
        self.asked.append(name)
        return self.inner.should_sample(parent_context, trace_id, name, *args)

    def get_description(self) -> str:
        return "Asked"


def seen_in(ctx: StepContext) -> str:
    return ctx.traceparent or ""


class Sampled(Workflow):
    name = "sampled"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        return [await step.do(f"s{n}", seen_in) for n in range(3)]


async def test_an_activation_the_sampler_dropped_makes_no_span_for_its_steps(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    sampler = Asked()
    provider = TracerProvider(sampler=sampler)
    async with make_engine([Sampled], clock=clock, telemetry=traced_by(provider)) as engine:
        instance = await engine.workflow("sampled").create("s1")
        await drain(engine)
        seen = (await instance.status()).output
    assert sampler.asked == ["create sampled", "run sampled"]  # not a step's
    # A step still passes the trace on, not sampled, as the span it runs in.
    fields = [traceparent.split("-") for traceparent in seen]
    assert len({trace_id for _, trace_id, _, _ in fields}) == 1
    assert all(int(flags, 16) & 1 == 0 for *_, flags in fields)  # W3C's sampled flag


async def test_a_create_continues_the_callers_span(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    recorder = Recorder()
    tracer = recorder.provider.get_tracer("the caller")
    async with make_engine([Kid], clock=clock, telemetry=traced(recorder)) as engine:
        with tracer.start_as_current_span("handle request") as request:
            await engine.workflow("kid").create_batch([{"params": {"n": n}} for n in range(3)])
        await drain(engine)
    create = recorder.one("create kid")
    assert create.parent_id == f"{request.get_span_context().span_id:016x}"
    assert create.attributes["workflow.trigger"] == "api"
    runs = recorder.named("run kid")
    assert len(runs) == 3 and {r.parent_id for r in runs} == {create.span_id}


async def test_no_span_at_all_when_tracing_is_off(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    recorder = Recorder()
    off = Telemetry(traces=False, tracer_provider=recorder.provider)
    async with make_engine([Traced, Kid], clock=clock, telemetry=off) as engine:
        assert engine.observer is None  # nothing observes: the runtime's is-None paths
        await _run_traced(engine, clock)
    assert recorder.spans() == []


async def test_by_default_an_engine_traces_only_under_a_configured_provider(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    # No global tracer provider is set in the test process: the default is off.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    async with make_engine([Kid], clock=clock) as engine:
        assert engine.observer is None
    forced = Telemetry(traces=True)  # on, through the global (proxy) provider: nothing records
    async with make_engine([Kid], clock=clock, telemetry=forced) as engine:
        assert engine.observer is not None
        instance = await engine.workflow("kid").create("k", {"n": 1})
        await drain(engine)
        assert (await instance.status()).output == 2
        assert (await instance.record()).traceparent is None  # no valid span to store


async def test_the_http_api_continues_a_traceparent_header_and_ignores_a_bad_one(
    make_engine: EngineFactory, clock: ManualClock
) -> None:
    recorder = Recorder()
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with make_engine([Kid], clock=clock, telemetry=traced(recorder)) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for header in (caller, "00-not-a-traceparent"):
                response = await client.post(
                    "/api/workflows/kid/instances",
                    json={"params": {"n": 1}},
                    headers={"traceparent": header},
                )
                assert response.status_code == 201
    good, bad = recorder.named("create kid")
    assert (good.trace_id, good.parent_id) == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
    )
    assert good.attributes["workflow.trigger"] == "http"
    assert bad.parent_id is None and bad.trace_id != good.trace_id


class Producer(Workflow):
    name = "producer"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> Any:
        async def send(ctx: StepContext) -> str:
            return await publish(ctx, _redis.URL, event.payload["stream"], {"n": 1})

        return await step.do("send", send)


@pytest.mark.broker
async def test_a_queue_message_carries_the_trace_from_publish_to_the_consumers_instance(
    make_engine: EngineFactory,
    clock: ManualClock,
    stream: str,  # noqa: F811
) -> None:
    recorder = Recorder()
    async with make_engine([Producer, Kid], clock=clock, telemetry=traced(recorder)) as engine:
        await engine.workflow("producer").create("p1", {"stream": stream})
        await drain(engine)
        consumer = Consumer(engine, QueueTrigger(broker=_redis.URL, queue=stream, workflow="kid"))
        try:
            assert await consumer.run_once(0.5) == 1
        finally:
            await consumer.close()
        await drain(engine)
    send = recorder.one("step send")
    create = recorder.one("create kid")
    assert create.trace_id == send.trace_id == recorder.one("create producer").trace_id
    assert create.parent_id == send.span_id
    assert create.attributes["workflow.trigger"].startswith("queue")
    assert recorder.one("run kid").parent_id == create.span_id


def test_spans_are_seen_as_written(caplog: pytest.LogCaptureFixture) -> None:
    """The helper reads what the SDK ended (a guard on the helper itself)."""
    recorder = Recorder()
    with recorder.provider.get_tracer("t").start_as_current_span("x"):
        logging.getLogger("t").info("inside")
    (span,) = recorder.spans()
    assert isinstance(span, Seen) and span.name == "x" and span.parent_id is None
