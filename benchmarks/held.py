"""Held: what a backlog that a full limit holds back costs the claims of other workflows.

Workflow ``a`` has ``concurrency = 1`` and its one slot is taken; behind it wait 0, 20,000 or
100,000 of its instances (``--quick``: 0 and 20,000), created first. A worker that serves ``a``
and ``b`` claims for both, and each claim finds one new instance of ``b``, created just before
it. The figure is the median time of 20 such claims, on a store opened in this process; the
floor is the same claim with no held backlog, measured in the same run. A ratio near 1 means
the held backlog costs the other workflows' claims nothing. The same again with the backlog
held by a rate instead (``rate_limit = (1, "1 hour")``, its one start taken), and by busy keys:
``a`` has ``key_concurrency = 1`` and every instance the key ``hot``, or one of 100 keys
(instance i ``hot{i % 100}``, the first of each running). Behind busy keys one of the 20 claims
sets the backlog aside (on SQLite the first, on PostgreSQL the third: once claims stepped over
it three times), and the slowest claim's time is a figure of its own. The backlog is created in
one batch, so it shares one ``ready_at``.

Run: ``python -m benchmarks held``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence

from stepline.limits import Rate, WorkflowLimits
from stepline.store import create_store
from stepline.store.base import NewInstance, Store, WorkflowMeta

from ._config import BenchConfig, database, parse, work_directory
from ._report import Figure, Floor, Report, median
from ._run import execute

NAME = "held"
CLAIMS = 20
KEYS = 100
LEASE = 3600.0


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def measure(
    url: str, backlog: int, *, by: str = "concurrency", keys: int = 0
) -> tuple[float, float]:
    """The median seconds of a claim for ``a`` (held, ``backlog`` waiting: ``by`` its
    concurrency, its rate, or with ``keys`` behind that many busy keys) and ``b`` (one due), and
    the slowest claim's."""
    store: Store = create_store(url)
    await store.open()
    try:
        limits = {
            "concurrency": WorkflowLimits(concurrency=1),
            "rate": WorkflowLimits(rate=Rate(1, 3600.0)),
            "keys": WorkflowLimits(key_concurrency=1),
        }[by]
        await store.register_workflows(
            [
                WorkflowMeta("a", "bench:A", None, limits),
                WorkflowMeta("b", "bench:B", None, WorkflowLimits()),
            ]
        )
        running = max(keys, 1)
        waiting = [
            NewInstance(f"a{n}", None, key=f"hot{n % keys}" if keys else None)
            for n in range(backlog + running)
        ]
        await store.create_instances("a", waiting, trigger="api", skip_existing=False)
        await store.claim("bench", ["a"], running, LEASE, store.now())  # takes every slot
        times = []
        for n in range(CLAIMS):
            item = NewInstance(f"b{n}", None)
            await store.create_instances("b", [item], trigger="api", skip_existing=False)
            start = time.perf_counter()
            claims = (await store.claim("bench", ["a", "b"], 10, LEASE, store.now())).claims
            times.append(time.perf_counter() - start)
            if [c.instance.id for c in claims] != [item.id]:
                raise RuntimeError(f"the claim took {[c.instance.id for c in claims]}")
        return median(times), max(times)
    finally:
        await store.close()


async def _run_store(config: BenchConfig, store: str) -> Report:
    sizes: Sequence[int] = (0, 20_000) if config.quick else (0, 20_000, 100_000)
    runs = config.repetitions(heavy=False)
    kinds = (
        ("held back", "concurrency", 0),
        ("held back by a rate", "rate", 0),
        ("behind a busy key", "keys", 1),
        (f"behind {KEYS} busy keys", "keys", KEYS),
    )
    series: dict[str, list[float]] = defaultdict(list)
    with work_directory(config) as directory:
        for _ in range(runs):
            for size in sizes:
                for how, by, keys in kinds[: 1 if size == 0 else len(kinds)]:
                    name = f"{size} {how}"
                    with database(config, store, directory) as url:
                        typical, slowest = await measure(url, size, by=by, keys=keys)
                    series[name].append(typical * 1e6)
                    series[f"{name}, slowest"].append(slowest * 1e3)
                    print(
                        f"  {NAME} {store} {size:,} {how}: {series[name][-1]:,.0f} µs"
                        f" (the slowest: {series[f'{name}, slowest'][-1]:,.1f} ms)",
                        flush=True,
                    )
    floor = Floor(
        "no held backlog", median(series["0 held back"]), "µs", tuple(series["0 held back"])
    )
    report = Report(
        NAME, f"Held on {store}: a claim for two workflows, one held back (median of {runs})"
    )
    for how, _by, _keys in kinds:
        for size in sizes[1:]:
            values = series[f"{size} {how}"]
            report.figures.append(
                Figure(
                    f"claim, {size:,} instances {how}", median(values), "µs", floor, tuple(values)
                )
            )
    for how, _by, _keys in kinds[2:]:
        for size in sizes[1:]:
            values = series[f"{size} {how}, slowest"]
            report.figures.append(
                Figure(
                    f"the claim that sets {size:,} aside {how}",
                    median(values),
                    "ms",
                    None,
                    tuple(values),
                )
            )
    report.details = {
        "store": store,
        "claims": CLAIMS,
        "runs": runs,
        "series": dict(series),
    }
    report.notes = [
        "each figure: the median of 20 claims for [a, b] that each take one new instance of b",
        "ratio = the claim's time / the same claim with no instance of a waiting",
        "the claim that sets them aside: behind busy keys, the slowest of the 20",
    ]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
