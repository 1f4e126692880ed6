"""The worker: claims runnable instances under a lease and runs their activations.

One :meth:`Worker.run` with named side tasks (lease renewal, heartbeat, retention) under a stop
event and a graceful shutdown timeout. :meth:`Worker.run_once` is one iteration of the claim
loop at the store's current time, so tests drive time with a manual clock instead of sleeping.

Modules: ``_worker`` (the orchestrator: run, the claim loop, activations), ``_slots`` (slots
and reservations), ``_renewal`` (lease renewal), ``_heartbeat`` (liveness), ``_retention``
(purging finished instances), ``_shutdown`` (the graceful stop), ``_clockstep`` (clock steps),
``_settings``, ``_log``.
"""

from ._clockstep import CLOCK_STEP
from ._settings import WorkerSettings, default_worker_id
from ._slots import Reservation
from ._worker import Worker

__all__ = ["CLOCK_STEP", "Reservation", "Worker", "WorkerSettings", "default_worker_id"]
