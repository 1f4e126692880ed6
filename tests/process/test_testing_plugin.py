"""A user's project with stepline installed: ``pytest`` finds the plugin's fixtures without any
configuration, and a test's mistakes (a call not awaited, a mock of a step that does not exist)
fail with errors that name them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WORKFLOWS = """
from stepline import workflow


@workflow(name="greet")
async def greet(event, step):
    await step.sleep("pause", "1 day")
    return await step.do("greeting", lambda: f"hello {event.payload}")


@workflow(name="ask")
async def ask(event, step):
    await step.do("compose", lambda: "ready?")
    answer = await step.wait_for_event("answer", type="answer")
    return await step.do("reply", lambda: answer.payload)
"""

PASSING = """
import pytest
from greetings import ask, greet


async def test_async_fixture(stepline_env):  # no asyncio marker, no configuration
    inst = await stepline_env.create(greet, params="ada")
    assert await inst.output() == "hello ada"


async def test_a_mock_of_a_step_not_reached_yet(stepline_env):
    inst = await stepline_env.create(ask)
    inst.mock_step("reply", "ok")
    await inst.wait_for_status("waiting")


def test_sync_fixture(stepline_env_sync):
    inst = stepline_env_sync.create(greet, params="bob")
    inst.mock_step("greeting", "hi")
    assert inst.output() == "hi"


@pytest.mark.stepline(store="memory", start=0)
def test_marker(stepline_env_sync):
    inst = stepline_env_sync.create(greet, params="eve")
    inst.wait()
    assert stepline_env_sync.now() == 86400
"""

MISTAKES = """
import pytest
from greetings import ask, greet


@pytest.mark.asyncio
async def test_forgets_to_await(stepline_env):
    inst = await stepline_env.create(greet, params="ada")
    stepline_env.advance("1 day")
    assert (await inst.status()).status == "complete"


@pytest.mark.asyncio
async def test_mocks_a_misspelled_step(stepline_env):
    inst = await stepline_env.create(greet, params="ada")
    inst.mock_step("greting", "hi")
    assert await inst.output() == "hi"


async def test_misspells_a_step_of_an_instance_still_waiting(stepline_env):
    inst = await stepline_env.create(ask)
    inst.mock_step("compse", "hi")
    await inst.wait_for_status("waiting")
"""


# Plugins of this venv that the project does not need and that take seconds to import.
UNRELATED = ["-p", "no:hypothesispytest", "-p", "no:schemathesis", "-p", "no:anyio"]


def pytest_in(project: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "STEPLINE_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *UNRELATED, "-rA"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_project_without_configuration_finds_the_fixtures(tmp_path: Path) -> None:
    (tmp_path / "greetings.py").write_text(WORKFLOWS)
    (tmp_path / "test_greetings.py").write_text(PASSING)
    (tmp_path / "test_mistakes.py").write_text(MISTAKES)
    assert not any(
        p.name in ("pytest.ini", "pyproject.toml", "conftest.py") for p in tmp_path.iterdir()
    )

    run = pytest_in(tmp_path)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "2 failed, 5 passed, 1 error" in out, out
    for test in (
        "test_async_fixture",
        "test_a_mock_of_a_step_not_reached_yet",
        "test_sync_fixture",
        "test_marker",
    ):
        assert f"PASSED test_greetings.py::{test}" in out
    assert (
        "NotAwaitedError: env.advance('1 day') was never awaited, so it did not run; "
        "write `await env.advance('1 day')`"
    ) in out
    assert "FAILED test_mistakes.py::test_forgets_to_await" in out
    assert "mock_step('greting') matched nothing that ran (did you mean 'greeting'?)" in out
    assert "FAILED test_mistakes.py::test_mocks_a_misspelled_step - stepline.testing." in out
    assert "mock_step('compse') matched nothing that ran (did you mean 'compose'?)" in out
    assert "ERROR test_mistakes.py::test_misspells_a_step_of_an_instance_still_waiting" in out
