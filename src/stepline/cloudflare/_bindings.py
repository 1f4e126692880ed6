"""``self.env``: a binding per workflow of the project, with Cloudflare's ``create``,
``create_batch`` and ``get``, and instance handles with its methods; the ``vars`` of the wrangler
file. Every call goes to stepline's client layer (:class:`stepline.WorkflowBinding`,
:class:`stepline.Instance`) of the engine the env is attached to."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..client import Instance
from ..client import WorkflowBinding as ClientBinding
from ..engine import Engine
from ..retention import from_cloudflare
from ._values import AttrDict, converted

_CREATE_KEYS = ("id", "params", "retention", "locationHint")


class Env:
    """What ``self.env`` holds: one :class:`WorkflowBinding` per workflow named in the wrangler
    file (``env.MY_WORKFLOW``) and its ``vars`` (``env.API_HOST``). The bindings act on the
    engine given to :meth:`attach` (``stepline worker --wrangler`` attaches its own)."""

    def __init__(
        self, workflows: Mapping[str, str] | None = None, vars: Mapping[str, Any] | None = None
    ) -> None:
        object.__setattr__(self, "_engine", None)
        object.__setattr__(self, "_names", tuple(sorted({*(workflows or {}), *(vars or {})})))
        for key, value in (vars or {}).items():
            object.__setattr__(self, key, value)
        for binding, workflow in (workflows or {}).items():
            object.__setattr__(self, binding, WorkflowBinding(self, binding, workflow))

    def attach(self, engine: Engine) -> None:
        """Make the bindings create and look up instances through ``engine``."""
        object.__setattr__(self, "_engine", engine)

    def _client(self, binding: str, workflow: str) -> ClientBinding:
        """Stepline's binding of ``workflow`` on the attached engine."""
        engine: Engine | None = self._engine
        if engine is None:
            raise RuntimeError(
                f"self.env.{binding} is not attached to a stepline engine; "
                "`stepline worker --wrangler` attaches it, from Python call "
                "project.env.attach(engine) (project = stepline.cloudflare.load_wrangler(...))"
            )
        return engine.workflow(workflow)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        names = ", ".join(self._names) or "none"
        raise AttributeError(
            f"self.env has no binding or var {name!r} (it has: {names}); stepline provides "
            "the wrangler file's workflows and vars only, no KV, R2, D1 or other bindings"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("self.env is read-only")

    def __repr__(self) -> str:
        return f"<Env {', '.join(self._names)}>"


class WorkflowBinding:
    """A workflow binding (``self.env.MY_WORKFLOW``): ``create``, ``create_batch``, ``get``."""

    def __init__(self, env: Env, binding: str, workflow: str) -> None:
        self._env = env
        self.binding = binding
        self.workflow = workflow

    def __repr__(self) -> str:
        return f"<WorkflowBinding {self.binding} -> {self.workflow}>"

    def _client(self) -> ClientBinding:
        return self._env._client(self.binding, self.workflow)

    async def create(
        self, options: Mapping[str, Any] | None = None, /, **kwargs: Any
    ) -> WorkflowInstance:
        """``create()``, ``create(id=..., params=...)`` or ``create({"id": ..., "params":
        ...})``; ``retention`` (``{"successRetention", "errorRetention"}``) is the instance's
        retention; ``locationHint`` is accepted and has no effect."""
        given = _options(options, kwargs, "create")
        retention = from_cloudflare(
            given.get("retention"), "successRetention", "errorRetention", where="retention"
        )
        instance = await self._client().create(
            given.get("id"), given.get("params"), retention=retention
        )
        return WorkflowInstance(instance)

    async def create_batch(self, batch: Iterable[Mapping[str, Any]]) -> list[WorkflowInstance]:
        """Create many instances in one transaction: ``[{"id": ..., "params": ...,
        "retention": ...}, ...]`` (each item as :meth:`create` takes it); ids that already exist
        are kept as they are."""
        items: list[dict[str, Any]] = []
        for index, item in enumerate(batch):
            what = f"create_batch item {index}"
            given = _options(item, {}, what)
            made: dict[str, Any] = {k: given[k] for k in ("id", "params") if k in given}
            retention = from_cloudflare(
                given.get("retention"), "successRetention", "errorRetention",
                where=f"retention of {what}",
            )  # fmt: skip
            items.append({**made, "retention": retention})
        return [WorkflowInstance(i) for i in await self._client().create_batch(items)]

    async def get(self, id: str) -> WorkflowInstance:
        """A handle on the instance ``id`` (:class:`~stepline.InstanceNotFoundError` if none)."""
        return WorkflowInstance(await self._client().get(id))


class WorkflowInstance:
    """An instance handle as Cloudflare's binding returns it: ``id``, ``status()``,
    ``pause()``, ``resume()``, ``terminate()``, ``restart()``, ``send_event()``, ``delete()``."""

    def __init__(self, instance: Instance) -> None:
        self._instance = instance
        self.id = instance.id

    def __repr__(self) -> str:
        return f"<WorkflowInstance {self._instance.workflow}/{self.id}>"

    async def status(self) -> AttrDict:
        """``{status, error?, output?}`` (``error``: ``{name, message}``)."""
        status = await self._instance.status()
        shaped = AttrDict(status=status.status)
        if status.error is not None:
            shaped["error"] = converted(status.error)
        if status.output is not None:
            shaped["output"] = converted(status.output)
        return shaped

    async def pause(self) -> None:
        await self._instance.pause()

    async def resume(self) -> None:
        await self._instance.resume()

    async def terminate(self, options: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        """``terminate()`` or ``terminate({"rollback": True})`` (or ``rollback=True``)."""
        given = {**(options or {}), **kwargs}
        unknown = sorted(set(given) - {"rollback"})
        if unknown:
            raise ValueError(f"terminate: unknown option {unknown[0]!r}; allowed: rollback")
        await self._instance.terminate(rollback=bool(given.get("rollback", False)))

    async def restart(self, options: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        """``restart()`` or ``restart({"from": {"name": ..., "count": ...}})`` (``type`` is
        accepted: a step is its name and count)."""
        given = {**(options or {}), **kwargs}
        start = given.get("from")
        if start is None:
            await self._instance.restart()
            return
        if not isinstance(start, Mapping) or "name" not in start:
            raise ValueError(
                f"restart: 'from' must be {{'name': ..., 'count'?: ...}}, got {start!r}"
            )
        await self._instance.restart(start["name"], count=start.get("count", 1))

    async def send_event(self, event: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        """``send_event({"type": ..., "payload": ...})`` (or ``type=..., payload=...``)."""
        given = {**(event or {}), **kwargs}
        if "type" not in given:
            raise ValueError("send_event needs the event's type: {'type': ..., 'payload': ...}")
        await self._instance.send_event(given["type"], given.get("payload"))

    async def delete(self) -> None:
        await self._instance.delete()


def _options(options: Any, kwargs: Mapping[str, Any], what: str) -> dict[str, Any]:
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"{what}: options are a dict like {{'id': ..., 'params': ...}}")
    given = {**(options or {}), **kwargs}
    unknown = sorted(set(given) - set(_CREATE_KEYS))
    if unknown:
        raise ValueError(
            f"{what}: unknown option {unknown[0]!r}; allowed: {', '.join(_CREATE_KEYS)}"
        )
    return given
