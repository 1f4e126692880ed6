"""``stepline worker`` and ``stepline run``: commands that execute workflow code."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import click
from rich.logging import RichHandler
from rich.text import Text

from .. import _loop, _threads
from ..client import Instance
from ..durations import format_duration, parse_worker_duration
from ..engine import Engine
from ..errors import ConfigError, WorkflowNotFoundError
from ..project import as_workflow, attribute, import_file, import_module, load_workflow
from ..records import FINISHED_STATUSES
from ..triggers import QueueTrigger
from ..triggers.queues import Consumer
from ..workflow import Workflow, definition_of, validate_name
from ._common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    State,
    cli_errors,
    fail,
    json_file_option,
    json_option,
    pass_state,
    read_json_input,
    run_async,
)
from ._instances import Described, load_instance, show_instance, step_output_options
from ._progress import EventLog, RunProgress
from ._summary import summarise_instance
from ._telemetry import (
    json_handler,
    log_format,
    log_format_option,
    metrics_address,
    metrics_options,
    serve_metrics,
)
from ._telemetry import telemetry as telemetry_for
from ._triggers import configured_triggers, start_consumers

RUN_TRUNCATE = 300


# -- targets ------------------------------------------------------------------------------------


def _workflows_in(module: Any) -> dict[str, Any]:
    """Workflow classes defined in ``module`` and workflow objects (Pipeline, Dag) it holds, by
    attribute name."""
    found: dict[str, Any] = {}
    for attr, value in vars(module).items():
        if isinstance(value, type) and issubclass(value, Workflow) and value is not Workflow:
            if value.__module__ == module.__name__:
                found[attr] = value
        elif isinstance(value, Workflow):
            found[attr] = value
    return found


def load_target(state: State, target: str) -> Any:
    """``path/to/file.py:Attr``, ``package.module:Attr``, ``path/to/file.py`` (its only
    workflow) or a configured workflow name."""
    if ":" in target:
        source, _, attr = target.rpartition(":")
        if not source or not attr:
            raise ConfigError(f"invalid target {target!r}: use path/to/file.py:ClassName")
        looks_like_file = source.endswith(".py") or "/" in source or "\\" in source
        module = import_file(Path(source)) if looks_like_file else import_module(source, Path.cwd())
        return as_workflow(attribute(module, attr, target), target)
    if target.endswith(".py"):
        module = import_file(Path(target))
        found = _workflows_in(module)
        if len(found) != 1:
            raise ConfigError(
                f"{target} defines {len(found)} workflows ({', '.join(found) or 'none'}); "
                f"name one: {target}:{next(iter(found), 'ClassName')}"
            )
        return next(iter(found.values()))
    entry = state.project.entry(target)
    if entry is None:
        known = state.project.workflow_names
        raise WorkflowNotFoundError(target, known)
    if state.wrangler is not None:
        return state.wrangler_project.workflows[entry.name]
    return load_workflow(state.project, entry)


def wrangler_option(fn: Any) -> Any:
    return click.option(
        "--wrangler",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Serve this wrangler project (wrangler.jsonc, wrangler.json or wrangler.toml): its "
        "main module's workflows, as Cloudflare runs them.",
    )(fn)


def _target_error(target: str, exc: WorkflowNotFoundError) -> str:
    return f"{exc}; or run code directly: stepline run path/to/file.py:ClassName"


# -- logging ------------------------------------------------------------------------------------


def setup_logging(state: State, level: str, log_format: str = "text") -> None:
    """Log to stderr: rich (coloured) on a terminal, plain timestamped lines otherwise; one
    JSON object per line with ``log_format`` json."""
    handler: logging.Handler
    if log_format == "json":
        handler = json_handler()
    elif state.err.is_terminal:
        handler = RichHandler(
            console=state.err, show_path=False, markup=False, rich_tracebacks=False
        )
        handler.setFormatter(logging.Formatter("%(message)s", datefmt="[%X]"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    for name, logger_level in (("stepline", level.upper()), ("psycopg", "WARNING")):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logger_level)
        logger.propagate = False


# -- worker -------------------------------------------------------------------------------------


class StartupSignal(BaseException):
    """SIGINT/SIGTERM before the worker's own handlers were installed (start-up)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)


def _stop_at_startup(signum: int, frame: Any) -> None:
    raise StartupSignal(signum)


def startup_signals() -> None:
    """Until the worker's loop handlers take over, a SIGINT/SIGTERM ends the command at once
    and cleanly (exit 0): it is importing workflows or opening the store, nothing is claimed
    yet. Without this a SIGTERM there would kill it by the default action."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop_at_startup)


async def _worker(
    state: State,
    workflows: list[Any],
    options: dict[str, Any],
    triggers: list[QueueTrigger],
    metrics: tuple[str, int] | None = None,
) -> None:
    options = {"listeners": [EventLog()], **options}
    engine = state.engine(workflows, **options)
    names = ", ".join(sorted(engine.workflows))
    logging.getLogger("stepline.cli").info(
        "worker on %s for %s (concurrency %d, lease %s, grace period %s, event loop %s); "
        "stop with Ctrl-C or SIGTERM",
        engine.url,
        names,
        engine.settings.concurrency,
        format_duration(engine.settings.lease),
        format_duration(engine.settings.grace_period),
        _loop.running_loop_name(),
    )
    consumers: list[Consumer] = []
    consuming: list[asyncio.Task[None]] = []
    stop_metrics = serve_metrics(engine, None)
    try:
        if triggers or metrics:
            # Opened first so the consumers create through it (the worker's open is then a
            # no-op); a consumer that fails stops the worker, and the error ends the command.
            await engine.open()
            engine.worker  # noqa: B018 - made now, for the metrics to read
            stop_metrics = serve_metrics(engine, metrics)
        if triggers:
            consumers, consuming = await start_consumers(engine, triggers)
            if engine.telemetry.metrics is not None:
                engine.telemetry.metrics.watch_consumers(consumers)
            for task in consuming:
                task.add_done_callback(lambda _: engine.worker.stop())
        await engine.run_worker()
    finally:
        for consumer in consumers:
            consumer.stop()
        results = await asyncio.gather(*consuming, return_exceptions=True)
        stop_metrics()
        await engine.close()
    for result in results:
        if isinstance(result, Exception):
            raise result
    _exit_leaving_threads(EXIT_OK)


def _exit_leaving_threads(code: int) -> None:
    """Exit with ``code`` at once if a step callback still runs in one of its threads.

    Its instance was released (past the grace period, or on a second signal) and another worker
    runs the step again; its result would be refused. Called on the loop, before asyncio's
    shutdown."""
    if _threads.wait_idle(timeout=1.0):
        return
    logging.getLogger("stepline.cli").warning(
        "exiting with step callbacks still running in threads: their results are discarded"
    )
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@click.command("worker", short_help="Run a worker until SIGINT/SIGTERM.")
@click.argument("targets", nargs=-1, metavar="[TARGET...]")
@click.option("--concurrency", type=click.IntRange(min=1), help="Activations run at once.")
@click.option(
    "--lease",
    metavar="DURATION",
    help="How long a claim lasts without renewal, e.g. '30 seconds' [[worker] lease, else 30 s].",
)
@click.option(
    "--grace-period",
    metavar="DURATION",
    help="How long running steps may finish at shutdown [[worker] grace_period, else 10 s].",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="info",
    show_default=True,
)
@log_format_option
@metrics_options
@wrangler_option
@pass_state
def worker(
    state: State,
    targets: tuple[str, ...],
    concurrency: int | None,
    lease: str | None,
    grace_period: str | None,
    log_level: str,
    log_format: str | None,
    metrics_port: int | None,
    metrics_host: str | None,
    wrangler: Path | None,
) -> None:
    """Run a worker for the configured workflows (or the TARGETs given) until SIGINT/SIGTERM.

    Shutdown is graceful: no new step starts, running steps get the grace period to finish,
    leases are released so another worker continues at once. A signal during start-up
    (importing the workflows, opening the database) exits at once with code 0. With
    --wrangler, the workflows are those of the wrangler file (TARGETs may name some of them).
    """
    state.wrangler = wrangler
    startup_signals()
    try:
        telemetry = (log_format, metrics_port, metrics_host)
        _worker_command(state, targets, concurrency, lease, grace_period, log_level, telemetry)
    except StartupSignal as stopped:
        click.echo(f"stopped by {stopped} before the worker started (nothing claimed)", err=True)
        sys.exit(EXIT_OK)


def _worker_command(
    state: State,
    targets: tuple[str, ...],
    concurrency: int | None,
    lease: str | None,
    grace_period: str | None,
    log_level: str,
    telemetry: tuple[str | None, int | None, str | None],
) -> None:
    options: dict[str, Any] = {}
    formatted = log_format(state, telemetry[0])
    metrics = metrics_address(state, telemetry[1], telemetry[2])
    options["telemetry"] = telemetry_for(
        state, json_logs=formatted == "json", metrics=metrics is not None
    )
    with cli_errors():
        if concurrency is not None:
            options["concurrency"] = concurrency
        if lease is not None:
            options["lease"] = parse_worker_duration("lease", lease, what="--lease")
        if grace_period is not None:
            options["grace_period"] = parse_worker_duration(
                "grace_period", grace_period, what="--grace-period"
            )
        if targets:
            workflows = [load_target(state, target) for target in targets]
        elif state.wrangler is not None:
            workflows = list(state.wrangler_project.workflows.values())
            if not workflows:
                fail(f"{state.wrangler}: no workflow to serve here (each names another Worker "
                     "with script_name)")  # fmt: skip
        else:
            if not state.project.workflows:
                where = state.project.path or "no stepline.toml found"
                fail(
                    f"no workflows to run ({where}): add [[workflows]] entries with name and "
                    "class_name to stepline.toml, or pass path/to/file.py:ClassName"
                )
            from_config = state.project
            workflows = [load_workflow(from_config, entry) for entry in from_config.workflows]
        triggers = [] if targets or state.wrangler else configured_triggers(state)
    setup_logging(state, log_level, formatted)
    run_async(_worker(state, workflows, options, triggers, metrics))


# -- run ----------------------------------------------------------------------------------------


async def _run(
    state: State,
    target: Any,
    params: Any,
    instance_id: str,
    show_progress: bool,
) -> tuple[Described, bool]:
    name = definition_of(target).name
    progress = RunProgress(state.err, name, instance_id)
    listeners = [progress] if show_progress else []
    engine: Engine = state.engine([target], listeners=listeners)
    async with engine:
        instance: Instance = await engine.workflow(name).create(instance_id, params, trigger="cli")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            # The first signal stops gracefully; another one (an impatient Ctrl-C) at once.
            if stop.is_set():
                engine.worker.stop(at_once=True)
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal)
        try:
            with progress if show_progress else contextlib.nullcontext():
                worker_task = asyncio.create_task(engine.worker.run(), name="stepline-run-worker")
                waiter = asyncio.create_task(instance.wait())
                stopper = asyncio.create_task(stop.wait())
                await asyncio.wait(
                    {waiter, stopper, worker_task}, return_when=asyncio.FIRST_COMPLETED
                )
                interrupted = not waiter.done()
                for task in (waiter, stopper):
                    task.cancel()
                engine.worker.stop()
                await asyncio.gather(waiter, stopper, return_exceptions=True)
                await worker_task
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
        return await load_instance(engine, await instance.record()), interrupted


@click.command("run", short_help="Run one instance here, showing its steps live.")
@click.argument("target")
@click.argument("params_json", required=False, metavar="[PARAMS_JSON]")
@json_file_option("--params-file", "Read the params (JSON) from FILE; '-' reads stdin.")
@click.option("--id", "instance_id", help="Instance id (default: a random UUID).")
@step_output_options(RUN_TRUNCATE)
@click.option(
    "--full",
    is_flag=True,
    help="Print the whole describe output (every field, every attempt) instead of a summary.",
)
@json_option
@wrangler_option
@pass_state
def run(
    state: State,
    target: str,
    params_json: str | None,
    params_file: str | None,
    instance_id: str | None,
    step_output: bool,
    truncate_output_limit: int,
    full: bool,
    as_json: bool,
    wrangler: Path | None,
) -> None:
    """Run one instance of TARGET to its end in this process, showing its steps live, then a
    summary: one line per step, attempts only where a step was retried (--full: the whole
    describe output).

    TARGET is path/to/file.py:ClassName (a Workflow subclass, @workflow function, Pipeline or
    Dag), module:attribute, or a workflow name from stepline.toml. The instance is stored in the
    project's database; while it runs, this process is a worker for TARGET's workflow only.
    Exit code 0 when it completes, 1 when it errors or is terminated. With --wrangler,
    TARGET is a workflow name of the wrangler file.
    """
    state.wrangler = wrangler
    with cli_errors():
        params = read_json_input(params_json, "PARAMS_JSON", params_file, "--params-file")
        instance_id = (
            validate_name(instance_id, what="instance id") if instance_id is not None else None
        )
        try:
            workflow = load_target(state, target)
        except WorkflowNotFoundError as exc:
            fail(_target_error(target, exc))

    async def run_and_show() -> int:
        described, interrupted = await _run(
            state, workflow, params, instance_id or str(uuid.uuid4()), show_progress=not as_json
        )
        if as_json or full:
            show_instance(
                state,
                described,
                as_json=as_json,
                step_output=step_output,
                limit=truncate_output_limit,
            )
        else:
            state.out.print(
                summarise_instance(
                    described.record,
                    described.steps,
                    now=described.now,
                    step_output=step_output,
                    warning=described.warning,
                    held=described.held,
                    retry=described.retry,
                )
            )
        record = described.record
        if record.status == "complete":
            code = EXIT_OK
        elif record.status in FINISHED_STATUSES:
            code = EXIT_FAILED
        else:
            state.err.print(
                Text(
                    f"Interrupted: instance {record.id} is {record.status}; `stepline worker` "
                    "(with this workflow configured) continues it."
                )
            )
            code = EXIT_INTERRUPTED if interrupted else EXIT_FAILED
        _exit_leaving_threads(code)
        return code

    sys.exit(run_async(run_and_show()))
