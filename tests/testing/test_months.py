"""The benchmark's scenario (benchmarks/virtual_time.py), run as a test on both stores: four
months of a workflow's time (30-day sleeps between 5 steps, 3 retries backing off from 1 hour, a
7-day wait for an event) pass on the virtual clock. The wall time is printed, not asserted."""

from __future__ import annotations

from benchmarks.virtual_time import scenario


async def test_months_of_workflow_time_on_the_virtual_clock(store_url: str) -> None:
    result = await scenario(store_url)
    assert result["days"] == 4 * 30 + (1 + 2 + 4) / 24 + 7
    assert result["steps"] == 5 + 4 + 1
    print(
        f"\nvirtual time: {result['days']:.2f} days in {result['wall'] * 1000:.0f} ms of wall time"
    )
