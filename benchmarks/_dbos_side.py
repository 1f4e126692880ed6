"""DBOS's side of ``benchmarks.beside_dbos``: its sequential workflow, run by the Python of a venv
that has DBOS (not stepline) installed, as a script: ``python _dbos_side.py DB WORKFLOWS STEPS``.

A sync workflow of ``STEPS`` trivial sync steps, ``WORKFLOWS`` of them started and awaited one at
a time (``DBOS.start_workflow`` then ``get_result``, DBOS's direct form: its steps run inline in
the workflow's thread), on a SQLite system database. Prints one JSON line: the wall and process
CPU seconds over all workflows, after a warm-up.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from dbos import DBOS, DBOSConfig


@DBOS.step()
def one() -> int:
    return 1


@DBOS.workflow()
def trivial(steps: int) -> int:
    return sum(one() for _ in range(steps))


def main(path: str, workflows: int, steps: int) -> dict[str, Any]:
    config: DBOSConfig = {
        "name": "stepline-bench",
        "system_database_url": f"sqlite:///{path}",
        "log_level": "WARNING",
    }
    DBOS(config=config)
    DBOS.launch()
    logging.getLogger("dbos").setLevel(logging.WARNING)
    try:
        for _ in range(max(workflows // 20, 3)):  # warm up: caches, the executor's threads
            DBOS.start_workflow(trivial, steps).get_result()
        cpu = time.process_time()
        start = time.perf_counter()
        for _ in range(workflows):
            if DBOS.start_workflow(trivial, steps).get_result() != steps:
                raise RuntimeError("a DBOS workflow returned a wrong result")
        total = time.perf_counter() - start
        cpu = time.process_time() - cpu
    finally:
        DBOS.destroy()
    return {"total": total, "cpu": cpu}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))), flush=True)
