"""The classes a stored value names: user codecs (:func:`register_type`), and finding the class
of a model, dataclass or enum by its path on read-back.

Stored data is never trusted to choose what code runs: a path is resolved only to a class this
process already has, one it encoded or one in a module already imported (``sys.modules``); no
module is ever imported because a stored value names it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TAG = "$t"
"""The key of a tagged value (see docs/data.md)."""


@dataclass(frozen=True, slots=True)
class Codec:
    """A user's codec for one class: ``encode(value)`` returns JSON-able data (which may hold
    other typed values), ``decode(data)`` the value again."""

    cls: type
    name: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


_BY_CLASS: dict[type, Codec] = {}
_BY_NAME: dict[str, Codec] = {}
_SEEN: dict[str, type] = {}
"""Classes this process encoded, by path: a class defined inside a function is found here."""


def class_path(cls: type) -> str:
    """``module:QualName``, what a tag records to find the class again."""
    return f"{cls.__module__}:{cls.__qualname__}"


def class_name(cls: type) -> str:
    """``module.QualName`` as messages name a class (builtins by their bare name)."""
    name = cls.__qualname__
    return name if cls.__module__ == "builtins" else f"{cls.__module__}.{name}"


def register_type(
    cls: type,
    encode: Callable[[Any], Any],
    decode: Callable[[Any], Any],
    *,
    name: str | None = None,
) -> None:
    """Store values of ``cls`` as ``encode(value)`` and read them back as ``decode(data)``.

    ``encode`` returns JSON-able data (dicts, lists, str, int, float, bool, None, or other typed
    values); ``decode(encode(value))`` must equal ``value`` or the value is refused where it is
    stored. ``name`` (default ``module:QualName``) is what the stored tag records: keep it when
    the class moves. Registering a class again replaces its codec.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_type takes a class first, got {cls!r}")
    if not callable(encode) or not callable(decode):
        raise TypeError(f"register_type({cls.__qualname__}, encode, decode): both must be callable")
    tag = class_path(cls) if name is None else name
    if not isinstance(tag, str) or not tag:
        raise TypeError(f"register_type(name=...) takes a non-empty string, got {name!r}")
    taken = _BY_NAME.get(tag)
    if taken is not None and taken.cls is not cls:
        raise ValueError(
            f"the name {tag!r} is already registered for {class_path(taken.cls)}; "
            "pass another name=..."
        )
    old = _BY_CLASS.get(cls)
    if old is not None:
        _BY_NAME.pop(old.name, None)
    codec = Codec(cls, tag, encode, decode)
    _BY_CLASS[cls] = codec
    _BY_NAME[tag] = codec


def unregister_type(cls: type) -> None:
    """Forget the codec of ``cls`` (for tests)."""
    codec = _BY_CLASS.pop(cls, None)
    if codec is not None:
        _BY_NAME.pop(codec.name, None)


def codec_for(cls: type) -> Codec | None:
    return _BY_CLASS.get(cls)


def codec_named(name: str) -> Codec | None:
    return _BY_NAME.get(name)


def seen(cls: type, path: str | None = None) -> str:
    """Note that this process encodes values of ``cls`` (at ``path``, its :func:`class_path`
    when the caller has it already); return its path."""
    if path is None:
        path = class_path(cls)
    if _SEEN.get(path) is not cls:
        _SEEN[path] = cls
    return path


def resolve(path: object) -> type | None:
    """The class at ``path`` if this process has it (imported or encoded), else None."""
    if not isinstance(path, str):
        return None
    module_name, _, qualname = path.partition(":")
    found: Any = sys.modules.get(module_name)
    if found is not None and "<locals>" not in qualname:
        for part in qualname.split("."):
            found = getattr(found, part, None)
            if found is None:
                break
        if isinstance(found, type):
            return found
    return _SEEN.get(path)
