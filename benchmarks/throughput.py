"""Throughput: 10,000 instances x 10 trivial steps, run by 1, 2 and 4 worker processes.

With flow control, in the same run, with 1 process and at the 2-process point: the same
workload with a fleet-wide ``concurrency = 50``, and with ``key_concurrency = 1`` over 100 keys
(instance i has key ``k{i % 100}``), each shown as a ratio to the unlimited figure of as many
processes measured beside it; and unlimited runs with as many instances in flight as each limit
allows (1 x 50 and 2 x 25 for ``concurrency = 50``, 2 x 50 for the keys; with one process the
keys' run is the unlimited run itself), which separate what a limit costs from what running
fewer instances at once costs. Each limited run follows the unlimited run of as many
processes, with the run of as many in flight just before it: the ratios are of runs a few
runs apart, not a whole repetition, as the machine's speed drifts over minutes.

For each store and each process count, on a fresh database: the instances are created with
``create_batch`` (batches of 500) before any worker runs; then the worker processes
(``python -m benchmarks._worker``, engine defaults: concurrency 100, lease 30 s, poll interval
0.5 s) are started, wait behind a gate until all have opened the store, and are let go at once.
The figure is steps per second from the first claim to the last completion, both read from the
stored instance timestamps (``min(started_at)``, ``max(ended_at)``), so process start-up is not
counted. Worker CPU time (user + system, all workers) per step is shown too: with 2 cores and
the database on the same machine, it says how much of the machine the engine itself takes.

The floor is the rate of single-row commits one after another (1 / floor S or floor P): a
ratio above 1 means group commit carries several steps per commit. On PostgreSQL the 2-process
run is repeated with ``synchronous_commit=off`` on the workers' connections, to show what the
WAL flush at each commit costs.

Run: ``python -m benchmarks throughput`` (``--quick``: 2,000 instances).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._common import client, cpu_seconds, create_in_batches, span, wait_for_status
from ._config import BenchConfig, database, parse, work_directory
from ._db import backend_pids, table_sizes, with_application_name
from ._floors import per_second, step_floor
from ._procs import WorkerOptions, worker_pool
from ._report import Figure, Floor, Report, median
from ._run import execute
from ._workflows import Trivial, TrivialKeyed, TrivialLimited

NAME = "throughput"
PROCESSES = (1, 2, 4)
STEPS = 10
BATCH = 500
ASYNC_COMMIT_PROCESSES = 2
LIMITED_PROCESSES = 2
KEYS = 100
LIMITED = (
    ("concurrency 50", TrivialLimited.name, 0),
    (f"key_concurrency 1 over {KEYS} keys", TrivialKeyed.name, KEYS),
)
SAME_IN_FLIGHT = {
    (TrivialLimited.name, 1): 50,
    (TrivialLimited.name, LIMITED_PROCESSES): 50 // LIMITED_PROCESSES,
    (TrivialKeyed.name, LIMITED_PROCESSES): KEYS // LIMITED_PROCESSES,
}
"""For a limited workflow and a process count, each worker's concurrency in an unlimited run
with as many instances in flight as the limit allows (50 under ``concurrency = 50``, 100 with
one key of 100 each; with one process, the unlimited run itself): what the limit costs by
itself, apart from running fewer at once."""


def _same_in_flight(processes: int, slots: int) -> str:
    """The series key of the unlimited run of ``processes`` with ``slots`` each."""
    return f"same_in_flight_{processes}x{slots}"


VARIANTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    *(
        (
            _same_in_flight(processes, slots),
            f"{processes} process{'es' if processes > 1 else ''} of concurrency {slots}, unlimited",
            {"processes": processes, "concurrency": slots},
        )
        for (_workflow, processes), slots in SAME_IN_FLIGHT.items()
    ),
    *(
        (
            f"limited_{workflow}_{processes}",
            f"{processes} process(es), {label}",
            {"processes": processes, "workflow": workflow, "keys": keys},
        )
        for processes in (1, LIMITED_PROCESSES)
        for label, workflow, keys in LIMITED
    ),
)
"""The runs under limits, with one process and at the 2-process point, beside the unlimited
ones: (series key, label, options)."""
POSTGRES_VARIANTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "async_commit",
        f"{ASYNC_COMMIT_PROCESSES} processes, synchronous_commit=off",
        {"processes": ASYNC_COMMIT_PROCESSES, "async_commit": True},
    ),
)


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def measure(
    url: str,
    logs: Path,
    *,
    instances: int,
    processes: int,
    steps: int = STEPS,
    async_commit: bool = False,
    workflow: str = Trivial.name,
    keys: int = 0,
    concurrency: int = 100,
    burn: float = 0.0,
    telemetry: str = "off",
) -> dict[str, float]:
    """One run on a fresh database ``url``: steps/s, seconds, CPU µs per step (workers and, for
    a local PostgreSQL, the server processes serving them), bytes stored per instance.

    ``async_commit`` (PostgreSQL): the workers' connections run with ``synchronous_commit=off``
    (set through ``PGOPTIONS`` in their environment; the client's creates stay synchronous).
    ``workflow``: which trivial workflow; ``keys``: give instance i the key ``k{i % keys}``;
    ``concurrency``: each worker's; ``burn``: seconds of CPU each step takes; ``telemetry``:
    what the workers report (``benchmarks._worker --telemetry``)."""
    async with client(url) as engine:
        created = await create_in_batches(
            engine,
            workflow,
            (
                {
                    "params": {"steps": steps, **({"burn": burn} if burn else {})},
                    **({"key": f"k{i % keys}"} if keys else {}),
                }
                for i in range(instances)
            ),
            BATCH,
        )
    postgres = not url.startswith("sqlite:")
    tag = f"bench-{uuid.uuid4().hex[:8]}"
    worker_url = with_application_name(url, tag) if postgres else url
    options = WorkerOptions(
        concurrency=concurrency,
        gate=True,
        pgoptions="-c synchronous_commit=off" if async_commit else None,
        telemetry=telemetry,
    )
    async with worker_pool(worker_url, logs, processes, options) as pool:
        backends = await backend_pids(url, tag) if postgres else []
        server_before = sum(cpu_seconds(pid) or 0.0 for pid in backends)
        cpu_before = [cpu_seconds(w.pid) or 0.0 for w in pool.workers]
        started = pool.go()
        # The figure comes from the stored timestamps, not from this poll; polled often, its
        # count over the instances table would take the CPU of the workers it measures.
        done = await wait_for_status(
            url, workflow, instances, ("complete",), timeout=900, interval=0.25
        )
        cpu = sum(
            (cpu_seconds(w.pid) or 0.0) - before
            for w, before in zip(pool.workers, cpu_before, strict=True)
        )
        backends = await backend_pids(url, tag) if postgres else []
        server = sum(cpu_seconds(pid) or 0.0 for pid in backends) - server_before
    if pool.problems:
        raise RuntimeError("benchmark workers logged errors:\n" + "\n".join(pool.problems[:20]))
    timing = await span(url, workflow)
    sizes = await table_sizes(url)
    total_steps = instances * steps
    result = {
        "steps_per_s": total_steps / timing.seconds,
        "seconds": timing.seconds,
        "go_to_seen_done": done - started,
        "cpu_us_per_step": cpu / total_steps * 1e6,
        "create_per_s": instances / created,
        "bytes_per_instance": sum(sizes.values()) / instances,
        "steps_bytes_per_step": sizes.get("steps", 0) / total_steps,
        "instances_bytes_per_instance": sizes.get("instances", 0) / instances,
    }
    if postgres:
        result["server_cpu_us_per_step"] = server / total_steps * 1e6
    return result


def _schedule(
    variants: Sequence[tuple[str, str, dict[str, Any]]],
) -> list[tuple[int, str | None, str, dict[str, Any]]]:
    """One repetition's runs, in order: (process count, series key or None for an unlimited
    run, label, ``measure`` options). Each unlimited run is followed by the variants of as many
    processes, each run of as many in flight just before the limited run it is compared with:
    this machine's speed drifts over minutes, and a ratio of neighbours drifts least."""
    rank: dict[str, tuple[int, int]] = {}
    for group, ((workflow, processes), slots) in enumerate(SAME_IN_FLIGHT.items()):
        rank[_same_in_flight(processes, slots)] = (group, 0)
        rank[f"limited_{workflow}_{processes}"] = (group, 1)

    def place(variant: tuple[str, str, dict[str, Any]]) -> tuple[int, int]:
        return rank.get(variant[0], (len(SAME_IN_FLIGHT), 0))

    order: list[tuple[int, str | None, str, dict[str, Any]]] = []
    for processes in PROCESSES:
        es = "es" if processes > 1 else ""
        order.append((processes, None, f"{processes} process{es}", {"processes": processes}))
        beside = [v for v in variants if v[2].get("processes") == processes]
        order += [(processes, *variant) for variant in sorted(beside, key=place)]
    return order


async def _run_store(config: BenchConfig, store: str) -> Report:
    instances = 2_000 if config.quick else 10_000
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = defaultdict(list)
    floor_name = ""
    with work_directory(config) as directory:
        for _ in range(runs):
            floor = per_second(step_floor(store, directory, config.pg_url))
            floor_name = floor.name
            series["floor"].append(floor.value)
            variants = [*VARIANTS, *(POSTGRES_VARIANTS if store == "postgres" else ())]
            for processes, key, label, options in _schedule(variants):
                with database(config, store, directory) as url:
                    result = await measure(url, directory / "logs", instances=instances, **options)
                if key is None:  # an unlimited run: every figure, by process count
                    for name, value in result.items():
                        series[f"{name}_{processes}"].append(value)
                else:
                    series[key].append(result["steps_per_s"])
                print(f"  {NAME} {store} {label}: {result['steps_per_s']:,.0f} steps/s", flush=True)
    floor = Floor(floor_name, median(series["floor"]), "/s", tuple(series["floor"]))

    def fig(label: str, key: str, unit: str, with_floor: bool = False) -> Figure:
        return Figure(
            label, median(series[key]), unit, floor if with_floor else None, tuple(series[key])
        )

    report = Report(
        NAME,
        f"Throughput on {store}: {instances:,} instances x {STEPS} trivial steps "
        f"(median of {runs} runs)",
    )
    for n in PROCESSES:
        plural = "es" if n > 1 else ""
        report.figures.append(
            fig(f"steps/s, {n} worker process{plural}", f"steps_per_s_{n}", "/s", True)
        )
    if series["async_commit"]:
        report.figures.append(
            fig(
                f"steps/s, {ASYNC_COMMIT_PROCESSES} processes, workers' synchronous_commit=off",
                "async_commit",
                "/s",
                True,
            )
        )
    for processes in (1, LIMITED_PROCESSES):
        es = "es" if processes > 1 else ""
        unlimited_key = f"steps_per_s_{processes}"
        unlimited = Floor(
            f"unlimited, {processes} process{es}",
            median(series[unlimited_key]),
            "/s",
            tuple(series[unlimited_key]),
        )
        for label, workflow, _keys in LIMITED:
            values = series[f"limited_{workflow}_{processes}"]
            report.figures.append(
                Figure(
                    f"steps/s, {processes} process{es}, {label}",
                    median(values),
                    "/s",
                    unlimited,
                    tuple(values),
                )
            )
    labels = {workflow: label for label, workflow, _keys in LIMITED}
    for (workflow, processes), slots in SAME_IN_FLIGHT.items():
        es = "es" if processes > 1 else ""
        same_runs = series[_same_in_flight(processes, slots)]
        same = Floor(
            f"unlimited, {processes} process{es} of concurrency {slots}",
            median(same_runs),
            "/s",
            tuple(same_runs),
        )
        limited = series[f"limited_{workflow}_{processes}"]
        report.figures.append(
            Figure(
                f"steps/s, {processes} process{es}, {labels[workflow]}, vs as many in flight",
                median(limited),
                "/s",
                same,
                tuple(limited),
            )
        )
    for n in PROCESSES:
        es = "es" if n > 1 else ""
        report.figures.append(
            fig(f"worker CPU per step, {n} process{es}", f"cpu_us_per_step_{n}", "µs")
        )
        if f"server_cpu_us_per_step_{n}" in series:
            report.figures.append(
                fig(f"server CPU per step, {n} process{es}", f"server_cpu_us_per_step_{n}", "µs")
            )
    one = PROCESSES[0]
    report.figures += [
        fig("stored per instance (tables + indexes)", f"bytes_per_instance_{one}", "B"),
        fig("of which steps table, per step", f"steps_bytes_per_step_{one}", "B"),
        fig("of which instances table, per instance", f"instances_bytes_per_instance_{one}", "B"),
        fig("floor: single-row commits/s", "floor", "/s"),
    ]
    report.details = {
        "store": store,
        "instances": instances,
        "steps": STEPS,
        "processes": list(PROCESSES),
        "runs": runs,
        "create_batch": BATCH,
        "worker": "python -m benchmarks._worker: concurrency 100, lease 30 s, poll 0.5 s",
        "series": dict(series),
    }
    report.notes = [
        "steps/s = instances x steps / (last instance ended_at - first instance started_at), "
        "from the stored timestamps: first claim to last completion, process start-up excluded",
        "ratio = steps/s / single-row commits/s: above 1 means group commit put several steps "
        "in one commit",
        "worker CPU = user + system CPU of all worker processes from the start gate to all "
        "complete, per step; server CPU = the same for the PostgreSQL backends serving them",
        "stored = table and index bytes after the run with 1 process (SQLite: dbstat; "
        "PostgreSQL: pg_total_relation_size)",
        "synchronous_commit=off (PostgreSQL, workers' connections only): a commit returns before "
        "its WAL is flushed; a server crash may lose the last few hundred ms of worker writes "
        "(those steps run again), never an acknowledged create or event",
        f"flow control: the 1- and {LIMITED_PROCESSES}-process runs repeated with a fleet-wide "
        f"concurrency of 50, and with key_concurrency 1 over {KEYS} keys; the ratio is to the "
        "unlimited figure of as many processes; 'vs as many in flight': to an unlimited run whose "
        "workers have as many slots as the limit lets them fill (1 x 50 and 2 x 25 under "
        "concurrency 50, 2 x 50 under the keys)",
        f"heavy benchmark: median of {runs} runs (--heavy-runs)",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
