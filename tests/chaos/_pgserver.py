"""A throwaway PostgreSQL server that a test can stop and start again on the same data.

Debian's PostgreSQL binaries (``initdb``, ``pg_ctl``) in a temporary directory, listening on a
free TCP port of 127.0.0.1 (never the shared server on 5432). PostgreSQL refuses to run as
root, so as root every command runs as the ``postgres`` OS user (``runuser``), with the data
directory owned by it.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

BIN_DIRS = [Path("/usr/lib/postgresql/15/bin"), *sorted(Path("/usr/lib/postgresql").glob("*/bin"))]


def _bin_dir() -> Path:
    for path in BIN_DIRS:
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    raise RuntimeError(
        "no PostgreSQL binaries (initdb, pg_ctl) for the throwaway server: looked in "
        f"{', '.join(map(str, BIN_DIRS))} and on PATH; install the postgresql package"
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PgServer:
    """``initdb`` at construction; :meth:`start`, :meth:`stop` (``fast`` or ``immediate``, the
    latter a crash as far as clients can tell), :meth:`close` deletes everything."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.user = "postgres" if os.geteuid() == 0 else None
        self.dir = Path(tempfile.mkdtemp(prefix="stepline-chaos-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "--auth=trust", "--encoding=UTF8", "-U", "postgres", "-D", self.data)

    def _run(self, tool: str, *args: object, timeout: float = 60.0) -> None:
        command = [str(self.bin / tool), *map(str, args)]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{tool} failed ({done.returncode}): {done.stderr.strip()}\nserver log:\n{log}"
            )

    def start(self) -> None:
        # The socket directory is the temporary one: /var/run/postgresql may be absent or
        # belong to the shared server.
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir}"
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
