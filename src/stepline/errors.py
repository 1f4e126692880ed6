"""Stepline's exceptions.

Every error stepline raises derives from :class:`SteplineError`, and every message says what
happened and what to do about it. Control flow that user code must never swallow (an instance
being suspended or cancelled by the engine) derives from :class:`BaseException` instead, so a
plain ``except Exception`` inside ``Workflow.run`` cannot catch it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any


class SteplineError(Exception):
    """Root of every exception stepline raises on purpose."""


class NonRetryableError(SteplineError):
    """Raise from a step callback to fail the step at once, without further retries."""


class StepTimeoutError(SteplineError):
    """A step attempt ran past its ``timeout``, or ``wait_for_event`` timed out."""


class StepFailedError(SteplineError):
    """A step failed for good (retries exhausted, or a :class:`NonRetryableError`).

    It is raised inside ``Workflow.run`` at the ``await step.do(...)`` that failed, both the first
    time and on every replay afterwards, so ``try/except StepFailedError`` behaves the same way each
    time. ``error_name`` and ``message`` describe the last error the callback raised; on the first
    run that exception is also chained as ``__cause__``.
    """

    def __init__(self, step: str, error_name: str, message: str) -> None:
        super().__init__(f"step {step!r} failed: {error_name}: {message}")
        self.step = step
        self.error_name = error_name
        self.message = message


class WorkflowFailedError(SteplineError):
    """A child workflow awaited with ``step.wait_for_workflow`` ended errored or terminated."""

    def __init__(self, workflow: str, instance_id: str, status: str, error: Any) -> None:
        detail = f": {error.get('name')}: {error.get('message')}" if isinstance(error, dict) else ""
        super().__init__(f"workflow {workflow!r} instance {instance_id!r} ended {status}{detail}")
        self.workflow = workflow
        self.instance_id = instance_id
        self.status = status
        self.error = error


class WorkflowTimeoutError(SteplineError):
    """An instance ran past its deadline (its workflow's ``timeout``, ``create(timeout=...)``
    or its parent's): it ends ``errored`` with this error after its rollbacks ran, whatever it
    was doing (docs/operations.md, "Deadlines")."""


class WorkflowCancelledError(SteplineError):
    """A child instance whose parent ended was cancelled (``on_parent_close="request_cancel"``):
    it ends ``errored`` with this error after its rollbacks ran (docs/operations.md, "Children
    and their parent")."""


class InvalidPayloadError(SteplineError, ValueError):
    """A value that has to be stored is not JSON, or is larger than the configured limit."""


class InstanceAlreadyExistsError(SteplineError):
    """``create`` was given an instance id that already exists for that workflow."""

    def __init__(self, workflow: str, instance_id: str) -> None:
        super().__init__(
            f"workflow {workflow!r} already has an instance {instance_id!r}; "
            "pick another id, or use create_batch to skip existing ids"
        )
        self.workflow = workflow
        self.instance_id = instance_id


class DuplicateInstanceError(SteplineError):
    """``create`` was given a ``dedup_key`` that an unfinished instance of the workflow holds."""

    def __init__(self, workflow: str, dedup_key: str, instance_id: str) -> None:
        super().__init__(
            f"workflow {workflow!r} already has an unfinished instance {instance_id!r} with "
            f"dedup key {dedup_key!r}"
        )
        self.workflow = workflow
        self.dedup_key = dedup_key
        self.instance_id = instance_id


class InstanceNotFoundError(SteplineError, LookupError):
    """No instance with that id exists for that workflow."""

    def __init__(self, workflow: str, instance_id: str) -> None:
        super().__init__(f"workflow {workflow!r} has no instance {instance_id!r}")
        self.workflow = workflow
        self.instance_id = instance_id


class ScheduleNotFoundError(SteplineError, LookupError):
    """No schedule of that name is stored (none declared by a workflow a scheduler served).
    ``stored``: the names that are, when known, for the message."""

    def __init__(self, name: str, stored: Sequence[str] | None = None) -> None:
        message = f"no schedule is named {name!r}"
        if stored is not None:
            # Schedules reach the database only when a worker serving them starts: before
            # that, a schedule the code declares is unknown here.
            listed = ", ".join(stored[:10]) + (", ..." if len(stored) > 10 else "")
            where = f"; stored schedules: {listed}" if stored else ": no schedules are stored yet"
            message += (
                f"{where} (a worker serving a workflow with schedules stores them when it starts)"
            )
        super().__init__(message)
        self.name = name
        self.stored = None if stored is None else list(stored)


class ScheduleExistsError(SteplineError):
    """A schedule of that name is stored already: declared in code (``source == "code"``) or
    created at run time (``"api"``)."""

    def __init__(self, name: str, source: str) -> None:
        whose = "declared in code" if source == "code" else "created at run time"
        super().__init__(
            f"a schedule named {name!r} exists already ({whose}); choose another name"
            + ("" if source == "code" else " or update that one")
        )
        self.name = name
        self.source = source


class ScheduleReadOnlyError(SteplineError):
    """The schedule is declared in code: only the code changes or removes it (its pause and
    resume still work at run time)."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"schedule {name!r} is declared in code and cannot be changed or deleted at run "
            "time; change the workflow's schedules in code (pause and resume still work)"
        )
        self.name = name


class WorkflowNotFoundError(SteplineError, LookupError):
    """No workflow of that name is registered with the engine or known to the database."""

    def __init__(self, name: str, known: list[str]) -> None:
        choices = ", ".join(sorted(known)) if known else "none"
        super().__init__(f"unknown workflow {name!r}; known workflows: {choices}")
        self.name = name
        self.known = sorted(known)


class IllegalStateError(SteplineError):
    """The requested change is not allowed in the instance's current status."""

    def __init__(self, workflow: str, instance_id: str, status: str, action: str) -> None:
        super().__init__(
            f"cannot {action} instance {instance_id!r} of workflow {workflow!r}: it is {status}"
        )
        self.workflow = workflow
        self.instance_id = instance_id
        self.status = status
        self.action = action


class NonDeterminismError(SteplineError):
    """Replay met a step that does not match the recorded history.

    ``run()`` must call the same steps in the same order on every replay; branch only on step
    results, the event payload, and other recorded values.
    """


class DefinitionError(SteplineError, ValueError):
    """A workflow, pipeline or DAG definition is invalid."""


class StoreError(SteplineError):
    """The database failed in a way stepline could not recover from."""


class StoreUnavailableError(StoreError):
    """The database could not be reached for the whole of the store's retry period.

    The call failed without hanging; it can be repeated once the database is back (the message
    says whether the change may have been applied meanwhile).
    """


class PayloadKeyError(SteplineError):
    """A stored value is encrypted with a key this process does not have (its key id is not in
    ``[encryption] keys``), or it fails authentication (altered, or moved to another row).
    Nothing is returned in its place: never garbage."""


class BlobStoreError(SteplineError):
    """The blob store that holds offloaded values failed (unreachable, refused, or a blob is
    missing or altered). The message names the store and the blob. A step whose result could
    not be offloaded fails that attempt and is retried; nothing recorded is lost."""


class UnknownLimitError(SteplineError, LookupError):
    """A step named a limit that no ``[[limits]]`` table or ``stepline.Limit`` defines (raised
    by ``Store.acquire_limit``; the runtime ends the instance with a DefinitionError)."""


class LeaseLostError(SteplineError):
    """This worker no longer holds the lease of the instance it was running.

    Another worker has claimed it, or it was terminated or restarted. The activation stops at once;
    the instance is safe because every write is fenced on the lease.
    """


class ConfigError(SteplineError, ValueError):
    """The project configuration (stepline.toml, pyproject.toml or the environment) is invalid."""


class MessageError(SteplineError):
    """A query or an update did not give its answer (docs/messaging.md). ``error_name`` and
    ``message`` say why: the handler's own error, or stepline's (an unknown name, arguments
    the handler does not take, a validator's refusal, an instance that ended first)."""

    def __init__(self, what: str, error_name: str, message: str) -> None:
        super().__init__(f"{what}: {error_name}: {message}")
        self.error_name = error_name
        self.message = message


class QueryError(MessageError):
    """A query could not be answered: no query of that name, arguments it does not take, the
    handler raised, or it tried to run a step or change the workflow's state."""


class UpdateRejectedError(MessageError):
    """An update was turned down before its handler ran: no update of that name, arguments it
    does not take, or its validator raised. The instance is unchanged; the same update id gets
    the same answer."""


class UpdateFailedError(MessageError):
    """An update's handler raised (its error is the answer, recorded: a retry with the same
    update id gets it again), or the instance ended before the handler ran or finished."""


class _EngineSignal(BaseException):
    """Base for engine control flow travelling through user code. Never catch it."""


class SuspendInstance(_EngineSignal):
    """Raised inside ``run()`` when the instance must stop and wait (sleep, event, retry delay)."""


class InstanceFatalError(_EngineSignal):
    """Raised inside ``run()`` when the instance must end ``errored`` whatever user code does.

    Used for results that cannot be stored (not JSON or too large) and for non-determinism.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


def outage_level(exc: BaseException, level: int) -> int:
    """``level``, or INFO for a failure caused by the database being unreachable: the store
    logs each outage once, when it begins and when it ends, so the claims, renewals and
    activations that fail meanwhile do not repeat it (once per instance, say)."""
    cause = exc if isinstance(exc, StoreUnavailableError) else exc.__cause__
    return logging.INFO if isinstance(cause, StoreUnavailableError) else level
