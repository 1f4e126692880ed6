"""``stepline consume``: run the configured queue triggers without running workflows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from typing import Any

import click

from ..project import load_workflow
from ..telemetry import Telemetry
from ..triggers import QueueTrigger
from ._common import EXIT_OK, State, cli_errors, fail, pass_state, run_async
from ._run import StartupSignal, setup_logging, startup_signals
from ._telemetry import log_format as chosen_format
from ._telemetry import (
    log_format_option,
    metrics_address,
    metrics_options,
    serve_metrics,
    telemetry,
)
from ._triggers import configured_triggers, start_consumers

log = logging.getLogger("stepline.cli")


async def _consume(
    state: State,
    workflows: list[Any],
    triggers: list[QueueTrigger],
    telemetry: Telemetry,
    metrics: tuple[str, int] | None,
) -> None:
    engine = state.engine(workflows, telemetry=telemetry)
    async with engine:
        consumers, tasks = await start_consumers(engine, triggers)
        if engine.telemetry.metrics is not None:
            engine.telemetry.metrics.watch_consumers(consumers)
        stop_metrics = serve_metrics(engine, metrics)
        loop = asyncio.get_running_loop()
        signals = 0

        def on_signal() -> None:
            # The first signal lets the batches in flight finish; another one stops at once
            # (what was not acknowledged is delivered again).
            nonlocal signals
            signals += 1
            if signals == 1:
                log.info("stopping: batches in flight finish; signal again to stop at once")
                for consumer in consumers:
                    consumer.stop()
            else:
                for task in tasks:
                    task.cancel()

        installed: list[signal.Signals] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal)
                installed.append(sig)
        log.info(
            "consuming %s into %s; stop with Ctrl-C or SIGTERM",
            ", ".join(t.describe() for t in triggers),
            engine.url,
        )
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            stop_metrics()
            for sig in installed:
                loop.remove_signal_handler(sig)
        for result in results:
            if isinstance(result, Exception):
                raise result


@click.command("consume", short_help="Run the configured queue triggers until SIGINT/SIGTERM.")
@click.option(
    "--trigger",
    "names",
    multiple=True,
    metavar="NAME",
    help="Run only this [[triggers.queue]] trigger (its name, else its queue); repeatable.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
)
@log_format_option
@metrics_options
@pass_state
def consume(
    state: State,
    names: tuple[str, ...],
    log_level: str,
    log_format: str | None,
    metrics_port: int | None,
    metrics_host: str | None,
) -> None:
    """Consume the queues of stepline.toml's [[triggers.queue]] tables into instances, without
    running any workflow (a `stepline worker` does that; it consumes the queues too).

    Every message becomes one durable instance before it is acknowledged; messages that never
    can are moved to the dead-letter queue with the reason. SIGINT/SIGTERM stop after the
    batches in flight.
    """
    startup_signals()
    try:
        with cli_errors():
            triggers = configured_triggers(state, names)
            if not triggers:
                fail(
                    f"no queue triggers to run ({state.project.describe_source()}): add "
                    "[[triggers.queue]] tables with broker, queue and workflow to stepline.toml"
                )
            project = state.project
            workflows = [load_workflow(project, entry) for entry in project.workflows]
        formatted = chosen_format(state, log_format)
        metrics = metrics_address(state, metrics_port, metrics_host)
        observing = telemetry(state, json_logs=formatted == "json", metrics=metrics is not None)
        setup_logging(state, log_level, formatted)
        run_async(_consume(state, workflows, triggers, observing, metrics))
    except StartupSignal as stopped:
        click.echo(f"stopped by {stopped} before consuming (nothing received)", err=True)
        sys.exit(EXIT_OK)
