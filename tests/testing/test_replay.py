"""Replay checks: the runtime's own replay against the recorded history, on a scratch store."""

from __future__ import annotations

from typing import Any

import pytest

from stepline import WorkflowEvent, WorkflowStep, workflow
from stepline.testing import ReplayError, WorkflowTestEnv

from ._flows import naps


def constant(value: str) -> Any:
    return lambda: value


def version(*names: str, output: str = "rested") -> Any:
    @workflow(name="naps")
    async def run(event: WorkflowEvent, step: WorkflowStep) -> Any:
        for name in names:
            if name.startswith("~"):
                await step.sleep(name[1:], "1 day")
            else:
                await step.do(name, constant(name))
        return output

    return run


async def test_replay_passes_the_same_code_and_names_each_divergence(store_url: str) -> None:
    async with WorkflowTestEnv([naps], store=store_url) as env:
        done = await env.create(naps, id="done")
        await done.wait()
        before = await done.steps()
        await env.replay(done)
        with pytest.raises(ReplayError, match=r"new step\(s\) 'begin-1'.*'start-1', 'first-1'"):
            await env.replay(done, version("begin"))
        with pytest.raises(ReplayError, match=r"without calling the recorded step\(s\) 'end-1'"):
            await env.replay(done, version("start", "~first", "~second"))
        with pytest.raises(ReplayError, match=r"ended complete .* the new step 'more-1'"):
            await env.replay(done, version("start", "~first", "~second", "end", "more"))
        changed = version("start", "~first", "~second", "end", output="changed")
        with pytest.raises(ReplayError, match=r"now returns 'changed' .* returned 'rested'"):
            await env.replay(done, changed)
        assert await done.steps() == before  # nothing of the instance changed


async def test_replay_of_an_instance_in_flight_lets_the_workflow_grow() -> None:
    async with WorkflowTestEnv([naps], store="memory") as env:
        sleeping = await env.create(naps)
        await env.run_until_idle()
        await env.replay(sleeping, version("start", "~first", "~second", "end", "more"))
        with pytest.raises(ReplayError, match="new step"):
            await env.replay(sleeping, version("start", "~nap"))
