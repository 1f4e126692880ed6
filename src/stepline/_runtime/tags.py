"""``step.tag(key, value)``: a tag added to the running instance, to find it by with a filter
(docs/operations.md). Written at once, fenced on the lease, and merged into the instance's
tags: a replay that calls it again writes the same value again, which changes nothing. A
query's replay writes nothing."""

from __future__ import annotations

from typing import Any

from .._json import dumps
from ..errors import LeaseLostError, StoreError
from ..operations.language import check_tags
from .signals import ActivationAborted
from .state import ActivationState


async def tag(state: ActivationState, key: str, value: Any, *, write: bool) -> None:
    """Check ``key: value`` (``TagError``) and merge it into the instance's tags."""
    checked = check_tags({key: value}, where="step.tag")
    if not write:
        return
    quiet = state.quiet
    quiet.begin()
    try:
        await state.store.operations.add_tags(state.lease, dumps(checked, what="step.tag"))
    except LeaseLostError as exc:
        raise ActivationAborted(str(exc)) from exc
    except StoreError as exc:
        raise ActivationAborted(f"could not tag the instance: {exc}") from exc
    finally:
        quiet.end()
