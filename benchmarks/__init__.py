"""Stepline's benchmarks: printed, never asserted.

``python -m benchmarks`` runs them all on both stores; ``python -m benchmarks throughput`` one of
them; ``python -m benchmarks.throughput`` also works. Every figure is the median of several runs,
shown next to a floor measured in the same run where one applies (the cheapest durable write the
database can do) with their ratio, and every report is also written as JSON to
``benchmarks/results/`` (git-ignored). See ``docs/performance.md`` for the figures and what they
mean.

Adding a benchmark: a module with ``async def run(config: BenchConfig) -> list[Report]`` (one
report per store in ``config.stores``, using :func:`benchmarks._config.database` for a fresh
database and :mod:`benchmarks._floors` for the floor), registered in ``BENCHMARKS`` of
:mod:`benchmarks.__main__`. Worker processes come from :mod:`benchmarks._procs`; their workflows
live in :mod:`benchmarks._workflows`.

The package itself imports nothing, so that a worker process (``python -m benchmarks._worker``)
loads only what it runs.
"""
