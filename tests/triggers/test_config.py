"""Queue trigger configuration: in code and in ``[[triggers.queue]]`` tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepline import ConfigError
from stepline.project import load_project
from stepline.triggers import QueueTrigger

URL = "redis://127.0.0.1:6379/0"


def test_defaults() -> None:
    trigger = QueueTrigger(broker=URL, queue="orders", workflow="orders")
    assert (trigger.name, trigger.batch_size, trigger.concurrency, trigger.claim_idle) == (
        "orders",
        100,
        1,
        30.0,
    )
    assert trigger.trigger_label == "queue:orders"
    assert trigger.broker_options() == {
        "group": "stepline",
        "dead_letter": None,
        "claim_idle": 30.0,
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"broker": "kafka://h"}, "broker is not supported"),
        ({"queue": ""}, "queue must be a non-empty string"),
        ({"workflow": "no spaces"}, "workflow must be a workflow name"),
        ({"batch_size": 0}, "batch_size must be a whole number of at least 1, got 0"),
        ({"concurrency": True}, "concurrency must be a whole number"),
        ({"max_queued": 5, "workflow": None}, "max_queued needs 'workflow'"),
        ({"claim_idle": 0}, "claim_idle must be a positive number of seconds"),
        ({"id_prefix": "-x"}, "id_prefix must be empty or start an instance id"),
    ],
)
def test_bad_values_are_refused_naming_the_field(options: dict[str, object], message: str) -> None:
    values: dict[str, object] = {"broker": URL, "queue": "orders", "workflow": "orders"}
    values.update(options)
    with pytest.raises(ConfigError, match=message):
        QueueTrigger(**values)  # type: ignore[arg-type]


def test_the_password_never_shows_in_messages() -> None:
    with pytest.raises(ConfigError) as caught:
        QueueTrigger(broker="kafka://u:hunter2@h", queue="orders")
    assert "hunter2" not in str(caught.value)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stepline.toml"
    path.write_text(text)
    return path


def test_tables_are_read_from_stepline_toml(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
[[triggers.queue]]
broker = "{URL}"
queue = "orders"
workflow = "orders"
id_key = "order_id"
batch_size = 10
claim_idle = "2 seconds"

[[triggers.queue]]
name = "other"
broker = "{URL}"
queue = "orders"
""",
    )
    project = load_project(config_path=path)
    assert [entry.name for entry in project.queue_triggers] == ["orders", "other"]
    first = QueueTrigger.from_entry(project.queue_triggers[0], project.path)
    assert (first.id_key, first.batch_size, first.claim_idle) == ("order_id", 10, 2.0)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('broker = "{url}"\nqueue = "q"\nbatch_size = -1', r"key 'triggers.queue\[1\].batch_size'"),
        ('broker = "{url}"\nqueue = "q"\ncolour = 1', r"unknown key 'triggers.queue\[1\].colour'"),
        ('queue = "q"', r"key 'triggers.queue\[1\].broker' is missing"),
        ('broker = "{url}"\nqueue = "q"\nclaim_idle = "soon"', r"triggers.queue\[1\].claim_idle"),
    ],
)
def test_bad_tables_name_the_table_index_and_key(tmp_path: Path, table: str, message: str) -> None:
    path = write(
        tmp_path,
        f'[[triggers.queue]]\nbroker = "{URL}"\nqueue = "ok"\n\n[[triggers.queue]]\n'
        + table.format(url=URL),
    )
    project = load_project(config_path=path)
    with pytest.raises(ConfigError, match=message):
        for entry in project.queue_triggers:
            QueueTrigger.from_entry(entry, project.path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[triggers]\nqueue = "x"', r"key 'triggers.queue' must be an array of tables"),
        ("[triggers.cronn]\n", r"unknown key 'triggers.cronn'"),
        ("[[triggers.queue]]\nqueue = 1", r"key 'triggers.queue\[0\].queue' must be a string"),
        (
            '[[triggers.queue]]\nqueue = "a"\n[[triggers.queue]]\nqueue = "a"',
            r"'triggers.queue\[1\]': a queue trigger named 'a' is already defined by "
            r"triggers.queue\[0\]",
        ),
    ],
)
def test_the_project_file_refuses_malformed_trigger_tables(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_project(config_path=write(tmp_path, text))
