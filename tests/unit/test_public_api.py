"""The public names of the package are deliberate: this test pins them."""

import stepline

EXPECTED = {
    "BlobStoreError",
    "ConfigError",
    "DEFAULT_NON_RETRYABLE",
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
    "WorkflowEvent",
    "WorkflowCancelledError",
    "WorkflowFailedError",
    "WorkflowNotFoundError",
    "WorkflowTimeoutError",
    "WorkflowStep",
    "__version__",
    "parse_duration",
    "query",
    "register_type",
    "update",
    "workflow",
}


def test_public_names_are_pinned() -> None:
    assert set(stepline.__all__) == EXPECTED


def test_every_public_name_is_importable() -> None:
    for name in stepline.__all__:
        assert getattr(stepline, name) is not None


def test_errors_share_one_root() -> None:
    for name in stepline.__all__:
        obj = getattr(stepline, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, stepline.SteplineError), name
