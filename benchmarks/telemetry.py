"""Telemetry: what traces and metrics cost, as throughput beside the same run without them.

The throughput benchmark's workload (instances x 10 trivial steps, created before the workers
start, figure from the stored timestamps) with one worker process, four ways, side by side in
each repetition and in a rotating order (the machine's speed drifts over minutes): telemetry
off (the engine has no observer), Prometheus metrics only (recorded at every step, not
scraped), traces only (every span sampled, on the OpenTelemetry SDK with a batch processor and
an exporter that drops the spans: ``benchmarks._spans``), and both. A second run with telemetry
off measures how far two identical runs differ: the noise any other figure is read against.

Each figure is shown with the run without telemetry of the same repetition as its floor: the
ratio is what remains of the throughput (targets: metrics 0.95 or more, traces 0.85 or more).

Run: ``python -m benchmarks telemetry`` (``--quick``: 2,000 instances).
"""

from __future__ import annotations

from collections import defaultdict

from ._config import BenchConfig, database, work_directory
from ._report import Figure, Floor, Report, median
from .throughput import STEPS, measure

NAME = "telemetry"
MODES = (
    ("off", "off"),
    ("metrics", "metrics only"),
    ("traces", "traces, 100% sampled"),
    ("both", "metrics and traces"),
    ("off_again", "off, a second run"),
)
"""(series key, label) of each run of a repetition; the worker's ``--telemetry`` is the key
(``off_again`` runs ``off``)."""


async def run(config: BenchConfig) -> list[Report]:
    """One report per store in ``config.stores``."""
    return [await _run_store(config, store) for store in config.stores]


async def _run_store(config: BenchConfig, store: str) -> Report:
    instances = 2_000 if config.quick else 10_000
    runs = config.repetitions(heavy=True)
    series: dict[str, list[float]] = defaultdict(list)
    with work_directory(config) as directory:
        for repetition in range(runs):
            shift = repetition % len(MODES)
            for key, label in MODES[shift:] + MODES[:shift]:
                mode = "off" if key == "off_again" else key
                with database(config, store, directory) as url:
                    result = await measure(
                        url, directory / "logs", instances=instances, processes=1, telemetry=mode
                    )
                series[key].append(result["steps_per_s"])
                series[f"cpu_{key}"].append(result["cpu_us_per_step"])
                print(f"  {NAME} {store} {label}: {result['steps_per_s']:,.0f} steps/s", flush=True)
    off = Floor("telemetry off", median(series["off"]), "/s", tuple(series["off"]))
    report = Report(
        NAME,
        f"Telemetry on {store}: {instances:,} instances x {STEPS} trivial steps, 1 worker "
        f"process (median of {runs} runs)",
    )
    for key, label in MODES[1:]:
        report.figures.append(
            Figure(f"steps/s, {label}", median(series[key]), "/s", off, tuple(series[key]))
        )
    cpu_off = Floor(
        "worker CPU per step, off", median(series["cpu_off"]), "µs", tuple(series["cpu_off"])
    )
    for key, label in MODES[1:4]:
        values = series[f"cpu_{key}"]
        report.figures.append(
            Figure(f"worker CPU per step, {label}", median(values), "µs", cpu_off, tuple(values))
        )
    report.details = {
        "store": store,
        "instances": instances,
        "steps": STEPS,
        "runs": runs,
        "series": dict(series),
    }
    report.notes = [
        "ratio = steps/s with telemetry / steps/s without, in the same repetition (the median "
        "of those ratios); 'off, a second run' shows how far identical runs differ",
        "metrics: prometheus-client counters and histograms updated at every step and "
        "activation, never scraped; traces: the OpenTelemetry SDK, every span sampled, batch "
        "processor, exporter that drops the spans",
    ]
    return report
