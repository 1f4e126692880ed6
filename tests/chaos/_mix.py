"""The workflow mix of the process-crash scenario, its expected outcomes and its event sender.

Worker processes register :data:`WORKFLOWS` (``python -m tests._procs --workflows
tests.chaos._mix``). Every step callback and rollback notes its execution in the side-effect
ledger of ``tests/_procs.py`` (``S`` / ``E`` lines with a random token) and returns the token, or
puts it in the message of the error it raises, so the check can tell which execution produced
each recorded attempt. Everything a workflow does is decided by its params, so
:func:`expect` derives the outcome of an instance from its params alone.

The event sender runs as a process of its own: ``python -m tests.chaos._mix --url URL --plan
PLAN --out SENT``. It sends the planned events at their times and appends one line to ``SENT``
per event once ``send_event`` has returned (the event is then acknowledged, hence durable).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stepline import (
    Dag,
    Engine,
    InstanceNotFoundError,
    NonRetryableError,
    StepContext,
    StepFailedError,
    WorkflowEvent,
    WorkflowStep,
    workflow,
)

from .._procs import note

EVENT_TIMEOUT = "10 minutes"
"""Waits for events and children: far beyond the run, so a lost event shows as a stuck wait."""


def _token() -> str:
    return "T" + uuid.uuid4().hex[:16]


def effect(p: dict[str, Any], value: Any) -> Callable[[StepContext], Any]:
    """A step callback (async, or sync in the thread pool when ``p["sync"]``) that takes
    ``p["work"]`` seconds and returns ``value`` with its ledger token."""
    ledger, work = p["ledger"], p.get("work", 0.0)

    async def run_async(ctx: StepContext) -> dict[str, Any]:
        token = _token()
        note(ledger, "S", ctx.instance_id, ctx.step_name, ctx.attempt, token)
        if work:
            await asyncio.sleep(work)
        note(ledger, "E", ctx.instance_id, ctx.step_name, ctx.attempt, token)
        return {"token": token, "value": value}

    def run_sync(ctx: StepContext) -> dict[str, Any]:
        token = _token()
        note(ledger, "S", ctx.instance_id, ctx.step_name, ctx.attempt, token)
        if work:
            time.sleep(work)
        note(ledger, "E", ctx.instance_id, ctx.step_name, ctx.attempt, token)
        return {"token": token, "value": value}

    return run_sync if p.get("sync") else run_async


def flaky(p: dict[str, Any], fails: int, value: Any) -> Callable[[StepContext], Any]:
    """A step that fails on attempts ``1..fails`` (the error names the execution's token)."""

    async def run(ctx: StepContext) -> dict[str, Any]:
        token = _token()
        note(p["ledger"], "S", ctx.instance_id, ctx.step_name, ctx.attempt, token)
        note(p["ledger"], "E", ctx.instance_id, ctx.step_name, ctx.attempt, token)
        if ctx.attempt <= fails:
            raise RuntimeError(f"attempt {ctx.attempt} fails (token {token})")
        return {"token": token, "value": value}

    return run


def undo(ledger: str, instance_id: str, step: str) -> Callable[..., Any]:
    """A rollback (``rollback(error, output)`` or a DAG's ``rollback(ctx)``) noted as
    ``<step>:rollback``, the name its record gets. Rollbacks see no attempt number: 0."""

    def rollback(*_args: Any) -> dict[str, Any]:
        token = _token()
        note(ledger, "S", instance_id, f"{step}:rollback", 0, token)
        note(ledger, "E", instance_id, f"{step}:rollback", 0, token)
        return {"token": token}

    return rollback


FAST_RETRY = {"limit": 3, "delay": 0.2, "backoff": "constant"}


@workflow(name="chaos-retry")
async def retry_wf(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """A step that fails ``fails`` times before it succeeds (or gives up, caught by ``run``)."""
    p = event.payload
    cfg = {"retries": {"limit": p["limit"], "delay": p["delay"], "backoff": "constant"}}
    try:
        first = await step.do("flaky", cfg, flaky(p, p["fails"], p["x"]))
    except StepFailedError:
        return {"gave_up": True}
    after = await step.do("after", effect(p, first["value"] + 1))
    return {"flaky": first["value"], "after": after["value"]}


@workflow(name="chaos-sleep")
async def sleep_wf(event: WorkflowEvent, step: WorkflowStep) -> Any:
    p = event.payload
    a = await step.do("a", effect(p, p["x"]))
    await step.sleep("nap", p["nap"])
    # ``long``: a step that outlives the lease, which the live worker must keep renewing
    b = await step.do("b", effect({**p, "work": p["long"] or p["work"]}, a["value"] * 3))
    return {"a": a["value"], "b": b["value"]}


@workflow(name="chaos-event")
async def event_wf(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """Waits for ``approve`` and ``ship``, then ``confirm`` and ``pack``. The sender sends the
    second event of each pair first: it wakes the instance while it waits for the other, so a
    claim races with the event sent right after it. The second pair comes a little later."""
    p = event.payload
    a = await step.do("a", effect(p, p["x"]))
    tags: dict[str, str] = {}
    for wait, type_ in WAITS.items():
        if wait == "confirmation":
            await step.do("b", effect(p, [a["value"], tags["approve"], tags["ship"]]))
        got = await step.wait_for_event(wait, type=type_, timeout=EVENT_TIMEOUT)
        tags[type_] = got.payload["tag"]
    return tags


WAITS = {"approval": "approve", "shipment": "ship", "confirmation": "confirm", "packing": "pack"}
"""The ``wait_for_event`` steps of ``chaos-event``, in order, and the event type of each."""


@workflow(name="chaos-parallel")
async def parallel_wf(event: WorkflowEvent, step: WorkflowStep) -> Any:
    p = event.payload
    results = await asyncio.gather(
        *(step.do(f"p{i}", effect(p, p["x"] * i)) for i in range(p["width"]))
    )
    values = [r["value"] for r in results]
    join = await step.do("join", effect(p, sum(values)))
    return {"values": values, "join": join["value"]}


def failing(p: dict[str, Any]) -> Callable[[StepContext], Any]:
    """A step that fails for good on its first attempt (the error names the token)."""

    async def run(ctx: StepContext) -> None:
        token = _token()
        note(p["ledger"], "S", ctx.instance_id, ctx.step_name, ctx.attempt, token)
        note(p["ledger"], "E", ctx.instance_id, ctx.step_name, ctx.attempt, token)
        raise NonRetryableError(f"cannot ship (token {token})")

    return run


@workflow(name="chaos-saga")
async def saga_wf(event: WorkflowEvent, step: WorkflowStep) -> Any:
    """Two steps with rollbacks, then ``ship``, which fails for good when ``p["fail"]``: the
    rollbacks then run (``charge`` first) and the instance ends errored."""
    p, iid, ledger = event.payload, event.instance_id, event.payload["ledger"]
    reserve = await step.do("reserve", effect(p, p["x"]), rollback=undo(ledger, iid, "reserve"))
    charge = await step.do(
        "charge", effect(p, reserve["value"] * 2), rollback=undo(ledger, iid, "charge")
    )
    ship = await step.do("ship", failing(p) if p["fail"] else effect(p, charge["value"] + 1))
    return {"reserve": reserve["value"], "charge": charge["value"], "ship": ship["value"]}


def _dag_step(name: str, value: Callable[[Any], int]) -> Callable[..., Any]:
    """A DAG step: ``b`` fails on its first ``b_fails`` attempts, ``d`` for good when
    ``fail``; each returns its token and value under keys of its own."""

    async def run(ctx: Any, info: StepContext) -> dict[str, Any]:
        token = _token()
        note(ctx["ledger"], "S", info.instance_id, info.step_name, info.attempt, token)
        if ctx.get("work"):
            await asyncio.sleep(ctx["work"])
        note(ctx["ledger"], "E", info.instance_id, info.step_name, info.attempt, token)
        if name == "b" and info.attempt <= ctx["b_fails"]:
            raise RuntimeError(f"attempt {info.attempt} fails (token {token})")
        if name == "d" and ctx["fail"]:
            raise NonRetryableError(f"d fails for good (token {token})")
        return {f"tok_{name}": token, f"val_{name}": value(ctx)}

    run.__name__ = name
    return run


def _dag_undo(name: str) -> Callable[[Any], Any]:
    def rollback(ctx: Any) -> dict[str, Any]:
        return dict(undo(ctx["ledger"], ctx["iid"], name)())

    return rollback


dag = Dag(
    "chaos-dag",
    output=lambda ctx: {k: ctx[k] for k in sorted(ctx) if k.startswith("val_")},
)
for _name, _deps, _value in (
    ("a", [], lambda ctx: ctx["x"]),
    ("b", ["a"], lambda ctx: ctx["val_a"] + 1),
    ("c", ["a"], lambda ctx: ctx["val_a"] * 2),
    ("d", ["b", "c"], lambda ctx: ctx["val_b"] + ctx["val_c"]),
):
    dag.add_step(
        _dag_step(_name, _value),
        name=_name,
        depends_on=_deps,
        retries=FAST_RETRY,
        rollback=_dag_undo(_name),
    )


@workflow(name="chaos-child")
async def child_wf(event: WorkflowEvent, step: WorkflowStep) -> Any:
    p = event.payload
    await step.sleep("nap", p["nap"])
    double = await step.do("double", effect(p, p["x"] * 2))
    return {"double": double["value"]}


def child_id(parent_id: str) -> str:
    return f"{parent_id}-kid"


@workflow(name="chaos-parent")
async def parent_wf(event: WorkflowEvent, step: WorkflowStep) -> Any:
    p = event.payload
    a = await step.do("a", effect(p, p["x"]))
    kid = await step.start_workflow("chaos-child", p["child"], id=child_id(event.instance_id))
    out = await step.wait_for_workflow("chaos-child", kid, timeout=EVENT_TIMEOUT)
    b = await step.do("b", effect(p, a["value"] + out["double"]))
    return {"a": a["value"], "child": out, "b": b["value"]}


WORKFLOWS: list[Any] = [
    retry_wf,
    sleep_wf,
    event_wf,
    parallel_wf,
    saga_wf,
    dag,
    parent_wf,
    child_wf,
]


# -- the mix and its expected outcomes ---------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """One instance the scenario creates."""

    workflow: str
    id: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """What an instance's definition implies for it, from its params alone."""

    status: str
    output: Any = None
    error: str | None = None
    """The error's name when errored (its message names a token: checked against the ledger)."""
    rollback: dict[str, Any] | None = None
    steps: frozenset[str] = frozenset()
    """The names of the steps it records."""
    attempts: dict[str, int] = field(default_factory=dict)
    """Attempts of the ``do`` steps that take more than one."""
    failed: frozenset[str] = frozenset()
    """Steps recorded ``errored``."""


KINDS = ("retry", "sleep", "event", "parallel", "saga", "dag", "parent")


def make_mix(rng: random.Random, count: int, ledger: str, prefix: str = "") -> list[Planned]:
    """``count`` instances, the kinds in turn (shuffled), their params drawn from ``rng``; ids
    start with ``prefix``."""
    kinds = [KINDS[n % len(KINDS)] for n in range(count)]
    rng.shuffle(kinds)
    mix = []
    for n, kind in enumerate(kinds):
        iid = f"{prefix}{kind}-{n}"
        p: dict[str, Any] = {
            "ledger": ledger,
            "x": rng.randrange(1, 1000),
            "work": rng.choice([0.0, 0.0, 0.02, 0.1, 0.3]),
            "sync": rng.random() < 0.3,
        }
        if kind == "retry":
            p.update(limit=2, delay=rng.choice([0.1, 0.3]), fails=rng.choice([0, 1, 2, 2, 9]))
        elif kind == "sleep":
            p["nap"] = rng.choice([0.2, 0.5, 1.0])
            p["long"] = rng.choice([0.0, 0.0, 0.0, 3.0])
        elif kind == "event":
            p.update({t: uuid.UUID(int=rng.getrandbits(128)).hex[:12] for t in WAITS.values()})
        elif kind == "parallel":
            p["width"] = rng.choice([2, 3, 4])
        elif kind in ("saga", "dag"):
            p["fail"] = rng.random() < 0.6
            p["iid"] = iid
            p["b_fails"] = rng.choice([0, 1])
        elif kind == "parent":
            p["child"] = {
                "ledger": ledger,
                "x": rng.randrange(1, 1000),
                "nap": rng.choice([0.2, 0.6]),
                "work": p["work"],
            }
        mix.append(Planned(f"chaos-{kind}", iid, p))
    return mix


def events_for(planned: Planned) -> list[list[tuple[str, dict[str, Any]]]]:
    """The events the sender sends to an instance: two bursts, each sent in order (the event
    waited for second goes first: see event_wf)."""
    if planned.workflow != "chaos-event":
        return []
    p = planned.params
    return [
        [("ship", {"tag": p["ship"]}), ("approve", {"tag": p["approve"]})],
        [("pack", {"tag": p["pack"]}), ("confirm", {"tag": p["confirm"]})],
    ]


def children(planned: Planned) -> list[Planned]:
    """The child instances an instance starts."""
    if planned.workflow != "chaos-parent":
        return []
    return [Planned("chaos-child", child_id(planned.id), planned.params["child"])]


def expect(planned: Planned) -> Outcome:
    """The outcome an instance must reach, derived from its params."""
    p, kind = planned.params, planned.workflow.removeprefix("chaos-")
    x = p["x"]
    if kind == "retry":
        if p["fails"] > p["limit"]:
            return Outcome(
                "complete",
                {"gave_up": True},
                steps=frozenset({"flaky"}),
                attempts={"flaky": p["limit"] + 1},
                failed=frozenset({"flaky"}),
            )
        return Outcome(
            "complete",
            {"flaky": x, "after": x + 1},
            steps=frozenset({"flaky", "after"}),
            attempts={"flaky": p["fails"] + 1},
        )
    if kind == "sleep":
        return Outcome("complete", {"a": x, "b": 3 * x}, steps=frozenset({"a", "nap", "b"}))
    if kind == "event":
        return Outcome(
            "complete",
            {t: p[t] for t in WAITS.values()},
            steps=frozenset({"a", "b", *WAITS}),
        )
    if kind == "parallel":
        values = [x * i for i in range(p["width"])]
        names = {f"p{i}" for i in range(p["width"])} | {"join"}
        return Outcome("complete", {"values": values, "join": sum(values)}, steps=frozenset(names))
    if kind == "saga":
        names = {"reserve", "charge", "ship"}
        if p["fail"]:
            return Outcome(
                "errored",
                error="NonRetryableError",
                rollback={"outcome": "complete", "error": None},
                steps=frozenset(names | {"reserve:rollback", "charge:rollback"}),
                failed=frozenset({"ship"}),
            )
        return Outcome(
            "complete", {"reserve": x, "charge": 2 * x, "ship": 2 * x + 1}, steps=frozenset(names)
        )
    if kind == "dag":
        names = {"a", "b", "c", "d"}
        attempts = {"b": p["b_fails"] + 1}
        if p["fail"]:
            return Outcome(
                "errored",
                error="NonRetryableError",
                rollback={"outcome": "complete", "error": None},
                steps=frozenset(names | {"a:rollback", "b:rollback", "c:rollback"}),
                attempts=attempts,
                failed=frozenset({"d"}),
            )
        values = {"val_a": x, "val_b": x + 1, "val_c": 2 * x, "val_d": 3 * x + 1}
        return Outcome("complete", values, steps=frozenset(names), attempts=attempts)
    if kind == "parent":
        kid, double = child_id(planned.id), 2 * p["child"]["x"]
        return Outcome(
            "complete",
            {"a": x, "child": {"double": double}, "b": x + double},
            steps=frozenset({"a", f"start chaos-child {kid}", f"wait chaos-child {kid}", "b"}),
        )
    if kind == "child":
        return Outcome("complete", {"double": 2 * x}, steps=frozenset({"nap", "double"}))
    raise ValueError(f"no expected outcome for {planned.workflow}")


# -- the event sender (a process of its own) ---------------------------------------------------


async def _send_all(url: str, plan: dict[str, Any], out: str) -> None:
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    async with Engine(url, WORKFLOWS, worker=False) as client:
        for item in sorted(plan["sends"], key=lambda s: s["at"]):
            delay = plan["start"] + item["at"] - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            # the driver creates the instances in waves: one may not exist quite yet
            deadline = time.monotonic() + 60
            while True:
                try:
                    instance = await client.workflow(item["workflow"]).get(item["id"])
                    break
                except InstanceNotFoundError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.05)
            for type_, payload in item["events"]:
                await instance.send_event(type_, payload)
                line = f"sent,{item['workflow']},{item['id']},{type_},{payload['tag']}\n"
                os.write(fd, line.encode())
    os.close(fd)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="sends the chaos scenario's planned events")
    parser.add_argument("--url", required=True)
    parser.add_argument(
        "--plan", required=True, help="JSON: {start, sends: [{at, workflow, id, events}]}"
    )
    parser.add_argument("--out", required=True, help="one line appended per acknowledged event")
    args = parser.parse_args(argv)
    with open(args.plan) as f:
        plan = json.load(f)
    asyncio.run(_send_all(args.url, plan, args.out))
    print("done", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
