"""How the CLI shows things: times, icons, tables and the ``instances describe`` layout.

The layout follows ``wrangler workflows instances describe``: labelled instance fields, then a
``Steps:`` block with each step's fields and a table of its attempts. Everything is built from
:class:`rich.text.Text` (never markup), so user data containing brackets prints as is.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import orjson
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .._graph import format_graph, node_states
from ..durations import format_duration
from ..limits import WorkflowLimits
from ..records import (
    FINISHED_STATUSES,
    InstanceEvent,
    InstanceRecord,
    PendingRetry,
    StepRecord,
    WorkflowInfo,
)
from ..values import readable
from ..versions import VersionState

DEFAULT_TRUNCATE = 5000
LIST_ERROR_CUT = 60
"""How much of a retried attempt's error an instance list shows (describe shows it whole)."""
GRAPH_KINDS = ("dag", "pipeline")

# status -> (icon, label, style)
STATUS_LABELS: dict[str, tuple[str, str, str]] = {
    "queued": ("⌛", "Queued", "cyan"),
    "running": ("▶", "Running", "blue"),
    "paused": ("⏸", "Paused", "yellow"),
    "waitingForPause": ("⏸", "Waiting for pause", "yellow"),
    "waiting": ("⏳", "Waiting", "yellow"),
    "errored": ("❌", "Errored", "red"),
    "terminated": ("🚫", "Terminated", "red"),
    "complete": ("✅", "Completed", "green"),
}

TRIGGER_LABELS: dict[str, str] = {
    "api": "🌎 API",
    "cli": "💻 CLI",
    "http": "🌐 HTTP",
    "workflow": "🧬 Workflow",
    "schedule": "⏰ Schedule",
    "cron": "⏰ Cron",
    "event": "📨 Event",
}

STEP_TYPES: dict[str, str] = {
    "do": "🎯 Step",
    "sleep": "💤 Sleeping",
    "wait_for_event": "👀 Waiting for event",
    "rollback": "⏪ Rollback",
    "start_workflow": "🚀 Start workflow",
    "wait_for_workflow": "🔗 Waiting for workflow",
    "update": "💬 Update",
    "publish": "📣 Publish",
}

ATTEMPT_STATES: dict[str, tuple[str, str]] = {
    "success": ("✅ Success", "green"),
    "failed": ("❌ Error", "red"),
    "running": ("▶ Running", "blue"),
    "interrupted": ("⚡ Interrupted", "yellow"),
}


# -- small formatters ---------------------------------------------------------------------------


def fmt_time(ts: float | None) -> str:
    """Local time the way wrangler prints it: ``11/24/2024, 9:20:12 PM``."""
    if ts is None:
        return "-"
    moment = datetime.fromtimestamp(ts)
    hour = moment.hour % 12 or 12
    half = "AM" if moment.hour < 12 else "PM"
    return (
        f"{moment.month}/{moment.day}/{moment.year}, "
        f"{hour}:{moment.minute:02d}:{moment.second:02d} {half}"
    )


def fmt_clock(ts: float | None) -> str:
    """Local time of day: ``9:20:12 PM``."""
    return fmt_time(ts).partition(", ")[2] or "-"


def fmt_span(start: float | None, end: float | None) -> str:
    if start is None or end is None:
        return "-"
    return format_duration(max(end - start, 0.0))


RETRYING = ("🔁", "Retrying", "yellow")
"""A waiting instance whose wake-up is a failed step's next attempt."""


def status_text(status: str, retry: PendingRetry | None = None) -> Text:
    """The status's icon and label; ``🔁 Retrying`` for one waiting for a ``retry``."""
    retrying = retry is not None and status == "waiting"
    icon, label, style = RETRYING if retrying else STATUS_LABELS.get(status, ("❓", status, ""))
    return Text(f"{icon} {label}", style=style)


def cut(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters, an ellipsis where it was cut."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[: limit - 1]}…"


def trigger_text(trigger: str) -> str:
    return TRIGGER_LABELS.get(trigger, trigger.capitalize() if trigger else "-")


def step_type(kind: str) -> str:
    return STEP_TYPES.get(kind, kind)


def json_text(value: Any) -> str:
    """Compact JSON, non-ASCII kept."""
    return orjson.dumps(readable(value), option=orjson.OPT_NON_STR_KEYS).decode()


def truncate(text: str, limit: int | None) -> str:
    if limit is None or limit <= 0 or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


def error_text(error: dict[str, Any] | None) -> str:
    if not error:
        return "-"
    name = error.get("name") or "Error"
    message = error.get("message") or ""
    return f"{name}: {message}" if message else str(name)


def counts_text(counts: dict[str, int]) -> str:
    if not counts:
        return "none"
    order = list(STATUS_LABELS)
    ordered = sorted(counts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)
    return ", ".join(f"{n} {status}" for status, n in ordered if n)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# -- labelled values ----------------------------------------------------------------------------


Field = tuple[str, str | Text]


def labelled(fields: Sequence[Field], indent: int = 0) -> Text:
    """``Label:   value`` lines with the values aligned two spaces after the longest label."""
    width = max((len(label) for label, _ in fields), default=0) + 3
    out = Text()
    for index, (label, value) in enumerate(fields):
        if index:
            out.append("\n")
        out.append(" " * indent + f"{label}:".ljust(width))
        if isinstance(value, str):
            # a value of several lines keeps its lines under the first one
            value = value.replace("\n", "\n" + " " * (indent + width))
        out.append(value if isinstance(value, Text) else Text(value))
    return out


def simple_table(headers: Sequence[str], wrap: Sequence[str] = ()) -> Table:
    """A boxed table like wrangler's; only the ``wrap`` columns may wrap."""
    table = Table(box=box.SQUARE, show_header=True, header_style="bold", pad_edge=True)
    for header in headers:
        if header in wrap:
            table.add_column(header, overflow="fold")
        else:
            table.add_column(header, no_wrap=True)
    return table


# -- workflows ----------------------------------------------------------------------------------


def workflows_table(rows: Iterable[WorkflowInfo]) -> Table:
    table = simple_table(
        ["Name", "Class name", "Created", "Modified", "Instances"], wrap=["Instances"]
    )
    for info in rows:
        table.add_row(
            info.name,
            info.class_name,
            fmt_time(info.created_at) if info.created_at else "-",
            fmt_time(info.updated_at) if info.updated_at else "-",
            counts_text(info.counts),
        )
    return table


def versions_table(name: str, states: Iterable[VersionState]) -> Table:
    """``workflows versions``: a row per version of workflow ``name``."""
    table = simple_table(
        ["Version", "Unfinished", "Finished", "Live workers", "State"],
        wrap=["Unfinished", "Finished", "Live workers"],
    )
    for state in states:
        table.add_row(
            state.version,
            counts_text(state.unfinished) if state.unfinished else "-",
            counts_text(state.finished) if state.finished else "-",
            ", ".join(state.workers) or "none",
            "drained" if state.drained else ("running" if state.workers else "⚠ no live worker"),
        )
    return table


def describe_workflow(info: WorkflowInfo, configured: str | None) -> Text:
    """``workflows describe``: the fields, then the steps (DAGs and pipelines) or a note."""
    definition = info.definition or {}
    fields: list[Field] = [
        ("Name", info.name),
        ("Class name", info.class_name),
        ("Kind", str(definition.get("kind", "workflow"))),
        ("Created", fmt_time(info.created_at) if info.created_at else "- (not yet registered)"),
        ("Modified", fmt_time(info.updated_at) if info.updated_at else "-"),
        ("Configured in", configured or "- (known to the database only)"),
        ("Instances", counts_text(info.counts)),
    ]
    limits = WorkflowLimits.from_json(info.limits).describe()
    if limits:
        fields.append(("Limits", "; ".join(limits)))
    if info.retention:
        kept = (f"{outcome} {format_duration(s)}" for outcome, s in info.retention.items())
        fields.append(("Retention", "; ".join(kept)))
    doc = definition.get("doc")
    if doc:
        fields.append(("Description", " ".join(str(doc).split())))
    text = labelled(fields)
    text.append("\nSteps:\n")
    text.append(_indent(format_graph(definition), 2))
    return text


def _indent(text: str, by: int) -> str:
    return "\n".join(" " * by + line if line else line for line in text.splitlines())


# -- instances ----------------------------------------------------------------------------------


def instances_table(
    records: Sequence[InstanceRecord], retries: Sequence[PendingRetry | None] = ()
) -> Table:
    """The instances list; one waiting for a retry (``retries``, by position) says which step,
    which attempt failed and how."""
    table = simple_table(["Instance ID", "Created", "Modified", "Status"])
    for record, retry in itertools.zip_longest(records, retries[: len(records)]):
        status = status_text(record.status, retry)
        if retry is not None and record.status == "waiting":
            error = cut(error_text(retry.error), LIST_ERROR_CUT)
            status.append(f" {retry.step}: attempt {retry.attempt} failed, {error}")
        table.add_row(record.id, fmt_time(record.created_at), fmt_time(record.updated_at), status)
    return table


def waits_for(steps: Sequence[StepRecord]) -> str | None:
    """What an unfinished instance's waiting steps wait for, a line each, or None: an event
    (and its deadline), a sleep's end, a failed step's next attempt, a child instance, a slot
    of a named limit."""
    lines = [line for line in (wait_line(step) for step in steps) if line is not None]
    return "\n".join(lines) if lines else None


def wait_line(step: StepRecord) -> str | None:
    """What one waiting step waits for (:func:`waits_for`), or None if it is not waiting."""
    if step.status != "waiting":
        return None
    info = step.info or {}
    name = step.display_name
    until = f", until {fmt_time(step.wake_at)}" if step.wake_at is not None else ""
    if step.kind == "sleep":
        return f"💤 sleep {name!r} until {fmt_time(step.wake_at)}"
    if step.kind == "wait_for_event":
        return f"👀 a {str(info.get('type'))!r} event{until}"
    if step.kind == "wait_for_workflow":
        child, workflow = str(info.get("id")), str(info.get("workflow"))
        return f"🔗 instance {child!r} of workflow {workflow!r} to end{until}"
    if step.kind not in ("do", "rollback"):
        return None
    if info.get("limit"):
        return f"🎯 a slot of limit {str(info['limit'])!r} for step {name!r}"
    failed = step.attempts[-1] if step.attempts else None
    line = f"🔁 attempt {len(step.attempts) + 1} of step {name!r} at {fmt_time(step.wake_at)}"
    if failed is not None and failed.error is not None:
        line += f"; attempt {failed.number} failed: {error_text(failed.error)}"
    return line


def last_successful_step(steps: Sequence[StepRecord]) -> StepRecord | None:
    """The workflow's last completed step (rollbacks undo work; they are not progress)."""
    done = [s for s in steps if s.status == "complete" and s.kind != "rollback"]
    return max(done, key=lambda s: (s.ended_at or 0.0, s.seq)) if done else None


def describe_json(record: InstanceRecord, steps: Sequence[StepRecord]) -> dict[str, Any]:
    """The machine-readable form of ``instances describe``."""
    last = last_successful_step(steps)
    return {
        **record.to_json(),
        "last_successful_step": last.display_name if last else None,
        "steps": [step.to_json() for step in steps],
    }


def instance_fields(
    record: InstanceRecord,
    steps: Sequence[StepRecord],
    *,
    now: float,
    value: Callable[[Any], str],
    warning: str | None = None,
    held: Sequence[str] = (),
    retry: PendingRetry | None = None,
) -> list[Field]:
    """The instance's labelled fields, those that apply, ``value`` showing its output.
    ``warning`` (no live worker serves the workflow) and ``held`` (the full limits holding it
    back) follow the status, ``🔁 Retrying`` while it waits for a ``retry``; ``Waiting For``
    says what its waiting steps wait for."""
    fields: list[Field] = [
        ("Workflow Name", record.workflow),
        ("Instance Id", record.id),
        ("Status", status_text(record.status, retry)),
    ]
    if warning:
        hint = "start `stepline worker`; `stepline workers list` shows the workers"
        fields.append(("Warning", Text(f"⚠ {warning} ({hint})", style="yellow")))
    if held:
        fields.append(("Held By", Text("; ".join(held), style="yellow")))
    fields += [
        ("Trigger", trigger_text(record.trigger)),
        ("Queued", fmt_time(record.created_at)),
    ]
    if record.key is not None:
        fields.append(("Key", record.key))
    if record.priority:
        fields.append(("Priority", str(record.priority)))
    if record.dedup_key is not None:
        fields.append(("Dedup Key", record.dedup_key))
    if record.deadline_at is not None:
        fields.append(("Deadline", fmt_time(record.deadline_at)))
    if record.tags:
        tags = ", ".join(f"{k}={orjson.dumps(v).decode()}" for k, v in record.tags.items())
        fields.append(("Tags", Text(tags)))
    if record.started_at is not None:
        fields.append(("Start", fmt_time(record.started_at)))
    if record.ended_at is not None:
        fields.append(("End", fmt_time(record.ended_at)))
    if record.delete_at is not None:
        fields.append(("Deleted At", fmt_time(record.delete_at)))
    if record.started_at is not None:
        fields.append(("Duration", fmt_span(record.started_at, record.ended_at or now)))
    if record.status == "waiting" and record.ready_at is not None:
        fields.append(("Wakes", fmt_time(record.ready_at)))
    waiting = None if record.status in FINISHED_STATUSES else waits_for(steps)
    if waiting is not None:
        fields.append(("Waiting For", waiting))
    last = last_successful_step(steps)
    if last is not None:
        fields.append(("Last Successful Step", last.display_name))
    if record.parent:
        parent = record.parent
        fields.append(("Parent", f"{parent.get('workflow')} {parent.get('id')}"))
    if record.status == "complete" or record.output is not None:
        fields.append(("Output", value(record.output)))
    if record.error:
        fields.append(("Error", Text(error_text(record.error), style="red")))
    if record.rollback:
        fields.append(("Rollback", _rollback_text(record.rollback)))
    return fields


def describe_instance(
    record: InstanceRecord,
    steps: Sequence[StepRecord],
    *,
    now: float,
    step_output: bool = True,
    limit: int | None = DEFAULT_TRUNCATE,
    definition: dict[str, Any] | None = None,
    warning: str | None = None,
    events: Sequence[InstanceEvent] = (),
    held: Sequence[str] = (),
    retry: PendingRetry | None = None,
) -> RenderableType:
    """The ``instances describe`` layout: the :func:`instance_fields`; a DAG or pipeline's
    graph with the state of every node; every step with its attempts; last, the ``events``
    sent to the instance, pending or consumed."""
    fields = instance_fields(
        record,
        steps,
        now=now,
        value=lambda output: truncate(json_text(output), limit),
        warning=warning,
        held=held,
        retry=retry,
    )
    parts: list[RenderableType] = [labelled(fields)]
    if definition and definition.get("kind") in GRAPH_KINDS:
        states = node_states(definition, steps, record.id)
        parts.append(Text("Graph:"))
        parts.append(Text(_indent(format_graph(definition, states), 2)))
    if steps:
        parts.append(Text("Steps:"))
        for step in steps:
            parts.append(Text(""))
            parts.extend(describe_step(step, now=now, step_output=step_output, limit=limit))
    if events:
        parts.append(Text(""))
        parts.append(Text("Events:"))
        parts.append(events_table(events, payloads=step_output, limit=limit))
    return Group(*parts)


def events_table(events: Sequence[InstanceEvent], *, payloads: bool, limit: int | None) -> Table:
    """The events of an instance in send order; ``payloads`` False (``--no-step-output``)
    leaves the payload column out."""
    headers = ["Type", "Sent", "Consumed by"] + (["Payload"] if payloads else [])
    table = simple_table(headers, wrap=("Payload",))
    for event in events:
        consumed = event.consumed_by
        row: list[Text | str] = [
            event.type,
            fmt_time(event.sent_at),
            Text(consumed, style="green") if consumed else Text("⏳ Pending", style="yellow"),
        ]
        if payloads:
            row.append(truncate(json_text(event.payload), limit))
        table.add_row(*row)
    return table


def _rollback_text(rollback: dict[str, Any]) -> Text:
    outcome = str(rollback.get("outcome", "?"))
    if outcome == "complete":
        return Text("✅ Rolled back", style="green")
    failed = rollback.get("failed") or []
    names = ", ".join(str(f.get("step")) for f in failed if isinstance(f, dict))
    detail = f" ({names}: {error_text(rollback.get('error'))})" if names else ""
    return Text(f"❌ Rollback {outcome}{detail}", style="red")


def describe_step(
    step: StepRecord, *, now: float, step_output: bool, limit: int | None
) -> list[RenderableType]:
    """One step of the Steps block: its fields, then its attempts table."""
    fields: list[Field] = [("Name", step.display_name), ("Type", step_type(step.kind))]
    info = step.info or {}
    if step.kind == "wait_for_event" and info.get("type"):
        fields.append(("Event type", str(info["type"])))
    if step.kind in ("start_workflow", "wait_for_workflow") and info.get("workflow"):
        fields.append(("Workflow", f"{info.get('workflow')} {info.get('id')}"))
    fields.append(("Start", fmt_time(step.started_at)))
    end = step.ended_at
    if step.kind == "sleep" and end is None:
        end = step.wake_at
    if end is not None:
        fields.append(("End", fmt_time(end)))
    fields.append(("Duration", fmt_span(step.started_at, end if end is not None else now)))
    if step.status == "waiting" and step.kind in ("do", "rollback") and info.get("limit"):
        fields.append(("Waiting for", f"a slot of limit {info['limit']}"))
    if step.status == "waiting" and step.wake_at is not None:
        if step.kind == "do" or step.kind == "rollback":
            fields.append(("Next attempt", fmt_time(step.wake_at)))
        elif step.kind != "sleep":
            fields.append(("Timeout", fmt_time(step.wake_at)))
    if step.kind != "sleep":
        if step.status == "complete":
            fields.append(("Success", Text("✅ Yes", style="green")))
        elif step.status == "errored":
            fields.append(("Success", Text("❌ No", style="red")))
        elif step.status == "running":
            fields.append(("Success", Text("▶ Running", style="blue")))
        elif step.kind in ("do", "rollback"):
            fields.append(("Success", Text("🔁 Retrying", style="yellow")))
        else:
            fields.append(("Success", Text("⏳ Waiting", style="yellow")))
    if step_output and step.status == "complete" and step.kind != "sleep":
        fields.append(("Output", truncate(json_text(step.output), limit)))
    if step.error:
        fields.append(("Error", Text(error_text(step.error), style="red")))
    parts: list[RenderableType] = [labelled(fields, indent=2)]
    if step.attempts:
        parts.append(attempts_table(step, now))
    return parts


def attempts_table(step: StepRecord, now: float) -> Table:
    with_errors = any(a.error for a in step.attempts)
    headers = ["Start", "End", "Duration", "State"] + (["Error"] if with_errors else [])
    table = simple_table(headers, wrap=["Error"])
    for attempt in step.attempts:
        label, style = ATTEMPT_STATES.get(attempt.state, (attempt.state, ""))
        row: list[str | Text] = [
            fmt_time(attempt.started_at),
            fmt_time(attempt.ended_at) if attempt.ended_at is not None else "-",
            fmt_span(attempt.started_at, attempt.ended_at if attempt.ended_at else now),
            Text(label, style=style),
        ]
        if with_errors:
            row.append(Text(error_text(attempt.error), style="red") if attempt.error else "")
        table.add_row(*row)
    return table
