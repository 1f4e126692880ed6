"""Worker processes for the benchmarks: start, gate, sample memory, kill, stop.

Each worker is ``sys.executable -m benchmarks._worker`` run from the repository root, with its
stderr in a log file. :func:`worker_pool` starts several, waits until each has opened the store,
and on exit stops them (SIGTERM, then SIGKILL after a timeout) and collects any error lines from
their logs, which the benchmarks print as notes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_READY_TIMEOUT = 60.0


@dataclass(frozen=True)
class WorkerOptions:
    """Command-line settings of a benchmark worker (defaults: the engine's)."""

    concurrency: int = 100
    lease: float = 30.0
    poll: float = 0.5
    gate: bool = False
    """Wait for :meth:`WorkerProcess.go` before claiming."""
    pgoptions: str | None = None
    """``PGOPTIONS`` for the worker (libpq session settings, e.g. ``-c synchronous_commit=off``)."""
    telemetry: str = "off"
    """What the worker reports (``benchmarks._worker --telemetry``): off, metrics, traces,
    traces_10, both."""
    workflows: tuple[str, ...] = ()
    """The benchmark workflows it runs, by name (none: all of them)."""


class WorkerProcess:
    """One running ``benchmarks._worker`` process."""

    def __init__(
        self, proc: asyncio.subprocess.Process, worker_id: str, stderr: Path, gated: bool
    ) -> None:
        self.proc = proc
        self.worker_id = worker_id
        self.stderr = stderr
        self._gated = gated

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    async def start(cls, url: str, logs: Path, options: WorkerOptions) -> WorkerProcess:
        """Start a worker and return once it has opened the store (printed ``ready``)."""
        worker_id = f"bench-{uuid.uuid4().hex[:8]}"
        stderr = logs / f"{worker_id}.log"
        args = [
            "-m",
            "benchmarks._worker",
            "--url",
            url,
            "--concurrency",
            str(options.concurrency),
            "--lease",
            str(options.lease),
            "--poll",
            str(options.poll),
            "--worker-id",
            worker_id,
        ]
        if options.gate:
            args.append("--gate")
        if options.telemetry != "off":
            args += ["--telemetry", options.telemetry]
        if options.workflows:
            args += ["--workflows", ",".join(options.workflows)]
        env = dict(os.environ)
        if options.pgoptions is not None:
            env["PGOPTIONS"] = options.pgoptions
        with stderr.open("wb") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *args,
                cwd=ROOT,
                env=env,
                stdin=asyncio.subprocess.PIPE if options.gate else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        worker = cls(proc, worker_id, stderr, options.gate)
        await worker._wait_ready()
        return worker

    async def _wait_ready(self) -> None:
        if self.proc.stdout is None:
            raise RuntimeError("benchmark worker started without a stdout pipe")
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), _READY_TIMEOUT)
        except TimeoutError:
            line = b""
        if not line.startswith(b"ready"):
            self.kill()
            await self.proc.wait()
            raise RuntimeError(
                f"benchmark worker {self.worker_id} did not start (exit code "
                f"{self.proc.returncode}); its log {self.stderr}:\n{self.log_text()[-2000:]}"
            )

    def go(self) -> None:
        """Let a gated worker start claiming."""
        if not self._gated or self.proc.stdin is None:
            raise RuntimeError(f"worker {self.worker_id} was not started with a gate")
        self.proc.stdin.write(b"go\n")

    def rss_kib(self) -> int | None:
        """Resident set size (``VmRSS`` of ``/proc/<pid>/status``) in KiB; None once gone."""
        try:
            with open(f"/proc/{self.pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            return None
        return None

    def kill(self) -> None:
        """SIGKILL, at once."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)

    async def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (graceful shutdown), then SIGKILL if it has not exited within ``timeout``."""
        if self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            self.kill()
            await self.proc.wait()

    def log_text(self) -> str:
        return self.stderr.read_text(errors="replace") if self.stderr.exists() else ""

    def problems(self) -> list[str]:
        """Error lines and tracebacks from the worker's log (a traceback in full)."""
        found: list[str] = []
        lines = self.log_text().splitlines()
        for index, line in enumerate(lines):
            if " ERROR " in line or line.startswith("Traceback"):
                end = index + 1
                if line.startswith("Traceback"):
                    while end < len(lines) and lines[end].startswith((" ", "\t")):
                        end += 1
                    end += 1  # the exception line
                text = "\n".join(lines[index:end])
                found.append(f"worker {self.worker_id} (pid {self.pid}): {text}")
        return found


@dataclass
class WorkerPool:
    """Worker processes on one database, and the error lines their logs held at the end."""

    url: str
    logs: Path
    options: WorkerOptions
    workers: list[WorkerProcess] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    async def start(self, count: int = 1, options: WorkerOptions | None = None) -> None:
        """Start ``count`` more workers, concurrently; return when all are ready."""
        opts = options or self.options
        started = await asyncio.gather(
            *(WorkerProcess.start(self.url, self.logs, opts) for _ in range(count)),
            return_exceptions=True,
        )
        failures = [s for s in started if isinstance(s, BaseException)]
        self.workers.extend(s for s in started if isinstance(s, WorkerProcess))
        if failures:
            raise failures[0]

    def go(self) -> float:
        """Open the gates of every gated worker; return the time (``time.time()``)."""
        now = time.time()
        for worker in self.workers:
            worker.go()
        return now

    async def stop(self) -> None:
        await asyncio.gather(*(w.stop() for w in self.workers))
        for worker in self.workers:
            self.problems.extend(worker.problems())


@asynccontextmanager
async def worker_pool(
    url: str, logs: Path, count: int, options: WorkerOptions | None = None
) -> AsyncIterator[WorkerPool]:
    """``count`` ready workers on ``url``; stopped (and their logs checked) on exit."""
    await asyncio.to_thread(logs.mkdir, parents=True, exist_ok=True)
    pool = WorkerPool(url, logs, options or WorkerOptions())
    try:
        await pool.start(count)
        yield pool
    except BaseException as exc:
        for worker in pool.workers:
            tail = "\n".join(worker.log_text().splitlines()[-15:])
            exc.add_note(
                f"log of worker {worker.worker_id} (pid {worker.pid}), last lines:\n{tail}"
            )
        raise
    finally:
        await pool.stop()


class RssSampler:
    """Samples the RSS of some processes every ``interval`` seconds in a background task."""

    def __init__(self, workers: list[WorkerProcess], interval: float = 0.2) -> None:
        self.workers = workers
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        """(time.time(), summed RSS in KiB of the workers still alive)."""
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> int:
        total = sum(rss for w in self.workers if (rss := w.rss_kib()) is not None)
        self.samples.append((time.time(), total))
        return total

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval)

    def __enter__(self) -> RssSampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def between(self, start: float, end: float) -> list[int]:
        """The samples taken in ``[start, end]`` (KiB)."""
        return [rss for t, rss in self.samples if start <= t <= end]
