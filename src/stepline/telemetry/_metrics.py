"""Prometheus metrics on ``prometheus-client`` (the ``metrics`` extra): what this process did,
counted as the observer sees it, and the fleet's figures, read from the store at scrape time.

Imported only when metrics are wired (:mod:`._wiring`). Every metric lives in one registry per
:class:`Metrics` (a fresh one unless given), so that two engines in one process never clash.
Labels are bounded by what the code declares (workflow, step and schedule names, outcomes,
statuses, limit names, queue trigger names): never an instance id or a flow control key.
docs/observability.md lists every metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from ..errors import ConfigError, StoreUnavailableError
from ._fleet import FleetReadings
from ._tally import Counts, Durations

log = logging.getLogger("stepline.telemetry")

DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
)  # fmt: skip
"""Seconds: a step of a millisecond to one of an hour (a step's default timeout is 10 min)."""

READ_TIMEOUT = 10.0
"""Seconds a scrape waits for the fleet's figures before it shows the previous reading."""


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class ConsumerView(Protocol):
    """What the metrics read of a queue consumer (:class:`stepline.triggers.queues.Consumer`)."""

    @property
    def trigger(self) -> _Named: ...

    @property
    def handled(self) -> int: ...

    @property
    def dead_lettered(self) -> int: ...


class Metrics:
    """The metrics of one engine's process, and where they are exposed from."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.created = Counts(
            "stepline_instances_created", "Instances created by this process.",
            ["workflow", "trigger"],
        )  # fmt: skip
        self.finished = Counts(
            "stepline_instances_finished", "Instances that ended in this process's worker.",
            ["workflow", "outcome"],
        )  # fmt: skip
        self.attempts = Counts(
            "stepline_step_attempts", "Step attempts that ended, by outcome.",
            ["workflow", "step", "outcome"],
        )  # fmt: skip
        self.step_seconds = Durations(
            "stepline_step_duration_seconds", "How long step attempts ran.",
            ["workflow", "step"], DURATION_BUCKETS,
        )  # fmt: skip
        self.activation_seconds = Durations(
            "stepline_activation_duration_seconds",
            "How long activations ran, from their claim to their last write.",
            ["workflow"], DURATION_BUCKETS,
        )  # fmt: skip
        self.claim_latency = Durations(
            "stepline_claim_latency_seconds",
            "From the moment an instance became due (created, woken) to its claim.",
            ["workflow"], DURATION_BUCKETS,
        )  # fmt: skip
        self.takeovers = Counts(
            "stepline_lease_takeovers",
            "Claims of an instance whose previous worker stopped while a step ran.",
            ["workflow"],
        )  # fmt: skip
        self.store_errors = Counts(
            "stepline_store_errors",
            "Failed store operations of this process's worker (kind: unavailable, error).",
            ["operation", "kind"],
        )  # fmt: skip
        self.ticks = Counts(
            "stepline_schedule_ticks", "Cron schedule ticks handled by this process's scheduler.",
            ["schedule", "outcome"],
        )  # fmt: skip
        self._process = _ProcessCollector(
            [self.created, self.finished, self.attempts, self.takeovers, self.store_errors,
             self.ticks],
            [self.step_seconds, self.activation_seconds, self.claim_latency],
        )  # fmt: skip
        self.registry.register(self._process)
        self.fleet: FleetReadings | None = None
        self.content_type = CONTENT_TYPE_LATEST

    def store_error(self, operation: str, error: BaseException) -> None:
        unavailable = isinstance(error, StoreUnavailableError) or isinstance(
            error.__cause__, StoreUnavailableError
        )
        kind = "unavailable" if unavailable else "error"
        self.store_errors.add((operation, kind))

    # -- what is read at scrape time -------------------------------------------------------------

    def watch_fleet(self, readings: FleetReadings) -> None:
        """Expose the fleet's figures from ``readings`` (once)."""
        if self.fleet is None:
            self.fleet = readings
            self._fleet = _FleetCollector(readings)
            self.registry.register(self._fleet)

    def watch_worker(self, running: Callable[[], int], concurrency: int) -> None:
        """Expose how many activations this process's worker runs (``running()``), of
        ``concurrency``."""
        self._process.worker = (running, concurrency)

    def watch_consumers(self, consumers: Iterable[ConsumerView]) -> None:
        self._process.consumers.extend(consumers)

    def serve(self, host: str, port: int) -> Callable[[], None]:
        """Serve ``/metrics`` on ``host:port`` from a thread (prometheus-client's own server);
        called on the engine's loop, whose store the scrapes read. Returns what stops it."""
        if self.fleet is not None:
            self._fleet.loop = asyncio.get_running_loop()
        try:
            server, thread = start_http_server(port, host, self.registry)
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; choose another "
                "--metrics-port"
            ) from exc
        log.info("serving Prometheus metrics on http://%s:%d/metrics", host, port)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(5)

        return stop

    async def exposition(self) -> bytes:
        """The Prometheus text format of every metric, the fleet's figures read first."""
        if self.fleet is not None:
            await self.fleet.get()
        return generate_latest(self.registry)


class _ProcessCollector(Collector):
    """What this process counted (:mod:`._tally`), and what its worker and queue consumers
    count themselves, read when scraped."""

    def __init__(self, counts: list[Counts], durations: list[Durations]) -> None:
        self.counts = counts
        self.durations = durations
        self.worker: tuple[Callable[[], int], int] | None = None
        self.consumers: list[ConsumerView] = []

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        for counts in self.counts:
            family = CounterMetricFamily(counts.name, counts.description, labels=counts.labels)
            for key, value in counts.snapshot():
                family.add_metric(key, value)
            yield family
        for durations in self.durations:
            yield _histogram(durations)
        if self.worker is not None:
            running = GaugeMetricFamily(
                "stepline_worker_activations", "Activations this process's worker runs now."
            )
            running.add_metric([], self.worker[0]())
            slots = GaugeMetricFamily(
                "stepline_worker_concurrency", "Activations this process's worker may run at once."
            )
            slots.add_metric([], self.worker[1])
            yield running
            yield slots
        if self.consumers:
            messages = CounterMetricFamily(
                "stepline_queue_messages",
                "Queue messages this process consumed: into instances, or dead-lettered.",
                labels=["trigger", "outcome"],
            )
            for consumer in self.consumers:
                name = consumer.trigger.name
                consumed = consumer.handled - consumer.dead_lettered
                messages.add_metric([name, "consumed"], consumed)
                messages.add_metric([name, "dead_lettered"], consumer.dead_lettered)
            yield messages


def _histogram(durations: Durations) -> HistogramMetricFamily:
    family = HistogramMetricFamily(durations.name, durations.description, labels=durations.labels)
    bounds = [*(repr(float(b)) for b in durations.bounds), "+Inf"]
    for key, found in durations.snapshot():
        cumulative, buckets = 0.0, []
        for bound, count in zip(bounds, found[:-1], strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        family.add_metric(key, buckets, found[-1])
    return family


class _FleetCollector(Collector):
    """The fleet's figures of the last reading (the same on every process of the fleet)."""

    def __init__(self, readings: FleetReadings) -> None:
        self.readings = readings
        self.loop: asyncio.AbstractEventLoop | None = None
        """The loop of the store, when scrapes come from another thread (:meth:`Metrics.serve`)."""

    def describe(self) -> Iterable[Metric]:
        return []

    def _refresh(self) -> None:
        """Read the fleet on the store's loop, from a scrape's thread (on the loop, the scrape
        read it before: :meth:`Metrics.exposition`)."""
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop()
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.readings.get(), loop).result(READ_TIMEOUT)

    def collect(self) -> Iterator[Metric]:
        self._refresh()
        up = GaugeMetricFamily(
            "stepline_store_up", "Whether the last read of the fleet's figures succeeded."
        )
        up.add_metric([], 1 if self.readings.store_up else 0)
        yield up
        fleet = self.readings.last
        if fleet is None:
            return
        statuses = GaugeMetricFamily(
            "stepline_instances", "Unfinished instances by status.", labels=["workflow", "status"]
        )
        backlog = GaugeMetricFamily(
            "stepline_backlog", "Instances due to run that no worker runs yet.", labels=["workflow"]
        )
        oldest = GaugeMetricFamily(
            "stepline_backlog_oldest_age_seconds",
            "How long the oldest instance due to run has waited (0 when none waits).",
            labels=["workflow"],
        )
        held = GaugeMetricFamily(
            "stepline_instances_held",
            "Due instances held back by a full limit, by limit.",
            labels=["workflow", "limit"],
        )
        for figures in fleet.workflows:
            name = figures.workflow
            for status, count in figures.statuses.items():
                statuses.add_metric([name, status], count)
            backlog.add_metric([name], figures.backlog)
            age = 0.0 if figures.oldest_due is None else max(0.0, fleet.at - figures.oldest_due)
            oldest.add_metric([name], age)
            for limit, count in figures.held.items():
                held.add_metric([name, limit], count)
        workers = GaugeMetricFamily("stepline_workers_live", "Live workers of the fleet.")
        workers.add_metric([], fleet.workers_live)
        yield from (statuses, backlog, oldest, held, workers)
