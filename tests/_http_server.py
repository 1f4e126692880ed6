"""A real uvicorn server in a background thread, for tests that speak HTTP over a socket."""

from __future__ import annotations

import threading
import time
from types import TracebackType

from starlette.applications import Starlette

from stepline.http import build_server


class ServerThread:
    """Serve ``app`` on 127.0.0.1 (a free port chosen by the OS) until :meth:`stop`.

    The app's lifespan runs in the server's own event loop, so an app made with
    ``manage_engine=True`` opens its engine (and worker) there.
    """

    def __init__(self, app: Starlette) -> None:
        self.server = build_server(
            app, host="127.0.0.1", port=0, log_level="warning", access_log=False
        )
        self._thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the test server stopped while starting; see the log above")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test server did not start within {timeout} seconds")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self, timeout: float = 20.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"the test server did not stop within {timeout} seconds")

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
