"""Payload codecs: what encryption and offloading cost per step, and a 200 MB result.

Sequential workflows of 5 steps (each created, then awaited to completion, with the worker in
the same process), each step returning a string of a given size, under four configurations:

- plain: no codec (as every database without ``[payloads]``), 1 KB results;
- encrypted: ``[encryption]`` with one key, 1 KB results (AES-GCM, each record bound to its row);
- offloaded: 300 KB results, ``[payloads.blobs]`` a directory (each result a file written and
  fsynced before its row), against 300 KB results stored inline without a codec;
- offloaded and encrypted: the same 300 KB results, encrypted then offloaded.

Then one workflow whose one step returns a 200 MB string: create to complete, and reading its
steps back (``instance.steps()``, which fetches the blob).

Run: ``python -m benchmarks payloads``.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Sequence
from pathlib import Path

from stepline import Engine, WorkflowEvent, WorkflowStep, workflow
from stepline.payloads import BlobsConfig, KeySource, PayloadConfig

from ._config import BenchConfig, database, parse, work_directory
from ._report import Figure, Report, median
from ._run import execute

NAME = "payloads"
STEPS = 5
KEY_VARIABLE = "STEPLINE_BENCH_PAYLOAD_KEY"


@workflow(name="payload_steps")
async def payload_steps(event: WorkflowEvent, step: WorkflowStep) -> int:
    size, steps = event.payload["size"], event.payload["steps"]
    for n in range(steps):
        await step.do(f"s{n}", lambda: "v" * size)
    return int(steps)


def _config(name: str, directory: Path) -> PayloadConfig | None:
    keys = (KeySource("bench", env=KEY_VARIABLE),)
    blobs = BlobsConfig(url=(directory / f"blobs-{time.monotonic_ns()}").as_uri())
    return {
        "plain": None,
        "inline": None,
        "encrypted": PayloadConfig(keys=keys),
        "offloaded": PayloadConfig(blobs=blobs),
        "offloaded+encrypted": PayloadConfig(blobs=blobs, keys=keys),
    }[name]


SIZES = {"plain": 1000, "encrypted": 1000, "inline": 300_000, "offloaded": 300_000}
SIZES["offloaded+encrypted"] = 300_000


async def _per_step(url: str, name: str, directory: Path, workflows: int) -> float:
    """Seconds per step of sequential workflows under configuration ``name``."""
    params = {"size": SIZES[name], "steps": STEPS}
    payloads = _config(name, directory)
    async with Engine(url, [payload_steps], payloads=payloads) as engine:
        binding = engine.workflow("payload_steps")
        for _ in range(3):  # warm up
            await (await binding.create(params=params)).wait()
        start = time.perf_counter()
        for _ in range(workflows):
            await (await binding.create(params=params)).wait()
        return (time.perf_counter() - start) / (workflows * STEPS)


async def _huge(url: str, directory: Path, size: int) -> tuple[float, float]:
    """Seconds from create to complete of one step returning ``size`` bytes, and to read its
    steps back."""
    payloads = PayloadConfig(blobs=BlobsConfig(url=(directory / "huge").as_uri()))
    async with Engine(url, [payload_steps], payloads=payloads) as engine:
        start = time.perf_counter()
        instance = await engine.workflow("payload_steps").create(params={"size": size, "steps": 1})
        await instance.wait()
        done = time.perf_counter() - start
        start = time.perf_counter()
        steps = await instance.steps()
        read = time.perf_counter() - start
        assert len(steps[0].output) == size
        return done, read


async def run(config: BenchConfig) -> list[Report]:
    os.environ.setdefault(KEY_VARIABLE, base64.b64encode(os.urandom(32)).decode())
    return [await _run_store(config, store) for store in config.stores]


async def _run_store(config: BenchConfig, store: str) -> Report:
    workflows = 20 if config.quick else 100
    huge = (20 if config.quick else 200) * 1024 * 1024
    runs = config.repetitions(heavy=False)
    series: dict[str, list[float]] = {name: [] for name in (*SIZES, "huge", "huge_read")}
    with work_directory(config) as directory:
        for _ in range(runs):
            for name in SIZES:  # the configurations take turns within each run
                with database(config, store, directory) as url:
                    seconds = await _per_step(url, name, directory, workflows)
                series[name].append(seconds * 1e6)
        with database(config, store, directory) as url:
            done, read = await _huge(url, directory, huge)
        series["huge"].append(done)
        series["huge_read"].append(read)

    def fig(label: str, key: str, unit: str) -> Figure:
        return Figure(label, median(series[key]), unit, None, tuple(series[key]))

    mb = huge // (1024 * 1024)
    report = Report(NAME, f"Payload codecs on {store} (median of {runs} runs)")
    report.figures = [
        fig("1 KB results, no codec: time per step", "plain", "µs"),
        fig("1 KB results, encrypted: time per step", "encrypted", "µs"),
        fig("300 KB results inline, no codec: time per step", "inline", "µs"),
        fig("300 KB results offloaded to a directory: time per step", "offloaded", "µs"),
        fig("300 KB results encrypted and offloaded: time per step", "offloaded+encrypted", "µs"),
        fig(f"one {mb} MB result: create to complete", "huge", "s"),
        fig(f"one {mb} MB result: reading it back (instance.steps())", "huge_read", "s"),
    ]
    report.details = {"store": store, "workflows": workflows, "steps": STEPS, "runs": runs,
                      "series": series}  # fmt: skip
    report.notes = [f"sequential workflows of {STEPS} steps, worker in the same process"]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    execute(run, parse(__doc__ or NAME, argv))


if __name__ == "__main__":
    main()
