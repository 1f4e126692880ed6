"""A wrangler project as it is: ``wrangler.jsonc`` / ``wrangler.json`` (JSON with comments and
trailing commas, read with the ``json5`` library) or ``wrangler.toml``, its ``main`` module and
its ``workflows``, made the same :class:`~stepline.project.ProjectConfig` a ``stepline.toml``
gives, with the workflow classes loaded and their ``self.env`` bound.

Keys read: ``main``, ``workflows`` (``name``, ``binding``, ``class_name``, ``script_name``) and
``vars``; ``name``, ``compatibility_date``, ``compatibility_flags`` and ``$schema`` are
understood and need nothing. Every other key is listed in :attr:`WranglerConfig.ignored`, which
the commands print once at start-up.
"""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import json5

from ..errors import ConfigError
from ..project import (
    DEFAULT_DATABASE_FILE,
    ENV_DATABASE,
    ProjectConfig,
    WorkflowEntry,
    attribute,
    import_file,
    resolve_database_url,
)
from ..workflow import validate_name
from . import workers
from ._bindings import Env
from ._entrypoint import WorkflowEntrypoint

UNDERSTOOD = (
    "$schema", "name", "main", "compatibility_date", "compatibility_flags", "workflows", "vars",
)  # fmt: skip
_WORKFLOW_KEYS = ("name", "binding", "class_name", "script_name")


@dataclass(frozen=True)
class WranglerWorkflow:
    """One entry of ``workflows``: served here unless ``script_name`` names another Worker
    (then only its binding is provided: another process serves it)."""

    name: str
    binding: str
    class_name: str | None
    script_name: str | None
    key: str
    """Where it is in the file: ``workflows[0]``."""


@dataclass(frozen=True)
class WranglerConfig:
    """What a wrangler file says that stepline uses."""

    path: Path
    main: Path
    workflows: tuple[WranglerWorkflow, ...]
    vars: Mapping[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    """Top-level keys stepline does not use (KV, R2, D1 and other bindings, routes, ...)."""

    @property
    def served(self) -> tuple[WranglerWorkflow, ...]:
        return tuple(w for w in self.workflows if w.script_name is None)


@dataclass(frozen=True)
class WranglerProject:
    """A loaded wrangler project: its project config, its workflow classes (named as the file
    names them) and the ``env`` their ``self.env`` is; attach an engine to the env to use its
    bindings (``project.env.attach(engine)``)."""

    wrangler: WranglerConfig
    config: ProjectConfig
    workflows: dict[str, type[WorkflowEntrypoint]]
    env: Env

    def ignored_warning(self) -> str | None:
        """The one line listing the keys stepline ignores, or None."""
        if not self.wrangler.ignored:
            return None
        return (
            f"{self.wrangler.path}: stepline ignores these keys: "
            f"{', '.join(self.wrangler.ignored)} (it serves main's workflows, with their "
            "bindings and vars, and nothing else)"
        )


def read_wrangler(path: Path) -> WranglerConfig:
    """Parse and check a wrangler file; :class:`~stepline.ConfigError` names the file and key."""
    path = path.resolve()
    data = _parse(path)
    main_value = data.get("main")
    if main_value is None:
        raise ConfigError(
            f"{path}: key 'main' is missing; set it to the Python module of the "
            'workflows, e.g. "main": "src/entry.py"'
        )
    if not isinstance(main_value, str) or not main_value.endswith(".py"):
        raise ConfigError(f"{path}: key 'main' must name a Python file (.py), got {main_value!r}")
    main = (path.parent / main_value).resolve()
    if not main.is_file():
        raise ConfigError(f"{path}: key 'main': {main} does not exist")
    workflows = _workflows(data.get("workflows"), path)
    variables = data.get("vars", {})
    if not isinstance(variables, dict):
        raise ConfigError(f"{path}: key 'vars' must be a table of names and values")
    for name in variables:
        _identifier(name, path, f"vars.{name}")
    ignored = tuple(sorted(key for key in data if key not in UNDERSTOOD))
    return WranglerConfig(path, main, workflows, dict(variables), ignored)


def load_wrangler(
    path: str | os.PathLike[str],
    *,
    database: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> WranglerProject:
    """Read a wrangler project, import its ``main`` (with Cloudflare's ``workers`` module
    provided) and load its workflow classes. The database: ``database``, else
    ``$STEPLINE_DATABASE_URL``, else ``stepline.db`` next to the wrangler file."""
    wrangler = read_wrangler(Path(path))
    env = Env({w.binding: w.name for w in wrangler.workflows}, wrangler.vars)
    module = _import_main(wrangler)
    loaded: dict[str, type[WorkflowEntrypoint]] = {}
    entries: list[WorkflowEntry] = []
    for entry in wrangler.served:
        class_name = entry.class_name or ""  # a served entry has one (checked when read)
        where = f"{wrangler.path}: key '{entry.key}.class_name'"
        cls = attribute(module, class_name, where)
        if not (isinstance(cls, type) and issubclass(cls, WorkflowEntrypoint)):
            raise ConfigError(
                f"{where}: {class_name!r} in {wrangler.main} is not a WorkflowEntrypoint "
                "subclass; a workflow class is `class MyWorkflow(WorkflowEntrypoint)` with "
                "`from workers import WorkflowEntrypoint`"
            )
        loaded[entry.name] = _bound(cls, entry.name, env)
        entries.append(WorkflowEntry(entry.name, f"{module.__name__}:{class_name}", entry.key))
    env_url = (os.environ if environ is None else environ).get(ENV_DATABASE)
    root = wrangler.path.parent
    if database:
        url, source = resolve_database_url(database, Path.cwd()), "option"
    elif env_url:
        url, source = resolve_database_url(env_url, Path.cwd()), "environment"
    else:
        url, source = resolve_database_url(f"sqlite:///{DEFAULT_DATABASE_FILE}", root), "default"
    config = ProjectConfig(root, url, source, wrangler.path, tuple(entries))
    return WranglerProject(wrangler, config, loaded, env)


# -- reading ------------------------------------------------------------------------------------


def _parse(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text: {exc}") from None
    if path.suffix == ".toml":
        try:
            data: Any = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}; fix the syntax there") from None
    elif path.suffix in (".jsonc", ".json"):
        try:
            data = json5.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{path} is not valid JSONC: {exc}; fix the syntax there") from None
    else:
        raise ConfigError(
            f"{path}: a wrangler file is wrangler.jsonc, wrangler.json or wrangler.toml"
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the file must hold an object of settings, not {type(data).__name__}"
        )
    return data


def _workflows(raw: Any, path: Path) -> tuple[WranglerWorkflow, ...]:
    if raw is None:
        raise ConfigError(
            f"{path}: key 'workflows' is missing; list the workflows to serve, each with "
            "name, binding and class_name"
        )
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{path}: key 'workflows' must be a non-empty list of workflows")
    found: list[WranglerWorkflow] = []
    names: dict[str, str] = {}
    bindings: dict[str, str] = {}
    for index, item in enumerate(raw):
        key = f"workflows[{index}]"
        if not isinstance(item, dict):
            raise ConfigError(
                f"{path}: key '{key}' must be an object with name, binding, class_name"
            )
        unknown = sorted(set(item) - set(_WORKFLOW_KEYS))
        if unknown:
            raise ConfigError(
                f"{path}: unknown key '{key}.{unknown[0]}'; allowed keys there: "
                f"{', '.join(_WORKFLOW_KEYS)}"
            )
        for required in ("name", "binding"):
            if not isinstance(item.get(required), str):
                raise ConfigError(f"{path}: key '{key}.{required}' is missing or not a string")
        script = item.get("script_name")
        if script is not None and not isinstance(script, str):
            raise ConfigError(f"{path}: key '{key}.script_name' must be a string")
        class_name = item.get("class_name")
        if class_name is not None and not isinstance(class_name, str):
            raise ConfigError(f"{path}: key '{key}.class_name' must be a string")
        if class_name is None and script is None:
            raise ConfigError(
                f"{path}: key '{key}.class_name' is missing: name the workflow's class in main"
            )
        try:
            name = validate_name(item["name"], what="workflow name")
        except ValueError as exc:
            raise ConfigError(f"{path}: key '{key}.name': {exc}") from None
        binding = _identifier(item["binding"], path, f"{key}.binding")
        for seen, value, what in ((names, name, "name"), (bindings, binding, "binding")):
            if value in seen:
                raise ConfigError(
                    f"{path}: key '{key}.{what}': {value!r} is already used by {seen[value]}"
                )
            seen[value] = key
        found.append(WranglerWorkflow(name, binding, class_name, script, key))
    return tuple(found)


def _identifier(name: object, path: Path, key: str) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(
            f"{path}: key '{key}': {name!r} is not a valid binding name (letters, "
            "digits and '_', not starting with a digit)"
        )
    return name


# -- loading ------------------------------------------------------------------------------------


def _import_main(wrangler: WranglerConfig) -> ModuleType:
    """Import ``main`` with ``workers`` (and ``workers.workflows``) provided by stepline."""
    for name, module in (("workers", workers), ("workers.workflows", workers.workflows)):
        present = sys.modules.get(name)
        if present is not None and present is not module:
            raise ConfigError(
                f"{wrangler.path}: a module named {name!r} is already imported "
                f"({getattr(present, '__file__', present)!r}), so stepline cannot provide "
                "Cloudflare's; run the wrangler project in a process of its own"
            )
        sys.modules[name] = module
    return import_file(wrangler.main)


def _bound(cls: type[WorkflowEntrypoint], name: str, env: Env) -> type[WorkflowEntrypoint]:
    """``cls`` named as the wrangler file names it, its ``self.env`` the project's env."""
    return type(
        cls.__name__,
        (cls,),
        {
            "name": name,
            "env": env,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        },
    )
