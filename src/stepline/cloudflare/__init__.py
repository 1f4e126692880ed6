"""Cloudflare's Python Workflows on stepline: the programming model of ``from workers import
WorkflowEntrypoint`` (the step decorator with dependencies by parameter name, ``sleep``,
``sleep_until``, ``wait_for_event``, ``self.env`` bindings) and wrangler projects as they are.

``stepline worker --wrangler wrangler.jsonc`` serves a project unchanged; from Python,
:func:`load_wrangler` loads one (see docs/cloudflare.md, Python Workflows). Cloudflare's REST
API, which wrangler and the ``cloudflare`` SDK speak, is served by ``stepline serve``
(:mod:`stepline.http.cloudflare`).
"""

from __future__ import annotations

from ..errors import NonRetryableError
from ._bindings import Env, WorkflowBinding, WorkflowInstance
from ._entrypoint import WorkerEntrypoint, WorkflowEntrypoint
from ._step import WorkflowStep
from ._values import AttrDict, WorkflowEvent
from ._wrangler import WranglerConfig, WranglerProject, load_wrangler, read_wrangler

__all__ = [
    "AttrDict",
    "Env",
    "NonRetryableError",
    "WorkerEntrypoint",
    "WorkflowBinding",
    "WorkflowEntrypoint",
    "WorkflowEvent",
    "WorkflowInstance",
    "WorkflowStep",
    "WranglerConfig",
    "WranglerProject",
    "load_wrangler",
    "read_wrangler",
]
