"""Sleeping fleet: many instances each sleeping, then one step. Worker memory and wake-up lag.

For each store and each fleet size, on a fresh database: the instances (``bench-sleeper``: a
durable ``step.sleep`` of S seconds, then one step) are created with ``create_batch`` before any
worker runs; one worker process (engine defaults: concurrency 100, lease 30 s, poll interval
0.5 s) starts, reports ready, and is let go. Every 0.25 s the benchmark samples the worker's RSS
(``VmRSS`` of ``/proc/<pid>/status``) and, every second, the instance counts by status, until
all complete.

- RSS idle: the worker with its store open, before it claims anything.
- RSS while sleeping: the median of the samples taken while at least 99% of the fleet was
  sleeping at once (``waiting``), else while the most were; the count is in the notes.
- RSS peak: the largest sample of the whole run (putting the fleet to sleep and waking it).
- Wake-up lag: for each instance, the step's start (``started_at`` of step ``after``) minus the
  scheduled wake (``wake_at`` of step ``nap``), both as the store recorded them; p50, p99, max.

Sizes and sleep: the issue's 100,000 sleepers x 30 s with ``--full`` (10,000 for comparison);
by default 10,000 and 1,000 sleepers x 10 s; ``--quick`` 1,000 and 200 x 3 s. A shorter sleep
changes neither figure: the lag is measured against each instance's recorded wake time, and the
sleep only has to outlast the time it takes to put the whole fleet to sleep, so that the RSS is
sampled with every instance asleep at once. (With 100,000 that takes about 30 s on 2 cores, so
the first ones may wake while the last go to sleep; the notes say how many slept at once.)

- Lone sleeper: while the whole fleet sleeps (if there is time before the first wake-up), 10
  more instances sleeping 0.5 s are created 0.1 s apart; their lag is the timer's own, with the
  fleet in the table and no backlog in front of them. A large fleet's lag is mostly backlog:
  the worker wakes instances more slowly than it put them to sleep, as the rates show.

Run: ``python -m benchmarks fleet`` (``--full`` for 100,000).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ._common import client, cpu_seconds, create_in_batches, wait_for_status
from ._config import BenchConfig, database, parse, work_directory
from ._db import fetch, status_counts, vacuum
from ._procs import RssSampler, WorkerOptions, worker_pool
from ._report import Figure, Report, median, percentile
from ._run import execute
from ._workflows import Sleeper, SleeperProbe

NAME = "fleet"
SAMPLE_INTERVAL = 0.25
STATUS_INTERVAL = 1.0
"""Between the benchmark's status counts: each reads the whole instances table, work that would
otherwise compete with the worker and the server for the same 2 cores."""
PROBES = 10
PROBE_GAP = 0.1
PROBE_SLEEP = 0.5
PROBE_SPAN = PROBES * PROBE_GAP + PROBE_SLEEP + 0.5


@dataclass(frozen=True)
class FleetRun:
    """What one run of one fleet size measured (RSS in MiB, lags in seconds)."""

    rss_idle: float
    rss_sleeping: float
    rss_peak: float
    most_sleeping: int
    sleeping_samples: int
    lag_p50: float
    lag_p99: float
    lag_max: float
    cpu_per_instance_us: float
    seconds: float
    sleep_rate: float
    """Instances put to sleep per second (first to last sleep step started)."""
    wake_rate: float
    """Instances woken per second (first to last step after the sleep started)."""
    probe_ms_p50: float
    """Lag (ms) of the probes that slept while the whole fleet slept (NaN: there was no time)."""
    probe_ms_max: float


def sizes(config: BenchConfig) -> tuple[tuple[int, ...], float]:
    """(fleet sizes, sleep seconds) for this configuration."""
    if config.full:
        return (10_000, 100_000), 30.0
    if config.quick:
        return (200, 1_000), 3.0
    return (1_000, 10_000), 10.0


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def measure(
    url: str, logs: Path, *, count: int, sleep: float, vacuum_every: float = 0.0
) -> FleetRun:
    """Put ``count`` sleepers to sleep on ``url`` with one worker process and wake them; with
    ``vacuum_every`` (PostgreSQL), VACUUM the instances table that often meanwhile."""
    async with client(url) as engine:
        await create_in_batches(
            engine, Sleeper.name, ({"params": {"sleep": sleep}} for _ in range(count))
        )
    async with worker_pool(url, logs, 1, WorkerOptions(gate=True)) as pool:
        worker = pool.workers[0]
        with RssSampler(pool.workers, interval=SAMPLE_INTERVAL) as rss:
            await asyncio.sleep(1.0)  # idle samples: the worker with its store open
            idle = median([kib for _, kib in rss.samples])
            cpu_before = cpu_seconds(worker.pid) or 0.0
            started = pool.go()
            sleeping: list[tuple[float, int]] = []  # (time, instances waiting)
            deadline = time.monotonic() + max(600.0, sleep * 10)
            probing: asyncio.Task[None] | None = None
            vacuuming = asyncio.create_task(_vacuum(url, vacuum_every)) if vacuum_every else None
            while True:
                counts = await status_counts(url, Sleeper.name)
                now = time.time()
                sleeping.append((now, counts.get("waiting", 0)))
                if counts.get("complete", 0) >= count:
                    break
                if (
                    probing is None
                    and counts.get("waiting", 0) >= count
                    and now + PROBE_SPAN + 1.0 < started + sleep
                ):
                    probing = asyncio.create_task(_probe(url))
                if time.monotonic() > deadline:
                    raise TimeoutError(f"fleet of {count} not complete in time: {counts}")
                await asyncio.sleep(STATUS_INTERVAL)
            cpu = (cpu_seconds(worker.pid) or 0.0) - cpu_before
            finished = time.time()
            if vacuuming is not None:
                vacuuming.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await vacuuming
            if probing is not None:
                await probing
    if pool.problems:
        raise RuntimeError("fleet worker logged errors:\n" + "\n".join(pool.problems[:20]))
    most = max(n for _, n in sleeping)
    threshold = max(int(count * 0.99), 1) if most >= count * 0.99 else most
    windows = [t for t, n in sleeping if n >= threshold]
    during = rss.between(min(windows), max(windows) + STATUS_INTERVAL) if windows else []
    if not during:
        during = [kib for _, kib in rss.samples]
    rows = await _sleeps(url, Sleeper.name)
    if len(rows) != count:
        raise RuntimeError(f"expected {count} wake-ups, found {len(rows)}")
    slept = [float(r[0]) for r in rows]
    woke = [float(r[2]) for r in rows]
    lags = [float(r[2] - r[1]) for r in rows]
    probes = [float(r[2] - r[1]) for r in await _sleeps(url, SleeperProbe.name)]
    return FleetRun(
        rss_idle=idle / 1024,
        rss_sleeping=median(during) / 1024,
        rss_peak=max(kib for _, kib in rss.samples) / 1024,
        most_sleeping=most,
        sleeping_samples=len(windows),
        lag_p50=percentile(lags, 50),
        lag_p99=percentile(lags, 99),
        lag_max=max(lags),
        cpu_per_instance_us=cpu / count * 1e6,
        seconds=finished - started,
        sleep_rate=count / max(max(slept) - min(slept), 1e-3),
        wake_rate=count / max(max(woke) - min(woke), 1e-3),
        probe_ms_p50=percentile(probes, 50) * 1000 if probes else math.nan,
        probe_ms_max=max(probes) * 1000 if probes else math.nan,
    )


async def _sleeps(url: str, workflow: str) -> list[tuple[float, float, float]]:
    """(sleep started, scheduled wake, step after the sleep started) per instance."""
    rows = await fetch(
        url,
        "SELECT n.started_at, n.wake_at, a.started_at FROM {t}steps n "
        "JOIN {t}steps a ON a.instance_pk = n.instance_pk AND a.name = 'after' AND a.count = 1 "
        "JOIN {t}instances i ON i.pk = n.instance_pk "
        f"WHERE n.name = 'nap' AND n.count = 1 AND i.workflow = '{workflow}'",
    )
    return [(float(a), float(b), float(c)) for a, b, c in rows]


async def _vacuum(url: str, every: float) -> None:
    """VACUUM the instances table every ``every`` seconds, as autovacuum would on a server that
    runs it (this one may not): it removes the index entries of the rows' old versions."""
    while True:
        await asyncio.sleep(every)
        await vacuum(url, "instances")


async def _probe(url: str) -> None:
    """While the fleet sleeps: ``PROBES`` instances sleeping ``PROBE_SLEEP`` s, created
    ``PROBE_GAP`` s apart; their lag is the timer's own, with no backlog in front."""
    async with client(url) as engine:
        binding = engine.workflow(SleeperProbe.name)
        for n in range(PROBES):
            await binding.create(id=f"probe-{n}", params={"sleep": PROBE_SLEEP})
            await asyncio.sleep(PROBE_GAP)
        await wait_for_status(
            url, SleeperProbe.name, PROBES, ("complete",), timeout=PROBE_SPAN + 30
        )


async def _run_store(config: BenchConfig, store: str) -> Report:
    fleet_sizes, sleep = sizes(config)
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = defaultdict(list)
    autovacuum = ""
    with work_directory(config) as directory:
        for _ in range(runs):
            for count in fleet_sizes:
                with database(config, store, directory) as url:
                    if store == "postgres" and not autovacuum:
                        autovacuum = str((await fetch(url, "SHOW autovacuum"))[0][0])
                    result = await measure(
                        url,
                        directory / "logs",
                        count=count,
                        sleep=sleep,
                        vacuum_every=config.pg_vacuum if store == "postgres" else 0.0,
                    )
                for key, value in vars(result).items():
                    series[f"{key}_{count}"].append(float(value))
                print(
                    f"  {NAME} {store} {count:,}: sleeping RSS {result.rss_sleeping:.1f} MiB, "
                    f"lag p99 {result.lag_p99:.3f} s",
                    flush=True,
                )

    def fig(label: str, key: str, unit: str) -> Figure:
        return Figure(label, median(series[key]), unit, None, tuple(series[key]))

    report = Report(
        NAME,
        f"Sleeping fleet on {store}: {' and '.join(f'{n:,}' for n in reversed(fleet_sizes))} "
        f"instances x sleep {sleep:g} s, one worker process (median of {runs} runs)",
    )
    for count in reversed(fleet_sizes):
        n = f"{count:,}"
        report.figures += [
            fig(f"{n}: worker RSS while they sleep", f"rss_sleeping_{count}", "MiB"),
            fig(f"{n}: worker RSS peak (whole run)", f"rss_peak_{count}", "MiB"),
            fig(f"{n}: worker RSS idle (before claiming)", f"rss_idle_{count}", "MiB"),
            fig(f"{n}: wake-up lag p50", f"lag_p50_{count}", "s"),
            fig(f"{n}: wake-up lag p99", f"lag_p99_{count}", "s"),
            fig(f"{n}: wake-up lag max", f"lag_max_{count}", "s"),
            fig(f"{n}: lone sleeper's lag p50, fleet asleep", f"probe_ms_p50_{count}", "ms"),
            fig(f"{n}: lone sleeper's lag max, fleet asleep", f"probe_ms_max_{count}", "ms"),
            fig(f"{n}: put to sleep per second", f"sleep_rate_{count}", "/s"),
            fig(f"{n}: woken per second", f"wake_rate_{count}", "/s"),
            fig(f"{n}: worker CPU per instance", f"cpu_per_instance_us_{count}", "µs"),
            fig(f"{n}: go to all complete", f"seconds_{count}", "s"),
        ]
    report.details = {
        "store": store,
        "sizes": list(fleet_sizes),
        "sleep": sleep,
        "runs": runs,
        "series": dict(series),
    }
    report.notes = [
        "most sleeping at once: "
        + ", ".join(
            f"{median(series[f'most_sleeping_{n}']):,.0f} of {n:,}" for n in reversed(fleet_sizes)
        ),
        "lag = started_at of the step after the sleep - wake_at of the sleep (store clock); "
        "when the worker wakes fewer per second than it put to sleep, a backlog builds and the "
        "lag grows with the fleet",
        f"lone sleeper = {PROBES} instances sleeping {PROBE_SLEEP:g} s, created "
        f"{PROBE_GAP:g} s apart while the whole fleet slept (so nothing queued before them): "
        "the timer's own lag with the fleet in the table (nan: no time to probe before the "
        "first wake-up)",
        "targets: RSS < 150 MB (flat in the number of sleepers), lag p99 < 1 s",
        f"heavy benchmark: median of {runs} runs (--heavy-runs)",
    ]
    if autovacuum:
        report.notes.append(
            f"server's autovacuum: {autovacuum} (until a VACUUM, every claim walks the dead "
            "index entries that the fleet's earlier updates of ready_at left at the low end "
            "of its index)"
        )
        report.details["autovacuum"] = autovacuum
    if store == "postgres" and config.pg_vacuum:
        report.title += f", VACUUM every {config.pg_vacuum:g} s (--pg-vacuum)"
        report.details["pg_vacuum"] = config.pg_vacuum
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
