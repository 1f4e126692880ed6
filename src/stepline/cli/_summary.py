"""``stepline run``'s summary of the instance it ran: the instance's fields, then one line per
step (its state, type, duration and output, error or what it waits for), every value cut to one
line; the attempts table only under a step that took more than one attempt. ``--full`` prints
the whole ``instances describe`` layout instead."""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.text import Text

from ..records import InstanceRecord, PendingRetry, StepRecord
from ._render import (
    attempts_table,
    cut,
    error_text,
    fmt_span,
    instance_fields,
    json_text,
    labelled,
    step_type,
    wait_line,
)

VALUE_CUT = 100
"""Characters of an output kept on a step's line (a terminal narrower than the line cuts it
at its width too)."""
ERROR_CUT = 200

STEP_STATES: dict[str, tuple[str, str]] = {
    "complete": ("✅", "green"),
    "errored": ("❌", "red"),
    "running": ("▶", "blue"),
    "waiting": ("⏳", "yellow"),
}


def _one_line(text: Text) -> Text:
    """``text`` cut at the terminal's width, with an ellipsis, rather than wrapped."""
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def _detail(step: StepRecord, step_output: bool) -> Text:
    """The end of a step's line: its error, what it waits for, or its output."""
    if step.status == "errored" and step.error:
        return Text(cut(error_text(step.error), ERROR_CUT), style="red")
    waits = wait_line(step)
    if waits is not None:
        return Text(cut(waits, ERROR_CUT), style="yellow")
    if step.status == "running":
        attempt = (step.info or {}).get("running_attempt", len(step.attempts) + 1)
        return Text(f"attempt {attempt} running", style="blue")
    if step_output and step.status == "complete" and step.kind != "sleep":
        return Text(cut(json_text(step.output), VALUE_CUT))
    return Text("")


def _end(step: StepRecord) -> float | None:
    if step.kind == "sleep" and step.ended_at is None:
        return step.wake_at
    return step.ended_at


def summarise_instance(
    record: InstanceRecord,
    steps: Sequence[StepRecord],
    *,
    now: float,
    step_output: bool = True,
    warning: str | None = None,
    held: Sequence[str] = (),
    retry: PendingRetry | None = None,
) -> RenderableType:
    """The summary ``stepline run`` prints (see the module)."""
    fields = instance_fields(
        record,
        steps,
        now=now,
        value=lambda output: cut(json_text(output), VALUE_CUT),
        warning=warning,
        held=held,
        retry=retry,
    )
    parts: list[RenderableType] = [_one_line(labelled(fields))]
    if steps:
        parts.append(Text("Steps:"))
        names = max(cell_len(step.display_name) for step in steps)
        types = max(cell_len(step_type(step.kind)) for step in steps)
        spans = [fmt_span(step.started_at, _end(step) or now) for step in steps]
        longest = max(len(span) for span in spans)
        for step, span in zip(steps, spans, strict=True):
            failed = bool(step.attempts) and step.attempts[-1].state == "failed"
            retrying = step.status == "waiting" and step.kind in ("do", "rollback") and failed
            icon, style = ("🔁", "yellow") if retrying else STEP_STATES.get(step.status, ("?", ""))
            line = Text("  ")
            line.append(icon, style=style)
            line.append(f" {step.display_name}" + " " * (names - cell_len(step.display_name)))
            kind = step_type(step.kind)
            line.append(f"  {kind}" + " " * (types - cell_len(kind)))
            line.append(f"  {span.ljust(longest)}  ")
            line.append_text(_detail(step, step_output))
            line.rstrip()
            parts.append(_one_line(line))
            if len(step.attempts) > 1:
                parts.append(attempts_table(step, now))
    hint = f"stepline workflows instances describe {record.workflow} {record.id}"
    parts.append(Text(f"Every field and attempt: {hint} (or run with --full)", style="dim"))
    return Group(*parts)
