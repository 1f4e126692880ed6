"""Seeing a deploy: per version of a workflow, its unfinished and finished instances by status,
the live workers that serve it, and whether it is drained (nothing unfinished), as
``stepline workflows versions NAME``, the API and the dashboard show it (docs/versioning.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .records import DEFAULT_VERSION, FINISHED_STATUSES, WorkerInfo
from .workflow import version_order


@dataclass(frozen=True)
class VersionState:
    """One version of a workflow during a deploy."""

    version: str
    unfinished: dict[str, int]
    """Its unfinished instances by status."""
    finished: dict[str, int]
    """Its finished instances by status."""
    workers: tuple[str, ...]
    """The ids of the live workers that serve it."""

    @property
    def drained(self) -> bool:
        """No instance of this version is unfinished (its workers may stop)."""
        return not self.unfinished

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "unfinished": self.unfinished,
            "finished": self.finished,
            "workers": list(self.workers),
            "drained": self.drained,
        }


def version_states(
    workflow: str,
    counts: Mapping[str, Mapping[str, int]],
    workers: Sequence[WorkerInfo],
    now: float,
    known: Iterable[str] = (),
) -> list[VersionState]:
    """Every version of ``workflow`` that has instances (``counts``: by version, then status),
    that a live worker serves, or that is ``known`` (registered here), oldest first."""
    live = [worker for worker in workers if worker.live(now)]
    served = {
        version: tuple(w.id for w in live if w.serves(workflow, version))
        for w in live
        if workflow in w.workflows
        for version in w.versions.get(workflow, (DEFAULT_VERSION,))
    }
    versions = sorted({*counts, *served, *known}, key=version_order)
    states = []
    for version in versions:
        found = counts.get(version, {})
        states.append(
            VersionState(
                version,
                {s: n for s, n in found.items() if s not in FINISHED_STATUSES and n},
                {s: n for s, n in found.items() if s in FINISHED_STATUSES and n},
                served.get(version, ()),
            )
        )
    return states
