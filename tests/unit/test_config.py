"""Project configuration: finding stepline.toml / [tool.stepline], the database URL and its
overrides, worker settings, importing configured workflows, and the errors for broken files."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepline import ConfigError, Workflow
from stepline.project import (
    WorkerConfig,
    find_config,
    load_project,
    load_workflow,
    load_workflows,
    resolve_database_url,
)
from stepline.workflow import definition_of

NO_ENV: dict[str, str] = {}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def clean_modules() -> Iterator[None]:
    """Forget modules and sys.path entries a test imported from its temporary project."""
    before_modules = set(sys.modules)
    before_path = list(sys.path)
    yield
    for name in set(sys.modules) - before_modules:
        del sys.modules[name]
    sys.path[:] = before_path


# -- finding the file ---------------------------------------------------------------------------


def test_walks_up_to_the_nearest_stepline_toml(tmp_path: Path) -> None:
    config = write(tmp_path / "stepline.toml", "")
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    assert find_config(nested) == config
    project = load_project(nested, environ=NO_ENV)
    assert project.path == config
    assert project.root == tmp_path.resolve()


def test_nearest_file_wins(tmp_path: Path) -> None:
    write(tmp_path / "stepline.toml", "")
    inner = write(tmp_path / "sub" / "stepline.toml", "")
    assert find_config(tmp_path / "sub") == inner


def test_pyproject_tool_stepline_is_used_and_stepline_toml_wins_next_to_it(
    tmp_path: Path,
) -> None:
    pyproject = write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.stepline]\ndatabase = "sqlite:///from-pyproject.db"\n',
    )
    project = load_project(tmp_path, environ=NO_ENV)
    assert project.path == pyproject
    assert project.database == f"sqlite:///{tmp_path.resolve() / 'from-pyproject.db'}"
    toml = write(tmp_path / "stepline.toml", 'database = "sqlite:///from-toml.db"\n')
    assert load_project(tmp_path, environ=NO_ENV).path == toml


def test_pyproject_without_tool_stepline_is_skipped(tmp_path: Path) -> None:
    outer = write(tmp_path / "stepline.toml", "")
    write(tmp_path / "pkg" / "pyproject.toml", '[project]\nname = "pkg"\n')
    assert find_config(tmp_path / "pkg") == outer


def test_no_config_means_default_database_in_the_current_directory(tmp_path: Path) -> None:
    # tmp_path has no stepline.toml above it on a normal machine; guard anyway.
    if find_config(tmp_path) is not None:
        pytest.skip("a stepline.toml exists above the temporary directory")
    project = load_project(tmp_path, environ=NO_ENV)
    assert project.path is None
    assert project.workflows == ()
    assert project.database == f"sqlite:///{tmp_path.resolve() / 'stepline.db'}"
    assert project.database_source == "default"


# -- the database URL ---------------------------------------------------------------------------


def test_default_database_is_next_to_the_config_file(tmp_path: Path) -> None:
    write(tmp_path / "stepline.toml", "")
    (tmp_path / "deep").mkdir()
    project = load_project(tmp_path / "deep", environ=NO_ENV)
    assert project.database == f"sqlite:///{tmp_path.resolve() / 'stepline.db'}"


def test_relative_sqlite_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    write(tmp_path / "stepline.toml", 'database = "sqlite:///data/app.db"\n')
    (tmp_path / "deep").mkdir()
    project = load_project(tmp_path / "deep", environ=NO_ENV)
    assert project.database == f"sqlite:///{tmp_path.resolve() / 'data' / 'app.db'}"
    assert project.database_source == "config"


def test_absolute_and_server_urls_are_kept() -> None:
    assert resolve_database_url("sqlite:////abs/x.db", Path("/else")) == "sqlite:////abs/x.db"
    url = "postgresql://postgres@127.0.0.1:5432/test"
    assert resolve_database_url(url, Path("/else")) == url
    assert resolve_database_url("sqlite://:memory:", Path("/else")) == "sqlite://:memory:"


def test_environment_beats_the_file_and_the_option_beats_both(tmp_path: Path) -> None:
    write(tmp_path / "stepline.toml", 'database = "sqlite:///file.db"\n')
    env = {"STEPLINE_DATABASE_URL": "sqlite:///env.db"}
    from_env = load_project(tmp_path, environ=env)
    assert from_env.database == f"sqlite:///{tmp_path.resolve() / 'env.db'}"
    assert from_env.database_source == "environment"
    from_option = load_project(tmp_path, environ=env, database="sqlite:////tmp/opt.db")
    assert from_option.database == "sqlite:////tmp/opt.db"
    assert from_option.database_source == "option"


def test_explicit_config_path_skips_the_search(tmp_path: Path) -> None:
    config = write(tmp_path / "elsewhere" / "custom.toml", 'database = "sqlite:///c.db"\n')
    project = load_project(tmp_path, config_path=config, environ=NO_ENV)
    assert project.path == config.resolve()
    assert project.database == f"sqlite:///{(tmp_path / 'elsewhere' / 'c.db').resolve()}"
    with pytest.raises(ConfigError, match=r"configuration file .*missing\.toml does not exist"):
        load_project(tmp_path, config_path=tmp_path / "missing.toml", environ=NO_ENV)


# -- workflows and worker settings --------------------------------------------------------------


def test_workflows_and_worker_settings(tmp_path: Path) -> None:
    write(
        tmp_path / "stepline.toml",
        """
[[workflows]]
name = "one"
class_name = "flows:One"

[[workflows]]
name = "two"
class_name = "pkg.flows:Two"

[worker]
concurrency = 7
lease = "45 seconds"
poll_interval = 0.25
grace_period = "1 minute"
""",
    )
    project = load_project(tmp_path, environ=NO_ENV)
    assert project.workflow_names == ["one", "two"]
    entry = project.entry("two")
    assert entry is not None and entry.class_name == "pkg.flows:Two"
    assert entry.key == "workflows[1]"
    assert project.worker == WorkerConfig(
        concurrency=7, lease=45.0, poll_interval=0.25, grace_period=60.0
    )


def test_cloudflare_settings(tmp_path: Path) -> None:
    write(tmp_path / "stepline.toml", "")
    default = load_project(tmp_path, environ=NO_ENV).cloudflare
    assert (default.prefix, default.account_id, default.enabled) == ("/client/v4", None, True)
    assert default.listed_account == "stepline"
    write(tmp_path / "stepline.toml", "[cloudflare]\nprefix = '/cf/v4'\naccount_id = 'ab12'\n")
    config = load_project(tmp_path, environ=NO_ENV).cloudflare
    assert (config.prefix, config.account_id, config.listed_account) == ("/cf/v4", "ab12", "ab12")


def test_worker_defaults(tmp_path: Path) -> None:
    write(tmp_path / "stepline.toml", "")
    assert load_project(tmp_path, environ=NO_ENV).worker == WorkerConfig()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("database = \n", r"stepline\.toml is not valid TOML: .*line 1"),
        ("databse = 'sqlite:///x.db'\n", r"unknown key 'databse'; allowed keys there: database"),
        ("database = 3\n", r"key 'database' must be a database URL"),
        ("database = 'mysql://x'\n", r"key 'database' has an unsupported URL 'mysql://x'"),
        ("[[workflows]]\nname = 'a'\n", r"key 'workflows\[0\]\.class_name' is missing"),
        ("[[workflows]]\nclass_name = 'a:B'\n", r"key 'workflows\[0\]\.name' is missing"),
        (
            "[[workflows]]\nname = 'a'\nclass_name = 'NoColon'\n",
            r"key 'workflows\[0\]\.class_name' must be 'module:attribute'",
        ),
        (
            "[[workflows]]\nname = 'bad name'\nclass_name = 'a:B'\n",
            r"key 'workflows\[0\]\.name': invalid workflow name 'bad name'",
        ),
        (
            "[[workflows]]\nname = 'a'\nclass_name = 'a:B'\n"
            "[[workflows]]\nname = 'a'\nclass_name = 'a:C'\n",
            r"key 'workflows\[1\]\.name': workflow 'a' is already defined by workflows\[0\]",
        ),
        (
            "[[workflows]]\nname = 'a'\nclass_name = 'a:B'\nbinding = 'X'\n",
            r"unknown key 'workflows\[0\]\.binding'",
        ),
        ("workflows = 'a'\n", r"key 'workflows' must be an array of tables"),
        ("[worker]\nconcurrency = 0\n", r"key 'worker\.concurrency' must be a whole number"),
        ("[worker]\nlease = 'soon'\n", r"key 'worker\.lease': invalid worker\.lease 'soon'"),
        (
            "[worker]\nlease = 0.01\n",
            r"key 'worker\.lease': invalid worker\.lease 0\.01: it "
            r"must be at least 0\.1 seconds",
        ),
        (
            "[worker]\nlease = '-5 seconds'\n",
            r"key 'worker\.lease': invalid worker\.lease "
            r"'-5 seconds': it must be at least 0\.1 seconds",
        ),
        (
            "[worker]\nlease = 'soon'\n",
            r"'soon': it is not a duration: expected a number of "
            r"seconds or 'N unit' \(units: millisecond, second, minute, hour, day, week\)",
        ),
        (
            "[worker]\nlease = '30'\nheartbeat = 0\n",
            r"key 'worker\.heartbeat': invalid "
            r"worker\.heartbeat 0: it must be at least 0\.05 seconds",
        ),
        (
            "[worker]\npoll_interval = '0 seconds'\n",
            r"invalid worker\.poll_interval '0 seconds': "
            r"it must be positive",
        ),
        (
            "[worker]\ngrace_period = '-1'\n",
            r"invalid worker\.grace_period '-1': it must not "
            r"be negative",
        ),
        (
            "[worker]\nretention = '-1 days'\n",
            r"invalid worker\.retention '-1 days': it must "
            r"not be negative",
        ),
        ("[worker]\nthreads = 4\n", r"unknown key 'worker\.threads'"),
        ("cloudflare = 1\n", r"key 'cloudflare' must be a table"),
        ("[cloudflare]\nport = 1\n", r"unknown key 'cloudflare\.port'; allowed keys there: prefix"),
        (
            "[cloudflare]\nprefix = 'client/v4'\n",
            r"key 'cloudflare': invalid Cloudflare API prefix",
        ),
        ("[cloudflare]\nprefix = '/api/cf'\n", r"prefix '/api/cf' is under /api"),
        ("[cloudflare]\naccount_id = 'a b'\n", r"key 'cloudflare': invalid account id 'a b'"),
        ("[cloudflare]\nenabled = 'yes'\n", r"key 'cloudflare\.enabled' must be a bool"),
    ],
)
def test_broken_config_names_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    config = write(tmp_path / "stepline.toml", text)
    with pytest.raises(ConfigError, match=message) as info:
        load_project(tmp_path, environ=NO_ENV)
    assert str(config) in str(info.value)
    assert "\n" not in str(info.value)


def test_broken_pyproject_section_names_the_prefixed_key(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.stepline]\nworkers = 2\n")
    with pytest.raises(
        ConfigError, match=r"pyproject\.toml: unknown key 'tool\.stepline\.workers'"
    ):
        load_project(tmp_path, environ=NO_ENV)


# -- importing configured workflows -------------------------------------------------------------

FLOWS = '''
from stepline import Workflow, workflow


class Greeting(Workflow):
    """Says hello."""

    async def run(self, event, step):
        return await step.do("hello", lambda: "hello")


@workflow(name="decorated")
async def decorated(event, step):
    return 1


NOT_A_WORKFLOW = 42
'''


def project_with(tmp_path: Path, entries: str, module: str = "cfgflows") -> Path:
    write(tmp_path / f"{module}.py", FLOWS)
    return write(tmp_path / "stepline.toml", entries)


def test_configured_workflows_import_from_the_project_directory(
    tmp_path: Path, clean_modules: None
) -> None:
    project_with(
        tmp_path,
        "[[workflows]]\nname = 'greeting'\nclass_name = 'cfgflows:Greeting'\n"
        "[[workflows]]\nname = 'decorated'\nclass_name = 'cfgflows:decorated'\n",
    )
    project = load_project(tmp_path / ".", environ=NO_ENV)
    loaded = load_workflows(project)
    assert [definition_of(w).name for w in loaded] == ["greeting", "decorated"]
    assert definition_of(loaded[0]).class_name == "cfgflows:Greeting"


def test_configured_name_renames_a_workflow_class(tmp_path: Path, clean_modules: None) -> None:
    project_with(
        tmp_path, "[[workflows]]\nname = 'hello-world'\nclass_name = 'cfgflows:Greeting'\n"
    )
    project = load_project(tmp_path, environ=NO_ENV)
    entry = project.entry("hello-world")
    assert entry is not None
    loaded = load_workflow(project, entry)
    definition = definition_of(loaded)
    assert definition.name == "hello-world"
    assert definition.class_name == "cfgflows:Greeting"
    assert isinstance(loaded, type) and issubclass(loaded, Workflow)
    assert loaded.__doc__ == "Says hello."


@pytest.mark.parametrize(
    ("class_name", "message"),
    [
        ("missingmod:Greeting", r"cannot import module 'missingmod': ModuleNotFoundError"),
        ("cfgflows:Nope", r"module 'cfgflows' has no attribute 'Nope'"),
        ("cfgflows:NOT_A_WORKFLOW", r"42 is not a workflow"),
    ],
)
def test_import_errors_name_the_file_and_the_key(
    tmp_path: Path, clean_modules: None, class_name: str, message: str
) -> None:
    config = project_with(tmp_path, f"[[workflows]]\nname = 'x'\nclass_name = '{class_name}'\n")
    project = load_project(tmp_path, environ=NO_ENV)
    with pytest.raises(ConfigError, match=message) as info:
        load_workflows(project)
    assert f"{config.resolve()}: key 'workflows[0].class_name'" in str(info.value)


def test_a_module_that_fails_to_import_is_a_config_error(
    tmp_path: Path, clean_modules: None
) -> None:
    write(tmp_path / "brokenflows.py", "raise RuntimeError('boom at import')\n")
    write(tmp_path / "stepline.toml", "[[workflows]]\nname = 'x'\nclass_name = 'brokenflows:X'\n")
    project = load_project(tmp_path, environ=NO_ENV)
    with pytest.raises(ConfigError, match=r"RuntimeError: boom at import"):
        load_workflows(project)


def test_environment_is_read_when_loading_not_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "stepline.toml", 'database = "sqlite:///file.db"\n')
    monkeypatch.setenv("STEPLINE_DATABASE_URL", "sqlite:////tmp/from-env.db")
    assert load_project(tmp_path).database == "sqlite:////tmp/from-env.db"
    assert load_project(tmp_path, environ=NO_ENV).database.endswith("/file.db")
