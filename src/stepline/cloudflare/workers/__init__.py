"""Cloudflare's ``workers`` module as stepline provides it to a wrangler project's ``main``
(``stepline worker --wrangler``): the names a Python workflow needs.

Provided: ``WorkflowEntrypoint``, ``WorkerEntrypoint`` (so a module that also defines a Worker
imports; its handlers are never called) and ``workers.workflows.NonRetryableError``. The rest of
the SDK (``fetch``, ``Response``, ``Request``, ``DurableObject``, bindings other than workflows,
...) can be imported, so the module loads, but raises when used, saying stepline does not
provide it. Only wrangler projects see this module as ``workers``: a normal install does not
shadow a package of that name.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .._entrypoint import WorkerEntrypoint, WorkflowEntrypoint
from . import workflows

__all__ = ["WorkerEntrypoint", "WorkflowEntrypoint", "workflows"]

NOT_PROVIDED = frozenset(
    {
        "Blob", "BlobEnding", "BlobValue", "Body", "Context", "DurableObject", "FetchKwargs",
        "FetchResponse", "File", "FormData", "FormDataValue", "Headers", "JSBody", "Request",
        "RequestInitCfProperties", "Response", "env", "fetch", "handler",
        "import_from_javascript", "patch_env", "python_from_rpc", "python_to_rpc", "waitUntil",
        "wait_until",
    }
)  # fmt: skip
"""The SDK's other names: importable, refused when used."""


class NotProvided:
    """A name of the SDK that stepline does not provide: using it raises, naming it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _refuse(self) -> NoReturn:
        raise NotImplementedError(
            f"workers.{self._name} is not provided by stepline: stepline runs the workflows of "
            "a wrangler project (WorkflowEntrypoint classes), not its Worker handlers, fetch or "
            "other bindings (see docs/cloudflare.md, Python Workflows)"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse()

    def __getattr__(self, name: str) -> NoReturn:
        self._refuse()

    def __mro_entries__(self, bases: tuple[Any, ...]) -> NoReturn:
        self._refuse()

    def __repr__(self) -> str:
        return f"<workers.{self._name}: not provided by stepline>"


def __getattr__(name: str) -> Any:
    if name in NOT_PROVIDED:
        return NotProvided(name)
    raise AttributeError(f"module 'workers' has no attribute {name!r}")
