"""The document workflow: parse, chunk, embed, index, summarise, notify.

Each stage is a durable step: its result is recorded, a failed stage is retried on its own, and
after a crash the workflow resumes from the last finished stage instead of starting over. If a
stage after ``index`` fails for good, the ``index`` step's rollback removes what it indexed.

Run it on the sample documents shipped next to this file::

    stepline run examples/documents.py:DocumentWorkflow
    stepline run examples/documents.py:DocumentWorkflow '{"user": "ada@example.com"}'

Params (all optional): ``folder`` (default: ``documents/`` next to this file), ``out`` (where
the index and notifications go; default ``documents-out`` in the current directory), ``user``
(who is notified), ``chunk_chars`` (largest chunk, default 400), ``dimensions`` (embedding size,
default 256).

Search the index afterwards::

    python examples/documents.py search documents-out/index.db "how do retries work?"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import doclib

from stepline import NonRetryableError, Workflow, WorkflowEvent, WorkflowStep

HERE = Path(__file__).resolve().parent
DEFAULT_FOLDER = HERE / "documents"
DEFAULT_OUT = "documents-out"
PARAMS = {"folder", "out", "user", "chunk_chars", "dimensions"}


def _params(payload: Any) -> dict[str, Any]:
    params = dict(payload or {})
    unknown = sorted(set(params) - PARAMS)
    if unknown:
        raise ValueError(f"unknown param {unknown[0]!r}; allowed: {', '.join(sorted(PARAMS))}")
    return params


class DocumentWorkflow(Workflow):
    """Index a folder of .txt/.md documents for search, summarise them, notify the owner."""

    name = "documents"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> dict[str, Any]:
        params = _params(event.payload)
        chunk_chars = int(params.get("chunk_chars", 400))
        dimensions = int(params.get("dimensions", 256))

        def parse() -> dict[str, Any]:
            # Paths are resolved here, inside a step, so a replay in another directory or on
            # another machine uses the recorded ones.
            folder = Path(params.get("folder") or DEFAULT_FOLDER).resolve()
            out = Path(params.get("out") or DEFAULT_OUT).resolve()
            try:
                documents = doclib.read_folder(folder)
            except (FileNotFoundError, ValueError) as exc:
                raise NonRetryableError(str(exc)) from exc
            return {"folder": str(folder), "out": str(out), "documents": documents}

        parsed = await step.do("parse", parse)
        documents = parsed["documents"]
        out = Path(parsed["out"])

        chunks = await step.do("chunk", lambda: doclib.chunk_documents(documents, chunk_chars))

        embedded = await step.do(
            "embed",
            lambda: {
                "model": doclib.EMBEDDING_MODEL,
                "dimensions": dimensions,
                "vectors": [doclib.embed(chunk["text"], dimensions) for chunk in chunks],
            },
        )

        def unindex(error: BaseException | None, output: Any) -> dict[str, int]:
            names = [doc["document"] for doc in documents]
            return {"removed_chunks": doclib.remove_documents(out / "index.db", names)}

        indexed = await step.do(
            "index",
            lambda: doclib.index_chunks(
                out / "index.db", documents, chunks, embedded["vectors"], embedded["model"]
            ),
            rollback=unindex,
        )

        summaries = await step.do(
            "summarise",
            lambda: {doc["document"]: doclib.summarise(doc["text"]) for doc in documents},
        )

        user = str(params.get("user", "you@example.com"))

        def notify() -> dict[str, Any]:
            message = {
                "to": user,
                "subject": f"{len(documents)} documents are ready to search",
                "instance": event.instance_id,
                "index": indexed["index"],
                "documents": [
                    {
                        "document": doc["document"],
                        "title": doc["title"],
                        "summary": summaries[doc["document"]],
                    }
                    for doc in documents
                ],
            }
            path = out / "notifications" / f"{event.instance_id}.json"
            return {"notification": doclib.write_notification(path, message), "to": user}

        notified = await step.do(
            "notify",
            {"retries": {"limit": 2, "delay": "250 milliseconds", "backoff": "exponential"}},
            notify,
        )

        return {
            "documents": len(documents),
            "chunks": len(chunks),
            "index": indexed["index"],
            "notification": notified["notification"],
            "titles": [doc["title"] for doc in documents],
        }


def main(argv: list[str] | None = None) -> int:
    """``python documents.py search INDEX QUERY``: query an index built by the workflow."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    search = commands.add_parser("search", help="search an index built by the workflow")
    search.add_argument("index", type=Path)
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=3)
    args = parser.parse_args(argv)
    if not args.index.exists():
        print(f"error: no index at {args.index}; run the workflow first", file=sys.stderr)
        return 2
    for hit in doclib.search(args.index, args.query, args.limit):
        print(json.dumps(hit, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
