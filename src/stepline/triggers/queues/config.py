"""What a queue trigger is: the :class:`QueueTrigger` configuration, checked when it is made.

In code ``QueueTrigger(broker="redis://127.0.0.1:6379/0", queue="orders", workflow="orders",
id_key="order_id")``; in ``stepline.toml`` one ``[[triggers.queue]]`` table each, with the same
keys (durations as numbers of seconds or text such as ``"30 seconds"``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...durations import parse_duration
from ...errors import ConfigError
from ...operations.language import TagError
from ...operations.language.tags import MAX_TAGS, check_key
from ...project import QueueTriggerEntry
from ...workflow import is_valid_name
from .broker import broker_scheme, redact_url


class _FieldError(ValueError):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem


class QueueTriggerError(ConfigError):
    """A :class:`QueueTrigger` field holds a value it cannot have; ``field`` names it."""

    def __init__(self, trigger: str, field: str, problem: str) -> None:
        super().__init__(f"queue trigger {trigger!r}: {field} {problem}")
        self.field = field
        self.problem = problem


def _whole(field: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _FieldError(field, f"must be a whole number of at least {minimum}, got {value!r}")


def _text(field: str, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise _FieldError(field, f"must be a non-empty string, got {value!r}")


@dataclass(frozen=True)
class QueueTrigger:
    """Consume ``queue`` on the broker at ``broker`` and create one instance per message.

    Without ``workflow`` every message is an envelope ``{"workflow": ..., "params": ...,
    "id"?: ...}``; with it the whole message is the params. The instance id is, first match:
    the envelope's ``id``, the params' top-level key ``id_key``, the broker's message id; with
    ``id_prefix`` in front. A redelivered message therefore creates nothing new.
    """

    broker: str
    """The broker URL: ``redis://host:6379/0``, ``amqp://user:password@host:5672/``,
    ``nats://host:4222``."""
    queue: str
    """The Redis stream, the RabbitMQ queue, the NATS subject."""
    workflow: str | None = None
    name: str = ""
    """What ``stepline consume --trigger NAME`` and ``publish`` call it (default: the queue)."""
    id_key: str | None = None
    id_prefix: str = ""
    tag_keys: tuple[str, ...] = ()
    """Top-level keys of the params copied as the instance's tags (docs/operations.md); a key
    the params lack is left out. An envelope may also carry ``tags``."""
    batch_size: int = 100
    """Messages received and created in one transaction at most."""
    concurrency: int = 1
    """Batches in flight at once (each on its own broker connection)."""
    max_queued: int | None = None
    """Stop pulling while ``workflow`` has this many queued instances or more."""
    group: str = "stepline"
    """The consumer group (Redis), the durable consumer (NATS)."""
    dead_letter: str | None = None
    """The dead-letter stream or queue (default ``<queue>.dead``)."""
    claim_idle: float = 30.0
    """Seconds an unacknowledged message waits before it is delivered again."""
    stream: str | None = None
    """NATS JetStream only: the stream holding the subject (default: derived from the queue)."""

    def __post_init__(self) -> None:
        if not self.name and isinstance(self.queue, str):
            object.__setattr__(self, "name", self.queue)
        if isinstance(self.tag_keys, list):  # as TOML gives it
            object.__setattr__(self, "tag_keys", tuple(self.tag_keys))
        try:
            self._check()
        except _FieldError as exc:
            label = self.name if isinstance(self.name, str) and self.name else "?"
            raise QueueTriggerError(label, exc.field, exc.problem) from None

    def _check(self) -> None:
        _text("broker", self.broker)
        try:
            broker_scheme(self.broker)
        except ConfigError as exc:
            raise _FieldError("broker", f"is not supported: {exc}") from None
        _text("queue", self.queue)
        _text("name", self.name)
        if self.workflow is not None and not is_valid_name(self.workflow):
            raise _FieldError(
                "workflow",
                f"must be a workflow name (1-100 ASCII letters, digits, '_' or '-'), "
                f"got {self.workflow!r}",
            )
        if self.id_key is not None:
            _text("id_key", self.id_key)
        if not isinstance(self.id_prefix, str) or (
            self.id_prefix and not is_valid_name(self.id_prefix)
        ):
            raise _FieldError(
                "id_prefix",
                f"must be empty or start an instance id (ASCII letters, digits, '_' or '-'), "
                f"got {self.id_prefix!r}",
            )
        if not isinstance(self.tag_keys, tuple) or len(self.tag_keys) > MAX_TAGS:
            raise _FieldError("tag_keys", f"must be a list of at most {MAX_TAGS} keys")
        for key in self.tag_keys:
            try:
                check_key(key, where="tag_keys")
            except TagError as exc:
                raise _FieldError("tag_keys", f"holds a bad key: {exc}") from None
        _whole("batch_size", self.batch_size, 1)
        _whole("concurrency", self.concurrency, 1)
        if self.max_queued is not None:
            _whole("max_queued", self.max_queued, 1)
            if self.workflow is None:
                raise _FieldError(
                    "max_queued", "needs 'workflow': it counts that workflow's queued instances"
                )
        _text("group", self.group)
        if self.dead_letter is not None:
            _text("dead_letter", self.dead_letter)
        if self.stream is not None:
            _text("stream", self.stream)
        if (
            isinstance(self.claim_idle, bool)
            or not isinstance(self.claim_idle, int | float)
            or not self.claim_idle > 0
        ):
            raise _FieldError(
                "claim_idle", f"must be a positive number of seconds, got {self.claim_idle!r}"
            )

    @property
    def trigger_label(self) -> str:
        """How created instances record their trigger: ``queue:<queue>``."""
        return f"queue:{self.queue}"

    def describe(self) -> str:
        """``orders on redis://127.0.0.1:6379/0`` (no credentials), for logs."""
        return f"queue {self.queue!r} on {redact_url(self.broker)}"

    def broker_options(self) -> dict[str, Any]:
        """Keyword arguments for :func:`~.broker.open_broker` beyond the URL and the queue."""
        options: dict[str, Any] = {
            "group": self.group,
            "dead_letter": self.dead_letter,
            "claim_idle": self.claim_idle,
        }
        if self.stream is not None:
            options["stream"] = self.stream
        return options

    @classmethod
    def from_table(cls, table: Mapping[str, Any], path: Path | None, key: str) -> QueueTrigger:
        """A trigger from one ``[[triggers.queue]]`` table; :class:`ConfigError` names the
        file and the key (``triggers.queue[0].batch_size``)."""
        where = f"{path}: " if path is not None else ""
        allowed = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(table) - set(allowed))
        if unknown:
            raise ConfigError(
                f"{where}unknown key '{key}.{unknown[0]}'; allowed keys there: {', '.join(allowed)}"
            )
        for required in ("broker", "queue"):
            if required not in table:
                raise ConfigError(f"{where}key '{key}.{required}' is missing")
        values = dict(table)
        if "claim_idle" in values:
            try:
                values["claim_idle"] = parse_duration(values["claim_idle"], what="claim_idle")
            except ValueError as exc:
                raise ConfigError(f"{where}key '{key}.claim_idle': {exc}") from None
        try:
            return cls(**values)
        except QueueTriggerError as exc:
            raise ConfigError(f"{where}key '{key}.{exc.field}' {exc.problem}") from None

    @classmethod
    def from_entry(cls, entry: QueueTriggerEntry, path: Path | None) -> QueueTrigger:
        return cls.from_table(entry.table, path, entry.key)
