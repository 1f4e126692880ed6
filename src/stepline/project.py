"""Project configuration: ``stepline.toml`` (or ``[tool.stepline]`` in ``pyproject.toml``).

The configuration is found by walking up from the current directory, like ``wrangler.toml``::

    # stepline.toml
    database = "sqlite:///stepline.db"        # relative SQLite paths are relative to this file

    [[workflows]]                             # one table per workflow: _project_workflows
    name = "documents"                        # the workflow name used by the CLI and the API
    class_name = "documents:DocumentWorkflow" # module:attribute, importable from this directory
    concurrency = 10                          # flow control over the code's: _project_overrides

    [worker]
    concurrency = 20
    lease = "30 seconds"
    poll_interval = "0.5 seconds"
    grace_period = "10 seconds"
    heartbeat = "5 seconds"

    [[schedules]]                             # cron schedules (docs/triggers.md)
    workflow = "documents"
    cron = "0 9 * * MON-FRI"
    timezone = "Europe/Paris"

    [[triggers.queue]]                        # one table per queue consumed (docs/triggers.md)
    broker = "redis://127.0.0.1:6379/0"
    queue = "documents"
    workflow = "documents"

    [cloudflare]                              # stepline serve's Cloudflare API: _project_cloudflare
    account_id = "0123abcd"                   # ([http] tokens: _project_http)

    [telemetry]                               # traces and metrics, [logging]: _project_telemetry
    metrics_port = 9464

The database URL is taken, first match wins, from the ``--database`` option, the
``STEPLINE_DATABASE_URL`` environment variable, the ``database`` key, and finally
``sqlite:///stepline.db`` next to the configuration file (in the current directory when there is
none). Nothing here runs at import time: the environment is read by :func:`load_project`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ._config_keys import check_keys
from ._project_cloudflare import CloudflareConfig, read_cloudflare
from ._project_http import HttpConfig, read_http
from ._project_overrides import (
    check_limit_references,
    named_limits,
    with_limits,
    with_schedules,
)
from ._project_payloads import read_payloads
from ._project_telemetry import TelemetryConfig, read_telemetry
from ._project_workflows import WorkflowEntry as WorkflowEntry
from ._project_workflows import read_workflows
from .durations import parse_worker_duration
from .errors import ConfigError, DefinitionError
from .limits import Limit
from .payloads import PayloadConfig
from .schedule import Schedule
from .workflow import Workflow, definition_of

CONFIG_FILE = "stepline.toml"
PYPROJECT_FILE = "pyproject.toml"
ENV_DATABASE = "STEPLINE_DATABASE_URL"
DEFAULT_DATABASE_FILE = "stepline.db"

_TOP_KEYS = (
    "database", "workflows", "worker", "triggers", "schedules", "limits", "cloudflare",
    "telemetry", "logging", "payloads", "encryption", "http",
)  # fmt: skip
_TRIGGER_KINDS = ("queue",)
_SCHEDULE_KEYS = (
    "workflow", "cron", "timezone", "params", "name", "catch_up", "catch_up_limit", "overlap",
)  # fmt: skip
_WORKER_KEYS = ("concurrency", "lease", "poll_interval", "grace_period", "retention", "heartbeat")


@dataclass(frozen=True)
class QueueTriggerEntry:
    """One ``[[triggers.queue]]`` table as written; :class:`stepline.triggers.QueueTrigger`
    checks its values when the trigger is made (``QueueTrigger.from_entry``)."""

    name: str
    """The trigger's name: its ``name`` key, else its ``queue``."""
    table: Mapping[str, Any]
    key: str
    """Where the table is in the file, for error messages: ``triggers.queue[0]``."""


@dataclass(frozen=True)
class ScheduleEntry:
    """One ``[[schedules]]`` table: a schedule added to a configured workflow's own."""

    workflow: str
    schedule: Schedule
    key: str
    """Where the table is in the file, for error messages: ``schedules[0]``."""


@dataclass(frozen=True)
class WorkerConfig:
    """The ``[worker]`` table (every key optional)."""

    concurrency: int = 100
    lease: float = 30.0
    poll_interval: float = 0.5
    grace_period: float = 10.0
    retention: float | None = None
    """Delete finished instances this long after they ended (None: keep them)."""
    heartbeat: float = 5.0
    """Seconds between a worker's heartbeats (its row in ``stepline workers list``)."""

    def engine_options(self) -> dict[str, Any]:
        """Keyword arguments for :class:`stepline.Engine`."""
        return {
            "concurrency": self.concurrency,
            "lease": self.lease,
            "poll_interval": self.poll_interval,
            "grace_period": self.grace_period,
            "retention": self.retention,
            "heartbeat": self.heartbeat,
        }


@dataclass(frozen=True)
class ProjectConfig:
    """A loaded project: where it is, which database, which workflows, worker settings."""

    root: Path
    """The project directory: the configuration file's directory, else the current directory."""
    database: str
    """The database URL to use (overrides applied, relative SQLite paths made absolute)."""
    database_source: str
    """Where ``database`` came from: ``option``, ``environment``, ``config`` or ``default``."""
    path: Path | None = None
    """The configuration file, or None when none was found."""
    workflows: tuple[WorkflowEntry, ...] = ()
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    queue_triggers: tuple[QueueTriggerEntry, ...] = ()
    schedules: tuple[ScheduleEntry, ...] = ()
    limits: tuple[Limit, ...] = ()
    """The ``[[limits]]`` tables: named limits, for ``Engine(limits=...)``."""
    cloudflare: CloudflareConfig = field(default_factory=CloudflareConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    """The ``[telemetry]`` and ``[logging]`` tables."""
    payloads: PayloadConfig | None = None
    """The ``[payloads]`` and ``[encryption]`` tables, for ``Engine(payloads=...)``."""
    http: HttpConfig = field(default_factory=HttpConfig)

    @property
    def workflow_names(self) -> list[str]:
        return [entry.name for entry in self.workflows]

    def entry(self, name: str) -> WorkflowEntry | None:
        """The ``[[workflows]]`` entry named ``name``, if any."""
        for entry in self.workflows:
            if entry.name == name:
                return entry
        return None

    def describe_source(self) -> str:
        """``the configuration file /x/stepline.toml`` or ``no configuration file``."""
        return f"{self.path}" if self.path is not None else "no configuration file"


# -- finding and reading the file ---------------------------------------------------------------


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}; fix the syntax there") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None


def _pyproject_section(path: Path) -> dict[str, Any] | None:
    """The ``[tool.stepline]`` table of a pyproject.toml, or None when it has none."""
    data = _read_toml(path)
    tool = data.get("tool")
    if not isinstance(tool, dict) or "stepline" not in tool:
        return None
    section = tool["stepline"]
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: key 'tool.stepline' must be a table ([tool.stepline])")
    return section


def find_config(start: Path) -> Path | None:
    """The nearest ``stepline.toml``, or ``pyproject.toml`` with ``[tool.stepline]``, at or
    above ``start``. In one directory ``stepline.toml`` wins."""
    directory = start.resolve()
    for candidate in (directory, *directory.parents):
        config = candidate / CONFIG_FILE
        if config.is_file():
            return config
        pyproject = candidate / PYPROJECT_FILE
        if pyproject.is_file() and _pyproject_section(pyproject) is not None:
            return pyproject
    return None


def _section(path: Path) -> tuple[dict[str, Any], str]:
    """The settings table of a config file and the prefix naming its keys in messages."""
    if path.name == PYPROJECT_FILE:
        section = _pyproject_section(path)
        if section is None:
            raise ConfigError(f"{path} has no [tool.stepline] table; add one or use stepline.toml")
        return section, "tool.stepline."
    return _read_toml(path), ""


# -- validation ---------------------------------------------------------------------------------


def _duration(value: object, path: Path, key: str) -> float:
    """The ``[worker]`` duration ``key`` (``worker.lease``) in seconds, by ``Engine``'s rules."""
    try:
        return parse_worker_duration(key.rpartition(".")[2], value, what=key)
    except ValueError as exc:
        raise ConfigError(f"{path}: key '{key}': {exc}") from None


def _worker(raw: Any, path: Path, prefix: str) -> WorkerConfig:
    key = f"{prefix}worker"
    if raw is None:
        return WorkerConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: key '{key}' must be a table ([worker])")
    check_keys(raw, _WORKER_KEYS, path, key)
    defaults = WorkerConfig()
    concurrency = raw.get("concurrency", defaults.concurrency)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(
            f"{path}: key '{key}.concurrency' must be a whole number of at least 1, "
            f"got {concurrency!r}"
        )
    return WorkerConfig(
        concurrency=concurrency,
        lease=_duration(raw.get("lease", defaults.lease), path, f"{key}.lease"),
        poll_interval=_duration(
            raw.get("poll_interval", defaults.poll_interval), path, f"{key}.poll_interval"
        ),
        grace_period=_duration(
            raw.get("grace_period", defaults.grace_period), path, f"{key}.grace_period"
        ),
        retention=_duration(raw["retention"], path, f"{key}.retention")
        if "retention" in raw
        else None,
        heartbeat=_duration(raw.get("heartbeat", defaults.heartbeat), path, f"{key}.heartbeat"),
    )


def _queue_triggers(raw: Any, path: Path, prefix: str) -> tuple[QueueTriggerEntry, ...]:
    key = f"{prefix}triggers"
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: key '{key}' must be a table ([[triggers.queue]])")
    check_keys(raw, _TRIGGER_KINDS, path, key)
    tables = raw.get("queue", [])
    if not isinstance(tables, list):
        raise ConfigError(
            f"{path}: key '{key}.queue' must be an array of tables ([[triggers.queue]])"
        )
    entries: list[QueueTriggerEntry] = []
    seen: dict[str, str] = {}
    for index, item in enumerate(tables):
        where = f"{key}.queue[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: key '{where}' must be a table ([[triggers.queue]])")
        for text in ("name", "queue"):
            if text in item and not isinstance(item[text], str):
                raise ConfigError(f"{path}: key '{where}.{text}' must be a string")
        if "queue" not in item:
            raise ConfigError(f"{path}: key '{where}.queue' is missing")
        name = item.get("name") or item["queue"]
        if name in seen:
            raise ConfigError(
                f"{path}: key '{where}': a queue trigger named {name!r} is already defined by "
                f"{seen[name]}; give one of them another name (key 'name')"
            )
        seen[name] = where
        entries.append(QueueTriggerEntry(name, dict(item), where))
    return tuple(entries)


def _schedules(raw: Any, path: Path, prefix: str) -> tuple[ScheduleEntry, ...]:
    """The ``[[schedules]]`` tables; each key is checked as it is added, so an error names it."""
    key = f"{prefix}schedules"
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: key '{key}' must be an array of tables ([[schedules]])")
    entries: list[ScheduleEntry] = []
    for index, item in enumerate(raw):
        where = f"{key}[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: key '{where}' must be a table ([[schedules]])")
        check_keys(item, _SCHEDULE_KEYS, path, where)
        for required in ("workflow", "cron"):
            if required not in item:
                raise ConfigError(f"{path}: key '{where}.{required}' is missing")
        workflow = item["workflow"]
        if not isinstance(workflow, str):
            raise ConfigError(f"{path}: key '{where}.workflow' must be a string")
        options: dict[str, Any] = {}
        schedule: Schedule | None = None
        for name in _SCHEDULE_KEYS[1:]:
            if name not in item:
                continue
            if name != "cron":
                options[name] = item[name]
            try:
                schedule = Schedule(item["cron"], **options)
            except DefinitionError as exc:
                raise ConfigError(f"{path}: key '{where}.{name}': {exc}") from None
        if schedule is not None:
            entries.append(ScheduleEntry(workflow, schedule, where))
    return tuple(entries)


def resolve_database_url(url: str, base: Path) -> str:
    """Make a relative SQLite path absolute against ``base``; other URLs are returned as is."""
    if not url.startswith("sqlite:///"):
        return url
    rest = url[len("sqlite:///") :]
    if rest in ("", ":memory:") or rest.startswith("/"):
        return url
    return f"sqlite:///{(base / rest).resolve()}"


@dataclass(frozen=True)
class _FileConfig:
    """What one configuration file says."""

    database: str | None
    workflows: tuple[WorkflowEntry, ...]
    worker: WorkerConfig
    triggers: tuple[QueueTriggerEntry, ...]
    schedules: tuple[ScheduleEntry, ...]
    limits: tuple[Limit, ...] = ()
    cloudflare: CloudflareConfig = field(default_factory=CloudflareConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    payloads: PayloadConfig | None = None
    http: HttpConfig = field(default_factory=HttpConfig)


def read_config(path: Path) -> _FileConfig:
    """Parse and validate one configuration file."""
    data, prefix = _section(path)
    check_keys(data, _TOP_KEYS, path, prefix.rstrip("."))
    database = data.get("database")
    if database is not None and (not isinstance(database, str) or not database.strip()):
        raise ConfigError(
            f"{path}: key '{prefix}database' must be a database URL such as "
            "'sqlite:///stepline.db' or 'postgresql://user@host/db'"
        )
    if database is not None and not database.startswith(("sqlite:", "postgres")):
        raise ConfigError(
            f"{path}: key '{prefix}database' has an unsupported URL {database!r}; use "
            "sqlite:///path/to/file.db or postgresql://user:password@host:5432/dbname"
        )
    workflows = read_workflows(data.get("workflows"), path, prefix)
    worker = _worker(data.get("worker"), path, prefix)
    triggers = _queue_triggers(data.get("triggers"), path, prefix)
    schedules = _schedules(data.get("schedules"), path, prefix)
    limits = named_limits(data.get("limits"), path, prefix)
    check_limit_references(((entry.key, entry.limits) for entry in workflows), limits, path)
    known = {entry.name for entry in workflows}
    for entry in schedules:
        if entry.workflow not in known:
            raise ConfigError(
                f"{path}: key '{entry.key}.workflow': no [[workflows]] entry is named "
                f"{entry.workflow!r} (configured: {', '.join(sorted(known)) or 'none'})"
            )
    cloudflare = read_cloudflare(data.get("cloudflare"), path, prefix)
    telemetry = read_telemetry(data.get("telemetry"), data.get("logging"), path, prefix)
    payloads = read_payloads(data.get("payloads"), data.get("encryption"), path, prefix)
    http = read_http(data.get("http"), path, prefix)
    return _FileConfig(database, workflows, worker, triggers, schedules, limits, cloudflare,
                       telemetry, payloads, http)  # fmt: skip


def load_project(
    cwd: Path | None = None,
    *,
    config_path: Path | None = None,
    database: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProjectConfig:
    """Find and load the project configuration, applying the database overrides.

    ``config_path`` skips the search. ``database`` (the ``--database`` option) beats
    ``$STEPLINE_DATABASE_URL`` (read from ``environ``, default ``os.environ``), which beats the
    file's ``database`` key. Raises :class:`~stepline.ConfigError` naming the file and the key.
    """
    here = (cwd or Path.cwd()).resolve()
    env = os.environ if environ is None else environ
    if config_path is not None:
        path: Path | None = config_path.resolve()
        if not config_path.is_file():
            raise ConfigError(f"configuration file {config_path} does not exist")
    else:
        path = find_config(here)
    root = path.parent if path is not None else here
    read = _FileConfig(None, (), WorkerConfig(), (), ())
    if path is not None:
        read = read_config(path)
    configured = read.database
    if database:
        url, source = resolve_database_url(database, here), "option"
    elif env.get(ENV_DATABASE):
        url, source = resolve_database_url(env[ENV_DATABASE], here), "environment"
    elif configured is not None:
        url, source = resolve_database_url(configured, root), "config"
    else:
        url, source = resolve_database_url(f"sqlite:///{DEFAULT_DATABASE_FILE}", root), "default"
    return ProjectConfig(
        root, url, source, path, read.workflows, read.worker, read.triggers, read.schedules,
        read.limits, read.cloudflare, read.telemetry, read.payloads, read.http,
    )  # fmt: skip


# -- importing workflow code --------------------------------------------------------------------


def _add_to_path(directory: Path) -> None:
    text = str(directory)
    if text not in sys.path:
        sys.path.insert(0, text)


def import_file(path: Path) -> ModuleType:
    """Import a Python file as a module named after it; its directory goes on ``sys.path`` so
    that modules next to it import. Errors raise :class:`~stepline.ConfigError`."""
    path = path.resolve()
    if not path.is_file():
        raise ConfigError(f"file {path} does not exist")
    _add_to_path(path.parent)
    name = path.stem
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == str(path):
        return existing
    if existing is not None or not name.isidentifier():
        name = f"_stepline_target_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ConfigError(f"cannot import {path}: {type(exc).__name__}: {exc}") from exc
    return module


def import_module(name: str, root: Path) -> ModuleType:
    """Import ``name`` with ``root`` on ``sys.path``; errors raise ConfigError."""
    _add_to_path(root)
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise ConfigError(f"cannot import module {name!r}: {type(exc).__name__}: {exc}") from exc


def attribute(module: ModuleType, name: str, where: str) -> Any:
    """``module.name`` (dotted names allowed), or ConfigError naming ``where``."""
    value: Any = module
    for part in name.split("."):
        if not hasattr(value, part):
            raise ConfigError(f"{where}: module {module.__name__!r} has no attribute {name!r}")
        value = getattr(value, part)
    return value


def as_workflow(value: Any, where: str) -> Any:
    """Check that ``value`` is something an Engine registers, or raise ConfigError."""
    try:
        definition_of(value)
    except (DefinitionError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return value


def named(workflow: Any, name: str, where: str) -> Any:
    """``workflow`` registered under ``name``: a class is subclassed with that name when its
    own differs; an object (Pipeline, Dag) must already carry the name."""
    definition = definition_of(workflow)
    if definition.name == name:
        return workflow
    if isinstance(workflow, type) and issubclass(workflow, Workflow):
        return type(
            workflow.__name__,
            (workflow,),
            {
                "name": name,
                "__module__": workflow.__module__,
                "__qualname__": workflow.__qualname__,
                "__doc__": workflow.__doc__,
            },
        )
    raise ConfigError(
        f"{where}: the object is named {definition.name!r}, not {name!r}; "
        f"set name = {definition.name!r} in the configuration"
    )


def load_workflow(config: ProjectConfig, entry: WorkflowEntry) -> Any:
    """Import a configured workflow (project directory on ``sys.path``), named as configured."""
    where = f"{config.path}: key '{entry.key}.class_name' ({entry.class_name})"
    module_name, _, attr = entry.class_name.partition(":")
    try:
        module = import_module(module_name, config.root)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc.__cause__
    loaded = named(as_workflow(attribute(module, attr, where), where), entry.name, where)
    loaded = with_limits(loaded, entry.limits)
    extra = [s.schedule for s in config.schedules if s.workflow == entry.name]
    if not extra:
        return loaded
    return as_workflow(with_schedules(loaded, extra), f"{config.path}: key '[[schedules]]'")


def load_workflows(config: ProjectConfig) -> list[Any]:
    """Import every configured workflow."""
    return [load_workflow(config, entry) for entry in config.workflows]
