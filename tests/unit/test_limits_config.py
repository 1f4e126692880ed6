"""Flow control in stepline.toml: the limit keys of ``[[workflows]]`` override what the code
declares, ``[[limits]]`` tables define named limits, and every mistake is a ConfigError naming
the file and the key."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepline import ConfigError, Limit, Rate
from stepline.cli._common import CliError, State
from stepline.limits import WorkflowLimits
from stepline.project import load_project, load_workflows
from stepline.workflow import definition_of

CODE = """
from stepline import Pipeline, Workflow, workflow

class Orders(Workflow):
    concurrency = 5
    rate_limit = "10/second"
    limits = ("payments",)

    async def run(self, event, step):
        return None

@workflow(name="mailer", worker_concurrency=3)
async def mailer(event, step):
    return None

pipe = Pipeline("pipe")
pipe.concurrency = 7

@pipe.step
def only(ctx):
    return {}
"""

WORKFLOWS = """
[[workflows]]
name = "orders"
class_name = "shop:Orders"
{orders}
[[workflows]]
name = "mailer"
class_name = "shop:mailer"
{mailer}
[[workflows]]
name = "pipe"
class_name = "shop:pipe"
{pipe}
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    before_modules, before_path = set(sys.modules), list(sys.path)
    (tmp_path / "shop.py").write_text(CODE, encoding="utf-8")
    yield tmp_path
    for name in set(sys.modules) - before_modules:
        del sys.modules[name]
    sys.path[:] = before_path


def configure(
    root: Path, orders: str = "", mailer: str = "", pipe: str = "", more: str = ""
) -> Path:
    path = root / "stepline.toml"
    top = "" if more.startswith(("\n", "[")) else more  # a top-level key goes before the tables
    text = top + WORKFLOWS.format(orders=orders, mailer=mailer, pipe=pipe) + more[len(top) :]
    path.write_text(text, "utf-8")
    return path


LIMITS = """
[[limits]]
name = "payments"
concurrency = 2

[[limits]]
name = "email"
rate = [100, "1 hour"]
"""


def limits_of(root: Path) -> dict[str, WorkflowLimits]:
    config = load_project(root, environ={})
    return {d.name: d.limits for d in map(definition_of, load_workflows(config))}


def test_without_overrides_the_code_declares_the_limits(project: Path) -> None:
    configure(project, more=LIMITS)
    config = load_project(project, environ={})
    assert config.limits == (
        Limit("payments", concurrency=2),
        Limit("email", rate=(100, "1 hour")),
    )
    assert limits_of(project) == {
        "orders": WorkflowLimits(concurrency=5, rate=Rate(10, 1.0), limits=("payments",)),
        "mailer": WorkflowLimits(worker_concurrency=3),
        "pipe": WorkflowLimits(concurrency=7),
    }


def test_workflow_tables_override_the_code_key_by_key(project: Path) -> None:
    configure(
        project,
        orders='concurrency = 50\nkey_concurrency = 1\nlimits = ["email"]\n',
        mailer='rate_limit = "60/minute"\nworker_concurrency = 1\n',
        pipe='rate_limit = [5, "10 seconds"]\n',
        more=LIMITS,
    )
    assert limits_of(project) == {
        "orders": WorkflowLimits(
            concurrency=50, rate=Rate(10, 1.0), key_concurrency=1, limits=("email",)
        ),
        "mailer": WorkflowLimits(worker_concurrency=1, rate=Rate(60, 60.0)),
        "pipe": WorkflowLimits(concurrency=7, rate=Rate(5, 10.0)),
    }


def test_the_cli_engine_gets_the_named_limits(project: Path) -> None:
    path = configure(project, more=LIMITS)
    state = State(config_path=path)
    engine = state.engine(load_workflows(state.project))
    assert engine.limits == state.project.limits
    assert engine.workflows["orders"].limits.limits == ("payments",)


def test_a_code_limit_not_in_the_file_fails_at_registration(project: Path) -> None:
    path = configure(project)  # Orders names "payments"; no [[limits]] defines it
    state = State(config_path=path)
    with pytest.raises(CliError, match="workflow 'orders' uses limit 'payments'"):
        state.engine(load_workflows(state.project))


@pytest.mark.parametrize(
    ("orders", "more", "message"),
    [
        ("concurrency = 0\n", "", "key 'workflows[0].concurrency': invalid workflow 'orders'"),
        ("concurrency = -3\n", "", "'workflows[0].concurrency'"),
        ("concurrency = true\n", "", "'workflows[0].concurrency'"),
        ('worker_concurrency = "2"\n', "", "'workflows[0].worker_concurrency'"),
        ("key_concurrency = 1.5\n", "", "'workflows[0].key_concurrency'"),
        ('rate_limit = "5 per fortnight"\n', "", "'workflows[0].rate_limit': invalid workflow"),
        ("rate_limit = [5]\n", "", "'workflows[0].rate_limit'"),
        ("rate_limit = 5\n", "", "'workflows[0].rate_limit'"),
        ('limits = "payments"\n', "", "'workflows[0].limits': workflow 'orders': limits must"),
        ('limits = ["no way"]\n', "", "'workflows[0].limits'"),
        ('limits = ["nowhere"]\n', LIMITS, "'workflows[0].limits': no [[limits]] table is named"),
        ("concurency = 3\n", "", "unknown key 'workflows[0].concurency'"),
        ("", "limits = 3\n", "key 'limits' must be an array of tables"),
        ("", "[[limits]]\nconcurrency = 2\n", "key 'limits[0].name' is missing"),
        ("", '[[limits]]\nname = "a b"\nrate = "1/second"\n', "'limits[0].name': invalid limit"),
        ("", '[[limits]]\nname = "a"\n', "key 'limits[0]': limit 'a' sets neither"),
        ("", '[[limits]]\nname = "a"\nconcurrency = 0\n', "key 'limits[0].concurrency'"),
        ("", '[[limits]]\nname = "a"\nrate = "1 per eon"\n', "key 'limits[0].rate'"),
        ("", '[[limits]]\nname = "a"\nburst = 3\n', "unknown key 'limits[0].burst'"),
        (
            "",
            LIMITS + '[[limits]]\nname = "email"\nconcurrency = 1\n',
            "key 'limits[2].name': limit 'email' is already defined by limits[1]",
        ),
    ],
)
def test_bad_values_name_the_file_and_the_key(
    project: Path, orders: str, more: str, message: str
) -> None:
    path = configure(project, orders=orders, more=more)
    with pytest.raises(ConfigError) as caught:
        load_project(project, environ={})
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


def test_pyproject_keys_carry_the_prefix(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.stepline]\n[[tool.stepline.limits]]\nname = "a"\nrate = "often"\n', "utf-8"
    )
    with pytest.raises(ConfigError, match=r"key 'tool\.stepline\.limits\[0\]\.rate'"):
        load_project(tmp_path, environ={})


def test_a_workflow_table_sets_the_timeout_over_the_code(project: Path) -> None:
    configure(project, orders='timeout = "2 hours"\n', mailer="timeout = 90\n", more=LIMITS)
    config = load_project(project, environ={})
    timeouts = {d.name: d.timeout for d in map(definition_of, load_workflows(config))}
    assert timeouts == {"orders": 7200.0, "mailer": 90.0, "pipe": None}


@pytest.mark.parametrize("value", ['"soon"', "0", "-1", "true", "[1]"])
def test_a_bad_timeout_names_the_file_and_the_key(project: Path, value: str) -> None:
    path = configure(project, orders=f"timeout = {value}\n", more=LIMITS)
    with pytest.raises(ConfigError) as caught:
        load_project(project, environ={})
    message = str(caught.value)
    assert message.startswith(f"{path}: key 'workflows[0].timeout': invalid timeout")
