"""Progress of running instances, fed by the engine's listeners.

:class:`EventLog` writes one log line per event (``stepline worker``). :class:`RunProgress`
follows one instance for ``stepline run``: a rich live view of its steps on a terminal, plain
lines otherwise. Listeners run on the worker's event loop and must never raise into the
runtime, so both catch and log their own errors.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ..durations import format_duration
from ._render import fmt_clock, fmt_time

log = logging.getLogger("stepline.events")


def describe_event(kind: str, data: dict[str, Any]) -> tuple[str, str] | None:
    """(icon, sentence) for a listener event, or None for kinds this CLI does not show."""
    step = data.get("step", "?")
    attempt = data.get("attempt", 1)
    error = f"{data.get('name', 'Error')}: {data.get('message', '')}"
    if kind == "instance_start":
        return "▶", "activated"
    if kind == "step_start":
        return "🎯", f"step '{step}' started (attempt {attempt})"
    if kind == "step_complete":
        return "✅", f"step '{step}' complete (attempt {attempt})"
    if kind == "step_retry":
        delay = format_duration(float(data.get("delay", 0.0)))
        return "🔁", f"step '{step}' attempt {attempt} failed: {error}; retrying in {delay}"
    if kind == "step_failed":
        return "❌", f"step '{step}' failed after {attempt} attempts: {error}"
    if kind == "step_sleep":
        return "💤", f"step '{step}' sleeping until {fmt_time(data.get('until'))}"
    if kind == "step_wait":
        return "👀", (
            f"step '{step}' waiting for event '{data.get('type')}' "
            f"(until {fmt_time(data.get('until'))})"
        )
    if kind == "step_limited":
        return "⏳", f"step '{step}' waiting for a slot of limit '{data.get('limit')}'"
    if kind == "event_received":
        return "📨", f"step '{step}' received event '{data.get('type')}'"
    return None


class EventLog:
    """A listener that logs every event as ``workflow/instance: sentence``."""

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        try:
            described = describe_event(kind, data)
            if described is not None:
                icon, sentence = described
                log.info("%s %s/%s: %s", icon, data.get("workflow"), data.get("instance"), sentence)
        except Exception:  # a listener must never break an activation
            log.exception("cannot log event %s", kind)


@dataclass
class _Row:
    step: str
    state: str
    attempt: int
    since: float
    detail: str = ""
    until: float | None = None


_STATE_ICONS = {
    "done": Text("✅"),
    "retry": Text("🔁"),
    "failed": Text("❌"),
    "sleeping": Text("💤"),
    "waiting": Text("👀"),
}


class RunProgress:
    """Follows one instance: a live table of its steps on a terminal, plain lines otherwise."""

    def __init__(self, console: Console, workflow: str, instance_id: str) -> None:
        self.console = console
        self.workflow = workflow
        self.instance_id = instance_id
        self.live_mode = console.is_terminal
        self._rows: dict[str, _Row] = {}
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._live: Live | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> RunProgress:
        if self.live_mode:
            self._live = Live(
                console=self.console,
                get_renderable=self._render,
                refresh_per_second=8,
                transient=True,
            )
            self._live.start()
        else:
            self._line("⌛", f"creating instance {self.instance_id} of {self.workflow}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- listener ----------------------------------------------------------------------------

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if data.get("instance") != self.instance_id or data.get("workflow") != self.workflow:
            return
        try:
            self._update(kind, data)
        except Exception:  # a listener must never break an activation
            log.exception("cannot show event %s", kind)

    def _update(self, kind: str, data: dict[str, Any]) -> None:
        now = time.monotonic()
        step = str(data.get("step", ""))
        with self._lock:
            if kind == "instance_start":
                for row in self._rows.values():
                    if row.state == "sleeping" and (row.until or 0) <= time.time():
                        row.state, row.detail, row.until = "done", "woke up", None
            elif kind == "step_start":
                attempt = int(data.get("attempt", 1))
                existing = self._rows.get(step)
                if existing is None:
                    self._rows[step] = _Row(step, "running", attempt, now)
                else:
                    existing.state, existing.attempt = "running", attempt
                    existing.since, existing.detail = now, ""
            elif step in self._rows or kind in ("step_sleep", "step_wait"):
                row = self._rows.setdefault(step, _Row(step, "running", 0, now))
                if kind == "step_complete":
                    row.state, row.detail = "done", f"in {format_duration(now - row.since)}"
                elif kind == "step_retry":
                    row.state = "retry"
                    row.detail = (
                        f"{data.get('name')}: {data.get('message')}; retrying in "
                        f"{format_duration(float(data.get('delay', 0.0)))}"
                    )
                elif kind == "step_failed":
                    row.state = "failed"
                    row.detail = f"{data.get('name')}: {data.get('message')}"
                elif kind == "step_sleep":
                    row.state, row.until = "sleeping", float(data.get("until") or 0.0)
                    row.detail = f"sleeping until {fmt_clock(row.until)}"
                elif kind == "step_wait":
                    row.state = "waiting"
                    row.detail = (
                        f"waiting for event '{data.get('type')}' "
                        f"(times out {fmt_time(data.get('until'))})"
                    )
                elif kind == "event_received":
                    row.state, row.detail = "done", f"received event '{data.get('type')}'"
        if not self.live_mode:
            described = describe_event(kind, data)
            if described is not None:
                self._line(*described)

    # -- output ------------------------------------------------------------------------------

    def _line(self, icon: str, sentence: str) -> None:
        self.console.print(Text(f"{icon} {sentence}"), soft_wrap=True)

    def _render(self) -> RenderableType:
        table = Table(box=None, show_header=False, padding=(0, 1))
        table.add_column(width=2)
        table.add_column(style="bold")
        table.add_column()
        table.add_column()
        now = time.monotonic()
        with self._lock:
            rows = list(self._rows.values())
        for row in rows:
            icon: RenderableType = _STATE_ICONS.get(row.state) or Spinner("dots")
            attempt = f"attempt {row.attempt}" if row.attempt else ""
            detail = row.detail
            if row.state == "running":
                detail = f"running for {now - row.since:.1f}s"
            elif row.state == "sleeping" and row.until is not None:
                detail += f" (in {max(row.until - time.time(), 0.0):.0f}s)"
            table.add_row(icon, row.step, attempt, detail)
        header = Text(
            f"{self.workflow} {self.instance_id} · {now - self._started:.1f}s", style="bold"
        )
        return Group(header, table)
