"""Testing workflows in milliseconds: a real engine on a virtual clock, with mocks, introspection
and replay checks, and a pytest plugin (fixtures ``stepline_env`` and ``stepline_env_sync``).

    async with WorkflowTestEnv([Checkout]) as env:
        order = await env.create(Checkout, params={"cart": 42})
        order.mock_step("charge", {"id": "ch_1"})
        await env.advance("3 days")
        assert await order.output() == "shipped"

See docs/testing.md.
"""

from ..replaycheck import ReplayError, ReplayReport, ReplayResult, replay_check
from ._awaiting import NotAwaitedError
from ._driver import StallError
from ._env import WorkflowTestEnv
from ._instance import StuckError, TestInstance
from ._mocks import MockError, StepError, StubError
from ._sync import TestInstanceSync, WorkflowTestEnvSync

__all__ = [
    "MockError",
    "NotAwaitedError",
    "ReplayError",
    "ReplayReport",
    "ReplayResult",
    "StallError",
    "StepError",
    "StubError",
    "StuckError",
    "TestInstance",
    "TestInstanceSync",
    "WorkflowTestEnv",
    "WorkflowTestEnvSync",
    "replay_check",
]
