"""``stepline serve``: the click command the CLI registers."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import click

from .. import _loop
from .._project_telemetry import LOG_FORMATS
from ..access import ENV_TOKENS, TokenSet
from ..cloudflare import WranglerProject, load_wrangler
from ..engine import Engine
from ..errors import ConfigError
from ..project import ProjectConfig, load_project, load_workflows
from ..store.sqlite import directory_message, path_from_url
from ..telemetry import Telemetry
from .server import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ENV_TOKEN,
    check_bind,
    is_loopback,
    json_log_config,
    listen,
    serve,
)


class BadInput(click.ClickException):
    """A configuration or option problem: one line on stderr, exit code 2 (as in the CLI)."""

    exit_code = 2


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for printing)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def _source(project: ProjectConfig) -> str:
    """Where the database URL came from, for messages."""
    if project.database_source == "option":
        return "from --database"
    if project.database_source == "environment":
        return "from STEPLINE_DATABASE_URL"
    if project.database_source == "config":
        return f"from {project.path}"
    return "the default"


def _missing_database(project: ProjectConfig) -> str | None:
    """The absolute path of a SQLite file that does not exist, else None; a path naming a
    directory stops the command."""
    url = project.database
    if not url.startswith("sqlite:"):
        return None
    try:
        path = path_from_url(url)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    directory = directory_message(path, _source(project))
    if directory is not None:
        raise BadInput(directory)
    if path == ":memory:" or Path(path).exists():
        return None
    return str(Path(path).absolute())


@click.command("serve")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on.",
)
@click.option(
    "--token",
    envvar=ENV_TOKEN,
    default=None,
    help=f"Require 'Authorization: Bearer TOKEN' on every API call [env: {ENV_TOKEN}].",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Allow a non-loopback --host without a token (only on a trusted network).",
)
@click.option(
    "--database",
    default=None,
    metavar="URL",
    help="Database URL [default: $STEPLINE_DATABASE_URL, stepline.toml, sqlite:///stepline.db].",
)
@click.option(
    "--worker/--no-worker",
    default=False,
    show_default=True,
    help="Also run the configured workflows in this process.",
)
@click.option(
    "--metrics/--no-metrics",
    default=None,
    help="Answer GET /metrics in Prometheus' format [[telemetry] metrics, else off].",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    default=None,
    help="Log lines as text or one JSON object per line [[logging] format, else text].",
)
@click.option(
    "--wrangler",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Take the workflows (and the default database) from this wrangler project instead of "
    "stepline.toml.",
)
@click.pass_context
def serve_command(
    ctx: click.Context,
    host: str,
    port: int,
    token: str | None,
    insecure: bool,
    database: str | None,
    worker: bool,
    metrics: bool | None,
    log_format: str | None,
    wrangler: Path | None,
) -> None:
    """Serve the HTTP API (under /api), Cloudflare's Workflows API (under /client/v4) and the
    web dashboard (at /).

    The database and the workflows come from stepline.toml (or [tool.stepline] in
    pyproject.toml), like the other commands; --database (here or before the command) and
    $STEPLINE_DATABASE_URL override the configured database.
    """
    # Under the ``stepline`` group, honour its --database and --config options too.
    root = ctx.find_root().params if ctx.parent is not None else {}
    database = database or root.get("database")
    config_path = root.get("config_path")
    loaded: WranglerProject | None = None
    try:
        _loop.loop_name()  # a bad $STEPLINE_EVENT_LOOP stops here, before anything starts
        if wrangler is not None:
            if config_path:
                raise BadInput("give --config or --wrangler, not both")
            loaded = load_wrangler(wrangler, database=database)
            project, workflows = loaded.config, list(loaded.workflows.values())
            warning = loaded.ignored_warning()
            if warning is not None:
                click.echo(f"warning: {warning}", err=True)
        else:
            project = load_project(
                database=database, config_path=Path(config_path) if config_path else None
            )
            workflows = load_workflows(project)
        tokens = TokenSet.gather(project.http.tokens, os.environ.get(ENV_TOKENS), token)
        check_bind(host, tokens, insecure)
    except ConfigError as exc:
        raise BadInput(str(exc)) from None
    if worker and not workflows:
        raise BadInput(
            f"--worker needs workflows to run, and {project.describe_source()} configures none; "
            "add [[workflows]] entries to stepline.toml or drop --worker"
        )
    missing = _missing_database(project)
    if not worker and missing is not None:
        raise BadInput(
            f"no stepline database at {missing} ({_source(project)}); serving "
            "without --worker only reads and changes an existing one: create it with "
            "`stepline db init`, or start `stepline worker` or `stepline serve --worker`"
        )
    options = project.worker.engine_options() if worker else {}
    configured = project.telemetry
    json_logs = (log_format or configured.log_format).lower() == "json"
    telemetry = Telemetry(
        traces=configured.traces,
        metrics=configured.metrics if metrics is None else metrics,
        log_context=json_logs,
    )
    # Only a server that runs workflows creates a missing SQLite file (as a worker does).
    engine = Engine(
        project.database,
        workflows,
        worker=worker,
        create=worker,
        limits=project.limits,
        payloads=project.payloads,
        telemetry=telemetry,
        **options,
    )
    if loaded is not None:
        loaded.env.attach(engine)
    # Listening before the banner: a port in use is one line, and the URL printed answers.
    try:
        sockets = listen(host, port)
    except ConfigError as exc:
        raise BadInput(str(exc)) from None
    port = sockets[0].getsockname()[1]  # the one chosen, for --port 0
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"stepline dashboard: http://{shown}:{port}/  (API under /api)", err=True)
    if project.cloudflare.enabled:
        click.echo(
            f"Cloudflare Workflows API: CLOUDFLARE_API_BASE_URL=http://{shown}:{port}"
            f"{project.cloudflare.prefix}",
            err=True,
        )
    click.echo(f"database: {redact(project.database)} ({project.database_source})", err=True)
    if tokens:
        roles = ", ".join(f"{t.name} ({t.role})" for t in tokens.tokens)
        click.echo(f"API token required (Authorization: Bearer ...); tokens: {roles}", err=True)
    elif not is_loopback(host):
        click.echo(
            "WARNING: no token and not on loopback: anyone who reaches it may use it", err=True
        )
    if worker:
        click.echo(f"worker: running {', '.join(sorted(engine.workflows))}", err=True)
    if telemetry.want_metrics:
        click.echo(f"Prometheus metrics: http://{shown}:{port}/metrics", err=True)
    serve(
        engine,
        host=host,
        port=port,
        tokens=tokens,
        insecure=insecure,
        cloudflare_api=project.cloudflare,
        log_config=json_log_config() if json_logs else None,
        sockets=sockets,
    )
