"""Stepline: durable workflows for Python.

Write a workflow as ordinary ``async`` code made of named steps; stepline records every step's
result, retries failures with backoff, sleeps and waits for events without holding memory, rolls
back finished steps when a later one fails, and resumes after any crash from the last finished
step, on SQLite (embedded, zero set-up) or PostgreSQL (many workers, many machines).
"""

from .client import Instance, WorkflowBinding
from .clock import ManualClock, SystemClock
from .config import DEFAULT_NON_RETRYABLE, RetryAfter, RetryConfig, StepConfig
from .dag import Dag, Pipeline
from .durations import parse_duration
from .engine import Engine
from .errors import (
    BlobStoreError,
    ConfigError,
    DefinitionError,
    DuplicateInstanceError,
    IllegalStateError,
    InstanceAlreadyExistsError,
    InstanceNotFoundError,
    InvalidPayloadError,
    LeaseLostError,
    MessageError,
    NonDeterminismError,
    NonRetryableError,
    PayloadKeyError,
    QueryError,
    ScheduleExistsError,
    ScheduleReadOnlyError,
    StepFailedError,
    SteplineError,
    StepTimeoutError,
    StoreError,
    StoreUnavailableError,
    UpdateFailedError,
    UpdateRejectedError,
    WorkflowCancelledError,
    WorkflowFailedError,
    WorkflowNotFoundError,
    WorkflowTimeoutError,
)
from .handlers import query, update
from .limits import Limit, Rate
from .records import (
    EventRecord,
    InstanceEvent,
    InstancePage,
    InstanceRecord,
    InstanceStatus,
    PendingRetry,
    StepRecord,
    WorkerInfo,
)
from .schedule import Schedule
from .step import StepContext, Stream, WorkflowStep
from .store.types import StreamItem
from .sync import SyncEngine, SyncInstance, SyncWorkflowBinding
from .values import register_type
from .workflow import Workflow, WorkflowEvent, workflow

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_NON_RETRYABLE",
    "BlobStoreError",
    "ConfigError",
    "Dag",
    "DefinitionError",
    "DuplicateInstanceError",
    "Engine",
    "EventRecord",
    "IllegalStateError",
    "Instance",
    "InstanceAlreadyExistsError",
    "InstanceEvent",
    "InstanceNotFoundError",
    "InstancePage",
    "InstanceRecord",
    "InstanceStatus",
    "InvalidPayloadError",
    "LeaseLostError",
    "Limit",
    "ManualClock",
    "MessageError",
    "NonDeterminismError",
    "NonRetryableError",
    "PayloadKeyError",
    "PendingRetry",
    "Pipeline",
    "QueryError",
    "Rate",
    "RetryAfter",
    "RetryConfig",
    "Schedule",
    "ScheduleExistsError",
    "ScheduleReadOnlyError",
    "StepConfig",
    "StepContext",
    "StepFailedError",
    "StepRecord",
    "StepTimeoutError",
    "SteplineError",
    "StoreError",
    "StoreUnavailableError",
    "Stream",
    "StreamItem",
    "SyncEngine",
    "SyncInstance",
    "SyncWorkflowBinding",
    "SystemClock",
    "UpdateFailedError",
    "UpdateRejectedError",
    "WorkerInfo",
    "Workflow",
    "WorkflowBinding",
    "WorkflowCancelledError",
    "WorkflowEvent",
    "WorkflowFailedError",
    "WorkflowNotFoundError",
    "WorkflowStep",
    "WorkflowTimeoutError",
    "__version__",
    "parse_duration",
    "query",
    "register_type",
    "update",
    "workflow",
]
