"""How a queue message becomes an instance to create: its body read as JSON, the workflow it
names (the trigger's, or the message envelope's), its params and its instance id (the envelope's
``id``, the trigger's ``id_key``, or the broker's message id, with the trigger's prefix). A
message that can never become an instance is :class:`Poison`, with the reason the consumer
dead-letters it with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ... import _json
from ...errors import InvalidPayloadError
from ...operations.language import TagError, TagValue, check_tags
from ...workflow import is_valid_name
from .broker import Message
from .config import QueueTrigger

ENVELOPE_KEYS = ("workflow", "params", "id", "tags")
_NAME_RULE = "1-100 ASCII letters, digits, '_' or '-', not starting with '-'"


@dataclass(frozen=True)
class Item:
    """A message that stands for one instance."""

    message: Message
    workflow: str
    instance_id: str
    params: Any
    tags: dict[str, TagValue] | None = None


class Poison(Exception):
    """A message that can never become an instance; the text is the dead-letter reason."""


class Decoder:
    """Reads the messages of one :class:`QueueTrigger`."""

    def __init__(self, trigger: QueueTrigger) -> None:
        self.trigger = trigger

    def decode(self, message: Message) -> Item:
        """The instance ``message`` stands for, or :class:`Poison` with the reason it never can."""
        if message.unreadable is not None:
            raise Poison(message.unreadable)
        try:
            body = _json.loads_exact(message.body, what="the message")
        except orjson.JSONDecodeError as exc:
            raise Poison(f"not valid JSON: {exc}") from None
        except InvalidPayloadError as exc:
            raise Poison(f"params rejected: {exc}") from None
        explicit_id: Any = None
        tags: Any = None
        if self.trigger.workflow is not None:
            workflow, params = self.trigger.workflow, body
        else:
            workflow, params, explicit_id = self._envelope(body)
            tags = body.get("tags")
        instance_id = self._instance_id(message, params, explicit_id)
        return Item(message, workflow, instance_id, params, self._tags(params, tags))

    def _tags(self, params: Any, given: Any) -> dict[str, TagValue] | None:
        """The envelope's ``tags`` and the params' ``tag_keys``, checked."""
        found: dict[str, Any] = dict(given) if isinstance(given, dict) else {}
        if given is not None and not isinstance(given, dict):
            raise Poison(f"the message's 'tags' must be an object, got {_json_type(given)}")
        if self.trigger.tag_keys and isinstance(params, dict):
            found.update({k: params[k] for k in self.trigger.tag_keys if k in params})
        try:
            return check_tags(found, where="the message's tags") or None
        except TagError as exc:
            raise Poison(str(exc)) from None

    def _envelope(self, body: Any) -> tuple[str, Any, Any]:
        if not isinstance(body, dict):
            raise Poison(
                f"the message must be an object {{'workflow': ..., 'params': ...}} (this "
                f"trigger names no workflow), got {_json_type(body)}"
            )
        unknown = sorted(set(body) - set(ENVELOPE_KEYS))
        if unknown:
            raise Poison(
                f"unknown key {unknown[0]!r} in the message; expected {', '.join(ENVELOPE_KEYS)}"
            )
        workflow = body.get("workflow")
        if workflow is None:
            raise Poison("the message names no workflow (key 'workflow')")
        if not is_valid_name(workflow):
            raise Poison(f"unknown workflow {workflow!r}")
        return workflow, body.get("params"), body.get("id")

    def _instance_id(self, message: Message, params: Any, explicit: Any) -> str:
        key = self.trigger.id_key
        if explicit is not None:
            raw, source = explicit, "the message's 'id'"
        elif key is not None:
            if not isinstance(params, dict):
                raise Poison(
                    f"id_key {key!r} needs params that are an object, got {_json_type(params)}"
                )
            if key not in params:
                raise Poison(f"id_key {key!r} is missing from the params")
            raw, source = params[key], f"id_key {key!r}"
        elif message.id is not None:
            raw, source = message.id, "the broker's message id"
        else:
            raise Poison("the message has no id: publish it with a message id, or set id_key")
        if isinstance(raw, int) and not isinstance(raw, bool):
            raw = str(raw)
        if not isinstance(raw, str):
            raise Poison(f"invalid instance id from {source}: {_json_type(raw)}, not a string")
        instance_id = f"{self.trigger.id_prefix}{raw}"
        if not is_valid_name(instance_id):
            raise Poison(f"invalid instance id {instance_id!r} from {source}: use {_NAME_RULE}")
        return instance_id


def traceparent(message: Message) -> str | None:
    """The W3C trace context the message carries (``traceparent`` header), for its instance's
    trace to continue the publisher's; an invalid one is ignored where the instance is made."""
    return message.headers.get("traceparent")


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)
