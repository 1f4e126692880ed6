"""The document workflow as a DAG: parse -> chunk -> (embed, summarise in parallel) -> index ->
notify.

The same work as ``documents.py`` (and the same :mod:`doclib` functions), declared as a graph
instead of written as code. ``embed`` and ``summarise`` both need only the chunks and the parsed
text, so they run at the same time; ``index`` waits for both. Every node is a durable step:
recorded, retried on its own, and not run again after a crash once it finished.

If ``notify`` fails for good, the rollback of ``index`` removes the chunks it indexed, so a failed
instance leaves no half-announced documents in the search index. Make it fail on demand with
``{"fail_notify": true}``::

    stepline run examples/documents_dag.py:documents_dag
    stepline run examples/documents_dag.py:documents_dag '{"fail_notify": true}'
    stepline workflows describe documents-dag        # the graph, level by level

Params (all optional): ``folder``, ``out``, ``user``, ``chunk_chars``, ``dimensions`` (as in
``documents.py``) and ``fail_notify``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import doclib

from stepline import Dag, NonRetryableError, StepContext

HERE = Path(__file__).resolve().parent
DEFAULT_FOLDER = HERE / "documents"
DEFAULT_OUT = "documents-out"
PARAMS = {"folder", "out", "user", "chunk_chars", "dimensions", "fail_notify"}


def _result(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """The instance's output: a small summary, not the whole context (texts, vectors)."""
    return {
        "documents": len(ctx["documents"]),
        "chunks": len(ctx["chunks"]),
        "index": ctx["indexed"]["index"],
        "notification": ctx["notification"],
        "titles": [doc["title"] for doc in ctx["documents"]],
    }


documents_dag = Dag(
    "documents-dag",
    output=_result,
    doc="Index a folder of .txt/.md documents, summarise them and notify the owner (as a DAG).",
)


@documents_dag.step(retries={"limit": 2, "delay": "1 second"}, timeout="1 minute")
def parse(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """Read every document of the folder."""
    unknown = sorted(set(ctx) - PARAMS)
    if unknown:
        raise NonRetryableError(
            f"unknown param {unknown[0]!r}; allowed: {', '.join(sorted(PARAMS))}"
        )
    # Paths are resolved inside the step, so a replay elsewhere uses the recorded ones.
    folder = Path(ctx.get("folder") or DEFAULT_FOLDER).resolve()
    out = Path(ctx.get("out") or DEFAULT_OUT).resolve()
    try:
        documents = doclib.read_folder(folder)
    except (FileNotFoundError, ValueError) as exc:
        raise NonRetryableError(str(exc)) from exc
    return {"out": str(out), "documents": documents}


@documents_dag.step(depends_on=["parse"])
def chunk(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """Split the documents into chunks of whole sentences."""
    return {"chunks": doclib.chunk_documents(ctx["documents"], int(ctx.get("chunk_chars", 400)))}


@documents_dag.step(depends_on=["chunk"])
def embed(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """One vector per chunk."""
    dimensions = int(ctx.get("dimensions", 256))
    return {
        "model": doclib.EMBEDDING_MODEL,
        "vectors": [doclib.embed(chunk["text"], dimensions) for chunk in ctx["chunks"]],
    }


@documents_dag.step(depends_on=["chunk"])
def summarise(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """An extractive summary per document (runs while ``embed`` runs)."""
    return {
        "summaries": {doc["document"]: doclib.summarise(doc["text"]) for doc in ctx["documents"]}
    }


def unindex(ctx: Mapping[str, Any]) -> dict[str, int]:
    """Rollback of ``index``: remove the documents' chunks from the search index."""
    names = [doc["document"] for doc in ctx["documents"]]
    return {"removed_chunks": doclib.remove_documents(Path(ctx["out"]) / "index.db", names)}


@documents_dag.step(depends_on=["embed", "summarise"], rollback=unindex)
def index(ctx: Mapping[str, Any]) -> dict[str, Any]:
    """Write the chunks and their vectors to the search index (idempotent)."""
    indexed = doclib.index_chunks(
        Path(ctx["out"]) / "index.db", ctx["documents"], ctx["chunks"], ctx["vectors"], ctx["model"]
    )
    return {"indexed": indexed}


@documents_dag.step(
    depends_on=["index"],
    retries={"limit": 2, "delay": "250 milliseconds", "backoff": "exponential"},
)
def notify(ctx: Mapping[str, Any], info: StepContext) -> dict[str, Any]:
    """Tell the owner the documents are searchable (an "email" written as a JSON file)."""
    if ctx.get("fail_notify"):
        raise NonRetryableError("the mail server refused the notification (fail_notify)")
    user = str(ctx.get("user", "you@example.com"))
    message = {
        "to": user,
        "subject": f"{len(ctx['documents'])} documents are ready to search",
        "instance": info.instance_id,
        "index": ctx["indexed"]["index"],
        "documents": [
            {
                "document": doc["document"],
                "title": doc["title"],
                "summary": ctx["summaries"][doc["document"]],
            }
            for doc in ctx["documents"]
        ],
    }
    path = Path(ctx["out"]) / "notifications" / f"{info.instance_id}.json"
    return {"notification": doclib.write_notification(path, message)}
