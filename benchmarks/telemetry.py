"""Telemetry: what traces and metrics cost, as throughput beside the same run without them.

The throughput benchmark's workload (instances x 10 trivial steps, created before the workers
start, figure from the stored timestamps) with one worker process, five ways, side by side in
each repetition and in a rotating order (the machine's speed drifts over minutes): telemetry
off (the engine has no observer), Prometheus metrics only (recorded at every step, not
scraped), traces only (every span sampled, on the OpenTelemetry SDK with a batch processor and
an exporter that drops the spans: ``benchmarks._spans``), both, and traces with 10% of the
traces sampled (the SDK's ``parentbased_traceidratio``). A second run with telemetry
off measures how far two identical runs differ: the noise any other figure is read against.

Each figure is shown with the run without telemetry of the same repetition as its floor: the
ratio is what remains of the throughput (targets: metrics 0.95 or more, traces 0.85 or more).
Traces have a floor of their own, measured in each repetition in this process on the same SDK
set-up: the CPU of a bare span times the spans a step makes (its attempt's, and a tenth of its
activation's), added to the engine's CPU per step with telemetry off; the most of the
throughput that traces can leave, whatever stepline does, is the engine's CPU over that sum.

Run: ``python -m benchmarks telemetry`` (``--quick``: 2,000 instances).
"""

from __future__ import annotations

from collections import defaultdict

from ._config import BenchConfig, database, work_directory
from ._report import Figure, Floor, Report, median
from ._spans import span_cpu
from .throughput import STEPS, measure

NAME = "telemetry"
MODES = (
    ("off", "off"),
    ("metrics", "metrics only"),
    ("traces", "traces, 100% sampled"),
    ("both", "metrics and traces"),
    ("traces_10", "traces, 10% sampled"),
    ("off_again", "off, a second run"),
)
"""(series key, label) of each run of a repetition; the worker's ``--telemetry`` is the key
(``off_again`` runs ``off``)."""
SPANS_PER_STEP = (STEPS + 1) / STEPS
"""Each instance runs in one activation: a span per step attempt and one per activation."""


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
            bare, step = span_cpu()
            series["span_bare"].append(bare)
            series["span_step"].append(step)
            print(f"  {NAME} SDK span: {bare:.1f} µs bare, {step:.1f} µs a step's", flush=True)
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
    for key, label in MODES[1:-1]:
        values = series[f"cpu_{key}"]
        report.figures.append(
            Figure(f"worker CPU per step, {label}", median(values), "µs", cpu_off, tuple(values))
        )
    report.figures.extend(_span_floor(series, off, cpu_off))
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
        f"traces' floor: the engine's CPU per step off + {SPANS_PER_STEP:.1f} bare SDK spans "
        "(measured in this process); 'steps/s, the most traces can leave' is steps/s off x "
        "that CPU ratio, the best any instrumentation on this SDK could do",
    ]
    return report


def _span_floor(series: dict[str, list[float]], off: Floor, cpu_off: Floor) -> list[Figure]:
    """What a span costs the SDK, and the floor it sets traces, repetition by repetition."""
    bare, step = series["span_bare"], series["span_step"]
    floor = [c + SPANS_PER_STEP * b for c, b in zip(series["cpu_off"], bare, strict=True)]
    best = [s * c / f for s, c, f in zip(series["off"], series["cpu_off"], floor, strict=True)]
    span = Floor("SDK CPU per span, bare", median(bare), "µs", tuple(bare))
    return [
        Figure("SDK CPU per span, bare", median(bare), "µs", runs=tuple(bare)),
        Figure("SDK CPU per span, a step attempt's", median(step), "µs", span, tuple(step)),
        Figure("worker CPU per step, traces' floor", median(floor), "µs", cpu_off, tuple(floor)),
        Figure("steps/s, the most traces can leave", median(best), "/s", off, tuple(best)),
    ]
