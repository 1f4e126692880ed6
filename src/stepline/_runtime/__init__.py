"""The runtime: one activation of one instance, from its recorded history to its next
suspension or its end.

The journey of a step (``await step.do("charge", charge)``)::

    WorkflowStep.do          step.py: notes the call (calls.StepCalls), hands it to
    Activation.do            activation.py, which runs it on the activation's shared parts:
    do.do                    checks the name and config, counts the call (quiesce.Quiescence),
    Replay.find              replay.py: the key ("charge", 1) and its record, if any:
                             a recorded step returns its stored result here; a new step
                             met while recorded ones are uncalled waits (Quiescence.hold)
    do.run_attempts          writer.committed(): earlier records, before this callback runs;
                             RunningMarks.add (marks.py: the running record, the timeout);
                             _callbacks.invoke(callback) with a StepContext if it takes one;
                             on failure: writer.write(errored or waiting), the retry parks;
    StepWriter.send          writer.py: the result, write-behind (end of the loop turn, or
                             inside the finish); step.do returns it at once
    StepWriter.committed     awaited before the next callback, a child's start, the finish,
                             and a record written at once (StepWriter.write)

Modules: ``activation`` (execute, finish, errors, termination), ``state`` (what steps share,
the settings a worker gives), ``replay`` (step names and history lookup), ``divergence`` (a
replay that left its history), ``quiesce`` (parking, holding, suspension), ``writer`` (step
records), ``marks`` (the attempt clock), ``do``, ``waits``, ``children``, ``rollback`` (the
step kinds), ``calls`` (step calls never awaited), ``signals`` (the runtime's own exceptions,
stored errors), ``hooks`` (the seam a test harness overrides), ``observer`` (the seam
telemetry observes through); messaging (docs/messaging.md): ``updates`` (update handlers run
and replayed in their places), ``turns`` (where a replay's steps wait for them, and where a
query's stops), ``query`` (answering a query from a replay), ``readonly`` (code that may only
read the state), ``streams`` (``step.publish``).
"""

from .._callbacks import invoke
from .activation import Activation
from .do import INTERRUPTED_ATTEMPT, timeout_error
from .hooks import RuntimeHooks
from .marks import RECORD_RUNNING_AFTER, RunningMarks
from .observer import (
    ActivationObservation,
    AttemptObservation,
    AttemptOutcome,
    CreateEnd,
    Observer,
    TickOutcome,
    WaitOutcome,
)
from .query import answer_query, check_update
from .replay import validate_step_name
from .signals import ActivationAborted, error_info
from .state import ActivationSettings

__all__ = [
    "INTERRUPTED_ATTEMPT",
    "RECORD_RUNNING_AFTER",
    "Activation",
    "ActivationAborted",
    "ActivationObservation",
    "ActivationSettings",
    "AttemptObservation",
    "AttemptOutcome",
    "CreateEnd",
    "Observer",
    "RunningMarks",
    "RuntimeHooks",
    "TickOutcome",
    "WaitOutcome",
    "answer_query",
    "check_update",
    "error_info",
    "invoke",
    "timeout_error",
    "validate_step_name",
]
