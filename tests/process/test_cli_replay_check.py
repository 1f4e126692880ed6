"""``stepline workflows replay-check NAME`` on a SQLite project: 0 when today's code replays
every recorded instance; after a step renamed without a patch, exit 1 naming each instance and
the step, and the database file unchanged (a dump before and after)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from .test_cli import ok, stepline

pytestmark = pytest.mark.slow

FLOWS = """
from stepline import workflow


@workflow(name="orders")
async def orders(event, step):
    await step.do("{first}", lambda: 1)
    return await step.do("ship", lambda: 2)
"""


def _project(root: Path, first: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "flows.py").write_text(FLOWS.replace("{first}", first), encoding="utf-8")
    (root / "stepline.toml").write_text(
        'database = "sqlite:///shop.db"\n\n[[workflows]]\nname = "orders"\n'
        'class_name = "flows:orders"\n',
        encoding="utf-8",
    )
    return root


def _dump(project: Path) -> list[str]:
    with closing(sqlite3.connect(project / "shop.db")) as conn:
        return list(conn.iterdump())


def test_replay_check_names_the_diverging_instances_and_changes_nothing(tmp_path: Path) -> None:
    project = _project(tmp_path / "shop", "charge")
    for instance_id in ("o1", "o2"):
        ok(project, "run", "orders", "--id", instance_id)
    assert "all follow their history" in ok(project, "workflows", "replay-check", "orders")
    before = _dump(project)

    _project(project, "authorize")  # the step renamed, no patch
    result = stepline(project, "workflows", "replay-check", "orders", "--all")
    assert result.returncode == 1, (result.stdout, result.stderr)
    for instance_id in ("o1", "o2"):
        assert f"orders/{instance_id} (complete) diverges at step 'charge-1'" in result.stdout
    as_json = stepline(project, "workflows", "replay-check", "orders", "--json")
    assert as_json.returncode == 1
    shown = json.loads(as_json.stdout)
    assert shown["replayed"] == 2
    assert {(d["id"], d["step"]) for d in shown["diverged"]} == {
        ("o1", "charge-1"),
        ("o2", "charge-1"),
    }
    assert _dump(project) == before

    bad = stepline(project, "workflows", "replay-check", "orders", "--since", "someday")
    assert bad.returncode == 2 and "--since 'someday'" in bad.stderr


def test_replay_check_of_a_workflow_without_code_in_the_project_says_where_to_name_it(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path / "shop", "charge")
    result = stepline(project, "workflows", "replay-check", "invoices")
    assert result.returncode == 2
    assert "replay-check needs the code of 'invoices'" in result.stderr
    assert "[[workflows]]" in result.stderr and "'orders'" in result.stderr
