"""A create's options, checked before anything is stored: the flow control key and priority,
a deadline (``timeout``), and what a create does with the instances its key holds
(``on_conflict``: ``"debounce"``, ``"replace_queued"``, executed by
``ClosingStore.create_keyed``; docs/operations.md tells the user); the instances a
``create_batch`` makes of its items (each with the options of a create, checked the same way),
their params as stored and an instance's own retention."""

from __future__ import annotations

import re
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal

from . import _json
from ._shown import shown
from ._traceparent import valid_traceparent
from .durations import Duration, parse_duration
from .operations.search import tags_json
from .payloads import PayloadCodec, Slot, escaped
from .retention import parse_retention
from .store.base import BatchItem, KeyedConflict, NewInstance
from .values import convert
from .workflow import validate_name

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
MAX_KEY_LENGTH = 200
"""The longest ``key`` or ``dedup_key`` (characters)."""
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
"""The priorities a store keeps (a 32-bit signed integer); lower is claimed first."""


def is_text(value: object) -> bool:
    """A str without control characters that encodes to UTF-8 (no lone surrogate)."""
    if not isinstance(value, str) or _CONTROL_CHARS.search(value):
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_key(value: object, *, what: str) -> str | None:
    """A flow control key or dedup key: None, or text of 1 to 200 characters (UTF-8, no control
    characters, which no store keeps alike); else ``ValueError`` naming ``what``."""
    if value is None:
        return None
    if not is_text(value) or not 1 <= len(str(value)) <= MAX_KEY_LENGTH:
        raise ValueError(
            f"invalid {what} {shown(value)}: a string of 1 to {MAX_KEY_LENGTH} characters without "
            "control characters (or None)"
        )
    return str(value)


def check_priority(value: object, *, what: str = "priority") -> int:
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(
            f"invalid {what} {shown(value)}: a whole number from {low} to {high} (lower runs first)"
        )
    return value


OnConflict = Literal["debounce", "replace_queued"]
ON_CONFLICT: tuple[OnConflict, ...] = ("debounce", "replace_queued")


def deadline(timeout: Duration | None, default: float | None, now: float) -> float | None:
    """The deadline of an instance created at ``now``: ``timeout`` (a duration), else the
    workflow's ``default`` (seconds), else none; a bad ``timeout`` raises ``ValueError``."""
    seconds = default if timeout is None else parse_duration(timeout, what="timeout")
    return None if seconds is None else now + seconds


def keyed_conflict(
    on_conflict: object, key: str | None, debounce: Duration | None
) -> tuple[KeyedConflict | None, float | None]:
    """``on_conflict`` checked with the ``key`` and ``debounce`` it needs: the conflict and the
    quiet period in seconds; ``ValueError`` naming the value refused."""
    if on_conflict is None:
        if debounce is not None:
            raise ValueError(
                f"debounce={debounce!r} is given without on_conflict='debounce': pass both"
            )
        return None, None
    if on_conflict not in ON_CONFLICT:
        raise ValueError(
            f"invalid on_conflict {on_conflict!r}: use one of {', '.join(ON_CONFLICT)}"
        )
    if key is None:
        raise ValueError(f"on_conflict={on_conflict!r} needs a key: pass key=...")
    if on_conflict == "replace_queued":
        if debounce is not None:
            raise ValueError(
                f"debounce={debounce!r} applies to on_conflict='debounce', not 'replace_queued'"
            )
        return "replace_queued", None
    if debounce is None:
        raise ValueError("on_conflict='debounce' needs a quiet period: pass debounce='5 seconds'")
    return "debounce", parse_duration(debounce, what="debounce")


def check_create(
    on_duplicate: object,
    key: str | None,
    on_conflict: object,
    debounce: Duration | None,
    timeout: Duration | None,
) -> tuple[str | None, KeyedConflict | None, float | None]:
    """The options of one create checked before anything is read: the key, and the conflict
    and quiet period of :func:`keyed_conflict`; ``ValueError`` naming the value refused."""
    if on_duplicate not in ("return", "raise"):
        raise ValueError(f"invalid on_duplicate {on_duplicate!r}: use 'return' or 'raise'")
    checked_key = check_key(key, what="key")
    conflict, quiet = keyed_conflict(on_conflict, checked_key, debounce)
    deadline(timeout, None, 0.0)
    return checked_key, conflict, quiet


def new_id(id: Any) -> str:
    """The id of an instance to create: ``id`` checked, or a random UUID when it is None."""
    return str(uuid.uuid4()) if id is None else validate_name(id, what="instance id")


async def sealed_params(
    codec: PayloadCodec, workflow: str, instance_id: str, params: Any, params_type: Any, what: str
) -> str:
    """Params as stored, checked against the type ``run()`` declares for them
    (``WorkflowEvent[Order]``) when this process has the workflow: stored as given."""
    if params_type is not None and params is not None:
        convert(params, params_type, what)
    text = _json.dumps(params, what=what, limit=codec.encode_limit)
    if codec.plain:  # nothing seals: no slot, no coroutine
        return escaped(text)
    return await codec.seal(text, Slot(workflow, instance_id, "params"))


def retention_json(
    retention: Mapping[str, Duration] | None, *, where: str = "retention of the instance"
) -> str | None:
    """An instance's own retention as stored: JSON seconds by outcome; ValueError naming
    ``where`` if bad."""
    policy = parse_retention(retention, where=where)
    return None if policy is None else _json.dumps(policy, what="retention")


SealParams = Callable[[str, Any, str], Awaitable[str]]
"""Params as stored, given the instance id, the params and what to call them in errors."""
VersionOf = Callable[[str | None], Awaitable[str]]
"""The version a create uses, given the one asked for (None: the newest)."""
_BATCH_ITEM_KEYS = (
    "id", "params", "key", "priority", "traceparent", "tags", "version", "retention",
    "timeout", "on_conflict", "debounce",
)  # fmt: skip


def _item_options(
    item: Mapping[str, Any], index: int, default_timeout: float | None, now: float
) -> tuple[str | None, KeyedConflict | None, float | None, float | None]:
    """An item's key, conflict, ready time and deadline, checked as ``create`` checks them."""
    what = f"batch item {index}"
    key = check_key(item.get("key"), what=f"key of {what}")
    try:
        conflict, quiet = keyed_conflict(item.get("on_conflict"), key, item.get("debounce"))
    except ValueError as exc:
        raise ValueError(f"create_batch item {index}: {exc}") from exc
    timeout = item.get("timeout")
    seconds = (
        default_timeout if timeout is None else parse_duration(timeout, what=f"timeout of {what}")
    )
    ready_at = None if quiet is None else now + quiet
    return key, conflict, ready_at, None if seconds is None else now + seconds


async def batch_instances(
    items: Iterable[Mapping[str, Any]],
    seal: SealParams,
    version_of: VersionOf,
    default_timeout: float | None,
    now: float,
) -> list[BatchItem]:
    """The instances a ``create_batch`` makes of ``items``, each checked in turn as ``create``
    checks its arguments: ``TypeError`` or ``ValueError`` naming the first item refused (and
    its field), before anything is stored."""
    new: list[BatchItem] = []
    versions: dict[str | None, str] = {}
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise TypeError(
                f"create_batch item {index} must be a dict like {{'id': ..., 'params': ...}}, "
                f"got {type(item).__name__}"
            )
        unknown = set(item) - set(_BATCH_ITEM_KEYS)
        if unknown:
            raise ValueError(
                f"create_batch item {index}: unknown key {sorted(unknown)[0]!r} (items take "
                f"{', '.join(_BATCH_ITEM_KEYS[:-1])} and {_BATCH_ITEM_KEYS[-1]})"
            )
        key, conflict, ready_at, deadline_at = _item_options(item, index, default_timeout, now)
        asked = item.get("version")
        if asked is not None and not isinstance(asked, str):
            raise ValueError(
                f"create_batch item {index}: version must be a string or None, got {shown(asked)}"
            )
        if asked not in versions:
            try:
                versions[asked] = await version_of(asked)
            except ValueError as exc:
                raise ValueError(f"create_batch item {index}: {exc}") from exc
        instance_id = new_id(item.get("id"))
        instance = NewInstance(
            instance_id,
            await seal(instance_id, item.get("params"), f"params of batch item {index}"),
            key=key,
            priority=check_priority(
                item.get("priority", 0), what=f"priority of batch item {index}"
            ),
            traceparent=valid_traceparent(item.get("traceparent")),
            tags=tags_json(item.get("tags"), where=f"tags of batch item {index}"),
            version=versions[asked],
            retention=retention_json(
                item.get("retention"), where=f"retention of batch item {index}"
            ),
            deadline_at=deadline_at,
        )
        new.append(BatchItem(instance, conflict, ready_at))
    return new
