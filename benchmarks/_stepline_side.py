"""Stepline's side of ``benchmarks.beside_dbos``: ``python -m benchmarks._stepline_side URL
WORKFLOWS STEPS``, on the loop ``STEPLINE_EVENT_LOOP`` names (the benchmark asks for asyncio's).

The sequential workflows of ``benchmarks.sequential``, with sync callbacks in a step thread,
sync callbacks inline and async callbacks taking turns. Prints one JSON line: per kind, the
wall and process CPU seconds over all its workflows.
"""

from __future__ import annotations

import json
import sys

from stepline import _loop

from .sequential import ASYNC, INLINE, THREAD, run_sequential

KINDS = {"thread": THREAD, "inline": INLINE, "async": ASYNC}


async def main(url: str, workflows: int, steps: int) -> dict[str, dict[str, float]]:
    shapes = [(steps, kind) for kind in KINDS.values()]
    timings = await run_sequential(url, workflows=workflows, shapes=shapes)
    return {
        name: {"total": timing.total, "cpu": timing.cpu}
        for name, timing in zip(KINDS, timings, strict=True)
    }


if __name__ == "__main__":
    figures = _loop.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    print(json.dumps({**figures, "event_loop": _loop.loop_name()}), flush=True)
