"""What every command shares: the CLI state, error handling, engines, consoles and JSON output."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import orjson
from rich.console import Console

from .. import _loop
from .._json import parse_json_argument
from ..cloudflare import WranglerProject, load_wrangler
from ..engine import Engine
from ..errors import (
    ConfigError,
    DefinitionError,
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    InvalidPayloadError,
    QueryError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    ScheduleReadOnlyError,
    SteplineError,
    UpdateRejectedError,
    WorkflowNotFoundError,
)
from ..project import ProjectConfig, load_project
from ..records import InstanceRecord
from ..store.operations import BulkJobNotFoundError
from ..store.sqlite import directory_message, path_from_url
from ..telemetry import Telemetry
from ..values import readable
from ..workflow import validate_name

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
"""``stepline run``: the instance ended errored or terminated; any command: the database failed."""
EXIT_USAGE = 2
"""Bad input: invalid JSON, unknown workflow, instance or schedule, illegal change, bad config."""
EXIT_INTERRUPTED = 130

INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    DefinitionError,
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    InvalidPayloadError,
    ScheduleExistsError,
    ScheduleNotFoundError,
    ScheduleReadOnlyError,
    UpdateRejectedError,
    WorkflowNotFoundError,
    BulkJobNotFoundError,
    ValueError,
)


class CliError(click.ClickException):
    """Bad input: one line on stderr, exit code 2, never a traceback."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    def show(self, file: Any = None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True)


class CliFailure(CliError):
    """Something failed that is not the user's input (the database): exit code 1."""

    exit_code = EXIT_FAILED


@contextlib.contextmanager
def cli_errors() -> Iterator[None]:
    """Turn stepline's errors into :class:`CliError`: bad input exits 2, other failures 1."""
    try:
        yield
    except click.ClickException:
        raise
    except INPUT_ERRORS as exc:
        raise CliError(_with_way_out(exc)) from None
    except QueryError as exc:
        # An unknown query, or arguments it does not take, are bad input; the rest failures.
        if exc.error_name in ("UnknownQueryError", "InvalidArgumentsError"):
            raise CliError(str(exc)) from None
        raise CliFailure(str(exc)) from None
    except SteplineError as exc:
        raise CliFailure(str(exc)) from None


def _with_way_out(exc: BaseException) -> str:
    """The error's message, saying how to go on where a new user would not know."""
    if isinstance(exc, WorkflowNotFoundError) and not exc.known:
        # Before any worker ran and without a stepline.toml, the CLI knows no workflow at all.
        return (
            f"unknown workflow {exc.name!r}; no workflow is known yet: start a worker for it "
            "(`stepline worker path/to/file.py:ClassName` registers its workflows in the "
            "database) or add [[workflows]] to stepline.toml"
        )
    return str(exc)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine with stepline errors turned into one-line CLI errors."""
    with cli_errors():
        return _loop.run(coro)


def make_console(*, stderr: bool = False) -> Console:
    """A console that colours only on a terminal and never wraps piped output."""
    probe = Console(stderr=stderr)
    options: dict[str, Any] = {
        "stderr": stderr,
        "highlight": False,
        "markup": False,
        "emoji": False,
    }
    if not probe.is_terminal:
        options["width"] = 4096
    return Console(**options)


@dataclass
class State:
    """Per-invocation state: global options, the project (loaded on first use), consoles."""

    database: str | None = None
    config_path: Path | None = None
    wrangler: Path | None = None
    """``--wrangler``: the project is this wrangler file's (worker, run, serve)."""
    _project: ProjectConfig | None = None
    _wrangler_project: WranglerProject | None = None
    out: Console = field(default_factory=make_console)
    err: Console = field(default_factory=lambda: make_console(stderr=True))

    @property
    def project(self) -> ProjectConfig:
        if self._project is None:
            if self.wrangler is not None:
                self._project = self.wrangler_project.config
                return self._project
            with cli_errors():
                self._project = load_project(config_path=self.config_path, database=self.database)
        return self._project

    @property
    def wrangler_project(self) -> WranglerProject:
        """The ``--wrangler`` project, loaded once (its ignored keys are listed then)."""
        if self.wrangler is None:
            raise CliError("this command needs --wrangler wrangler.jsonc")
        if self._wrangler_project is None:
            if self.config_path is not None:
                fail("give --config or --wrangler, not both")
            with cli_errors():
                self._wrangler_project = load_wrangler(self.wrangler, database=self.database)
            warning = self._wrangler_project.ignored_warning()
            if warning is not None:
                click.echo(f"warning: {warning}", err=True)
        return self._wrangler_project

    def engine(self, workflows: Iterable[Any] = (), **options: Any) -> Engine:
        """An engine on the project's database with its named limits (no worker unless asked).
        A SQLite URL naming a directory stops here, before a command prints or starts anything."""
        self.check_not_directory()
        options.setdefault("worker", False)
        options.setdefault("limits", self.project.limits)
        options.setdefault("payloads", self.project.payloads)
        if "telemetry" not in options:  # traces as [telemetry] says (clients' creates too)
            options["telemetry"] = Telemetry(traces=self.project.telemetry.traces)
        merged = {**self.project.worker.engine_options(), **options}
        with cli_errors():
            engine = Engine(self.project.database, workflows, **merged)
        if self._wrangler_project is not None:
            self._wrangler_project.env.attach(engine)  # self.env's bindings act through it
        return engine

    @contextlib.asynccontextmanager
    async def client(self, workflows: Iterable[Any] = ()) -> AsyncIterator[Engine]:
        """An opened client engine on an existing database: a missing SQLite file is an error
        (exit 2, :meth:`require_database`), never created empty. ``workflows`` are registered
        in the database (a trigger of a configured workflow no worker registered yet)."""
        self.require_database()
        async with self.engine(workflows, create=False) as engine:
            yield engine

    def require_database(self) -> None:
        """Stop with exit code 2 if the SQLite file does not exist: only a worker, `run` and
        `db init` create a database (a mistyped path must not become one no worker reads)."""
        missing = self.missing_database()
        if missing is not None:
            raise CliError(
                f"{missing}; create it with `stepline db init` (`stepline worker` and "
                "`stepline run` create it too), or pass the right --database"
            )

    def missing_database(self) -> str | None:
        """For a SQLite file that does not exist yet, ``no stepline database at PATH (where the
        URL came from)``; else None."""
        if self.database_exists():
            return None
        path = path_from_url(self.project.database)
        return f"no stepline database at {path} ({self.database_source()})"

    def check_not_directory(self) -> None:
        """Stop with exit code 2 if the SQLite URL names a directory."""
        url = self.project.database
        if url.startswith("sqlite:"):
            with cli_errors():
                problem = directory_message(path_from_url(url), self.database_source())
            if problem is not None:
                raise CliError(problem)

    def database_exists(self) -> bool:
        """False only for a SQLite file that does not exist yet (servers always exist)."""
        url = self.project.database
        if not url.startswith("sqlite:"):
            return True
        with cli_errors():
            path = path_from_url(url)
        return path == ":memory:" or Path(path).exists()

    def database_source(self) -> str:
        """Where the database URL came from, for messages."""
        project = self.project
        if project.database_source == "option":
            return "from --database"
        if project.database_source == "environment":
            return "from STEPLINE_DATABASE_URL"
        if project.database_source == "config":
            return f"from {project.path}"
        if project.path is not None:
            return f"the default, next to {project.path}"
        return "the default, in the current directory"


pass_state = click.make_pass_decorator(State, ensure=True)


def print_json(value: Any) -> None:
    """Machine-readable output: indented JSON on stdout."""
    text = orjson.dumps(readable(value), option=orjson.OPT_INDENT_2).decode()
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def fail(message: str) -> NoReturn:
    """Stop with a bad-input error (exit code 2)."""
    raise CliError(message)


async def known_workflows(engine: Engine, state: State) -> list[str]:
    """Workflow names in the database and in the configuration."""
    names = {info.name for info in await engine.list_workflows()}
    names.update(state.project.workflow_names)
    return sorted(names)


async def check_workflow(engine: Engine, state: State, name: str) -> None:
    """Raise WorkflowNotFoundError (listing the known ones) unless ``name`` is known."""
    validate_name(name, what="workflow name")
    known = await known_workflows(engine, state)
    if name not in known:
        raise WorkflowNotFoundError(name, known)


async def resolve_instance(engine: Engine, state: State, workflow: str, id: str) -> InstanceRecord:
    """The instance ``id`` of ``workflow``; ``latest`` means the newest one."""
    await check_workflow(engine, state, workflow)
    if id == "latest":
        page = await engine.list_instances(workflow, limit=1)
        if not page.instances:
            raise CliError(f"workflow {workflow!r} has no instances yet, so there is no latest")
        return page.instances[0]
    validate_name(id, what="instance id")
    return await (await engine.get_instance(workflow, id)).record()


def read_json_input(
    inline: str | None, inline_name: str, path: str | None, file_option: str
) -> Any:
    """The JSON given inline (an argument or option) or in the file at ``path`` (``-``: stdin);
    None when neither is given. Both at once, or a file that cannot be read: exit code 2."""
    if inline is not None and path is not None:
        fail(f"give {inline_name} or {file_option}, not both")
    if inline is not None:
        return parse_json_argument(inline, what=inline_name)
    if path is None:
        return None
    source = f"{file_option} {'<stdin>' if path == '-' else path}"
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        fail(f"cannot read {source}: {exc.strerror or exc}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{source} is not UTF-8 text: {exc}")
    return parse_json_argument(text, what=source)


def json_file_option(name: str, help: str) -> Callable[[Any], Any]:
    """``--params-file F`` / ``--payload-file F``: JSON read from a file, ``-`` for stdin (read
    by :func:`read_json_input`, so that a missing file is a one-line error like a bad one)."""
    return click.option(name, metavar="FILE", help=help)


def json_option(fn: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")(fn)
