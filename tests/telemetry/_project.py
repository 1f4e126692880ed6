"""A small project on disk for the process tests of telemetry: its workflows (``flows.py``),
its ``stepline.toml``, and the stepline commands run on it as subprocesses.

``flows.py`` sets up OpenTelemetry's SDK as an application would, at import, when
``SPANS_DIR`` is set: every span that ends is written at once, one JSON document per line, to
``SPANS_DIR/spans-<pid>.jsonl`` (the SDK's console exporter), so that a process killed with
SIGKILL leaves the spans it ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

FLOWS = """
import logging
import os
import pathlib
import time

from stepline import NonRetryableError, workflow

if os.environ.get("SPANS_DIR"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    _out = open(
        os.path.join(os.environ["SPANS_DIR"], f"spans-{os.getpid()}.jsonl"), "a", buffering=1
    )
    _provider = TracerProvider()
    _provider.add_span_processor(
        SimpleSpanProcessor(
            ConsoleSpanExporter(out=_out, formatter=lambda s: s.to_json(indent=None) + "\\n")
        )
    )
    trace.set_tracer_provider(_provider)

log = logging.getLogger("flows")
if os.environ.get("MARKS_DIR"):
    # The application's own handler and format, with stepline's ids through its filter.
    from stepline.telemetry import LogContextFilter

    _handler = logging.FileHandler(os.path.join(os.environ["MARKS_DIR"], "flows.log"))
    _handler.setFormatter(
        logging.Formatter("%(instance_id)s %(step)s %(attempt)s %(trace_id)s %(message)s")
    )
    _handler.addFilter(LogContextFilter())
    log.addHandler(_handler)
    log.setLevel(logging.INFO)


def _block(ctx):
    marker = pathlib.Path(os.environ["MARKS_DIR"]) / "blocked"
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        time.sleep(120)  # killed here
    return "passed"


@workflow(name="relay")
async def relay(event, step):
    await step.do("one", lambda: 1)
    await step.do("block", _block)
    return await step.do("two", lambda: 2)


def _work(ctx):
    log.info("working on %s", ctx.instance_id)
    return ctx.attempt


def _fail():
    raise NonRetryableError("told to fail")


@workflow(name="batch")
async def batch(event, step):
    await step.do("work", _work)
    if (event.payload or {}).get("fail"):
        await step.do("fail", _fail)
    return "done"
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Project:
    """The project in ``root``, on the SQLite database ``root/stepline.db``."""

    def __init__(self, root: Path, config: str = "") -> None:
        self.root = root
        self.url = f"sqlite:///{root}/stepline.db"
        self.spans = root / "spans"
        self.marks = root / "marks"
        self.spans.mkdir()
        self.marks.mkdir()
        (root / "flows.py").write_text(FLOWS, encoding="utf-8")
        (root / "stepline.toml").write_text(
            'database = "sqlite:///stepline.db"\n\n'
            '[[workflows]]\nname = "relay"\nclass_name = "flows:relay"\n\n'
            '[[workflows]]\nname = "batch"\nclass_name = "flows:batch"\n\n'
            '[worker]\nlease = "1 second"\npoll_interval = "0.05 seconds"\n'
            'heartbeat = "0.2 seconds"\n\n' + config,
            encoding="utf-8",
        )
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, *args: str, spans: bool = False) -> subprocess.Popen[str]:
        """``stepline ARGS`` in the project, its stderr to ``root/<command>-<n>.log``."""
        env = {k: v for k, v in os.environ.items() if k != "STEPLINE_DATABASE_URL"}
        env["MARKS_DIR"] = str(self.marks)
        env["PYTHONUNBUFFERED"] = "1"
        if spans:
            env["SPANS_DIR"] = str(self.spans)
        log = self.root / f"{args[0]}-{len(self.procs)}.log"
        with log.open("w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "stepline.cli", *args],
                cwd=self.root,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                text=True,
            )
        proc.log = log  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[str]) -> str:
        """SIGTERM, wait for a clean exit; its log."""
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        text: str = proc.log.read_text()  # type: ignore[attr-defined]
        # serve ends as uvicorn does: by the signal it caught, once shut down.
        assert proc.returncode in (0, -signal.SIGTERM), text
        return text

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def wait_until(check: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.05)


def logs_of(proc: subprocess.Popen[str]) -> str:
    with contextlib.suppress(OSError):
        return str(proc.log.read_text())  # type: ignore[attr-defined]
    return ""
