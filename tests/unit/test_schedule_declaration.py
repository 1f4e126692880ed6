"""Declaring schedules: the class attribute, the decorator argument, ``[[schedules]]`` in
stepline.toml; registration errors name the workflow and quote the bad value."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stepline import ConfigError, DefinitionError, Engine, Schedule, Workflow, workflow
from stepline.project import load_project, load_workflows
from stepline.workflow import WorkflowEvent, definition_of


class Report(Workflow):
    schedules = ("*/5 * * * *", Schedule("0 9 * * MON-FRI", timezone="Europe/Paris", name="am"))

    async def run(self, event: WorkflowEvent, step: Any) -> None:
        return None


@workflow(name="digest", schedules=[Schedule("0 8 * * *", params={"kind": "daily"})])
async def digest(event: WorkflowEvent, step: Any) -> None:
    return None


def test_class_attribute_schedules_are_named_and_validated() -> None:
    definition = definition_of(Report)
    assert [s.cron for s in definition.schedules] == ["*/5 * * * *", "0 9 * * MON-FRI"]
    first, second = definition.schedules
    assert first.name is not None and first.name.startswith("report-")
    assert second.name == "am" and second.timezone == "Europe/Paris"


def test_decorator_schedules() -> None:
    (schedule,) = definition_of(digest).schedules
    assert schedule.params == {"kind": "daily"}
    assert schedule.key.startswith("digest-")


def test_no_schedules_by_default() -> None:
    @workflow(name="plain")
    async def plain(event: WorkflowEvent, step: Any) -> None:
        return None

    assert definition_of(plain).schedules == ()


def test_bad_schedule_names_the_class_and_quotes_the_value() -> None:
    class Broken(Workflow):
        schedules = ("*/5 * * * *", "every monday")

        async def run(self, event: WorkflowEvent, step: Any) -> None:
            return None

    with pytest.raises(DefinitionError) as info:
        definition_of(Broken)
    message = str(info.value)
    assert "Broken" in message and "schedules[1]" in message and "'every monday'" in message


def test_schedules_must_be_a_list() -> None:
    class Single(Workflow):
        schedules = "*/5 * * * *"  # type: ignore[assignment]

        async def run(self, event: WorkflowEvent, step: Any) -> None:
            return None

    with pytest.raises(DefinitionError, match="Single: schedules must be a list"):
        definition_of(Single)


def test_duplicate_schedule_names_in_one_workflow() -> None:
    class Twice(Workflow):
        schedules = ("*/5 * * * *", "*/5 * * * *")

        async def run(self, event: WorkflowEvent, step: Any) -> None:
            return None

    with pytest.raises(DefinitionError, match="Twice: two schedules are named 'twice-"):
        definition_of(Twice)


def test_duplicate_schedule_names_across_workflows() -> None:
    class One(Workflow):
        schedules = (Schedule("* * * * *", name="shared"),)

        async def run(self, event: WorkflowEvent, step: Any) -> None:
            return None

    class Two(Workflow):
        schedules = (Schedule("0 * * * *", name="shared"),)

        async def run(self, event: WorkflowEvent, step: Any) -> None:
            return None

    with pytest.raises(DefinitionError, match="'one' and 'two' both declare a schedule named"):
        Engine("sqlite://:memory:", [One, Two])


# -- stepline.toml -----------------------------------------------------------------------------

CODE = """
from stepline import Workflow

class Nightly(Workflow):
    schedules = ["0 1 * * *"]

    async def run(self, event, step):
        return None
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    before_modules, before_path = set(sys.modules), list(sys.path)
    (tmp_path / "jobs.py").write_text(CODE, encoding="utf-8")
    yield tmp_path
    for name in set(sys.modules) - before_modules:
        del sys.modules[name]
    sys.path[:] = before_path


def configure(root: Path, schedules: str) -> Path:
    path = root / "stepline.toml"
    path.write_text(
        '[[workflows]]\nname = "nightly-job"\nclass_name = "jobs:Nightly"\n\n' + schedules,
        encoding="utf-8",
    )
    return path


def test_toml_schedules_are_added_to_the_workflow(project: Path) -> None:
    configure(
        project,
        '[[schedules]]\nworkflow = "nightly-job"\ncron = "30 2 * * *"\n'
        'timezone = "Europe/Paris"\nparams = {region = "eu"}\nname = "eu-nightly"\n'
        'catch_up = "all"\ncatch_up_limit = 5\noverlap = "skip"\n',
    )
    config = load_project(project, environ={})
    (loaded,) = load_workflows(config)
    definition = definition_of(loaded)
    assert definition.name == "nightly-job"
    own, added = definition.schedules
    assert own.cron == "0 1 * * *" and own.key.startswith("nightly-job-")
    assert added == Schedule(
        "30 2 * * *",
        timezone="Europe/Paris",
        params={"region": "eu"},
        name="eu-nightly",
        catch_up="all",
        catch_up_limit=5,
        overlap="skip",
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('workflow = "nightly-job"\n', "key 'schedules[0].cron' is missing"),
        ('cron = "* * * * *"\n', "key 'schedules[0].workflow' is missing"),
        ('workflow = "nightly-job"\ncron = "nope"\n', "'schedules[0].cron': invalid cron"),
        (
            'workflow = "nightly-job"\ncron = "* * * * *"\ntimezone = "Nowhere/City"\n',
            "'schedules[0].timezone': unknown time zone 'Nowhere/City'",
        ),
        (
            'workflow = "nightly-job"\ncron = "* * * * *"\novrlap = "skip"\n',
            "schedules[0]",
        ),
        (
            'workflow = "nightly-job"\ncron = "* * * * *"\noverlap = "queue"\n',
            "'schedules[0].overlap': invalid overlap 'queue'",
        ),
        (
            'workflow = "other"\ncron = "* * * * *"\n',
            "'schedules[0].workflow': no [[workflows]] entry is named 'other'",
        ),
    ],
)
def test_toml_errors_name_the_table_and_key(project: Path, table: str, message: str) -> None:
    configure(project, "[[schedules]]\n" + table)
    with pytest.raises(ConfigError) as info:
        load_project(project, environ={})
    assert message in str(info.value)


def test_toml_duplicate_name_is_a_config_error(project: Path) -> None:
    configure(
        project,
        '[[schedules]]\nworkflow = "nightly-job"\ncron = "0 1 * * *"\n',
    )
    config = load_project(project, environ={})
    with pytest.raises(ConfigError, match="two schedules are named"):
        load_workflows(config)
