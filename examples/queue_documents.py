"""The document pipeline fed from a Redis stream: uploads publish indexing requests to a queue,
a queue trigger turns each request into one ``documents`` instance.

Two workflows and one queue, all in this process (in production the consumer is
``stepline consume`` or ``stepline worker`` with a ``[[triggers.queue]]`` table, and the
services that publish may be other processes)::

    uploads (one per user)  --publish-->  Redis stream  --consumer-->  documents (one per upload)

The ``uploads`` step that publishes may run twice (it fails once on purpose, after publishing);
its message id is the same both times, so the consumer creates one ``documents`` instance. Run
it with Redis on 127.0.0.1:6379::

    python examples/queue_documents.py
    python examples/queue_documents.py --redis redis://127.0.0.1:6379/0 --out /tmp/docs-out

The notifications land in ``<out>/notifications/index-<user>-<run>.json``; search the index with
``python examples/documents.py search <out>/index.db "how do retries work?"``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from documents import DocumentWorkflow

from stepline import Engine, StepContext, Workflow, WorkflowEvent, WorkflowStep
from stepline.triggers import QueueTrigger, publish
from stepline.triggers.queues import Consumer

USERS = ["ada", "grace", "linus"]


class UploadWorkflow(Workflow):
    """A user's upload: ask for it to be indexed by publishing a request to the queue."""

    name = "uploads"

    async def run(self, event: WorkflowEvent, step: WorkflowStep) -> dict[str, Any]:
        params = event.payload

        async def request_indexing(ctx: StepContext) -> str:
            request = {
                "workflow": "documents",
                "id": f"index-{ctx.instance_id}",
                "params": {"user": params["user"], "out": params["out"]},
            }
            message_id = await publish(ctx, params["redis"], params["stream"], request)
            if ctx.attempt == 1:
                # A failure after publishing: the retry publishes the same message id again.
                raise ConnectionError("lost the answer of the upload service (on purpose)")
            return message_id

        message_id = await step.do(
            "request indexing", {"retries": {"limit": 2, "delay": 0}}, request_indexing
        )
        return {"message_id": message_id, "documents_instance": f"index-{event.instance_id}"}


async def main_async(redis_url: str, stream: str, database: str, out: Path) -> int:
    trigger = QueueTrigger(broker=redis_url, queue=stream, batch_size=50)  # envelopes
    async with Engine(database, [UploadWorkflow, DocumentWorkflow]) as engine:
        consumer = Consumer(engine, trigger, receive_timeout=0.2)
        consuming = asyncio.create_task(consumer.run())
        run = uuid.uuid4().hex[:6]  # instance ids of this run: ada-<run>, index-ada-<run>
        try:
            uploads = engine.workflow("uploads")
            for user in USERS:
                params = {
                    "user": f"{user}@example.com",
                    "out": str(out),
                    "redis": redis_url,
                    "stream": stream,
                }
                await uploads.create(f"{user}-{run}", params)
            for user in USERS:
                upload = await (await uploads.get(f"{user}-{run}")).wait(timeout=60)
                print(f"upload {user}-{run}: {upload.status}, published {upload.output}")
                handle = await wait_created(engine, f"index-{user}-{run}")
                status = await handle.wait(timeout=60)
                print(f"documents index-{user}-{run}: {status.status}, {json.dumps(status.output)}")
                if status.status != "complete":
                    return 1
        finally:
            consumer.stop()
            await consuming
        page = await engine.list_instances("documents", limit=100)
        mine = sorted(r.id for r in page.instances if r.trigger == f"queue:{stream}")
        print(f"documents instances created from the queue: {mine}")
        print(f"messages handled: {consumer.handled} (retried publishes included)")
    return 0


async def wait_created(engine: Engine, instance_id: str) -> Any:
    """The documents instance, once the consumer created it."""
    for _ in range(600):
        page = await engine.list_instances("documents", limit=100)
        if any(r.id == instance_id for r in page.instances):
            return await engine.get_instance("documents", instance_id)
        await asyncio.sleep(0.1)
    raise TimeoutError(f"the consumer did not create {instance_id}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="Redis URL")
    parser.add_argument(
        "--stream", default=f"documents-requests-{uuid.uuid4().hex[:8]}", help="stream name"
    )
    parser.add_argument("--database", default="sqlite:///queue-documents.db")
    parser.add_argument("--out", type=Path, default=Path("documents-out"))
    args = parser.parse_args(argv)
    return asyncio.run(main_async(args.redis, args.stream, args.database, args.out.resolve()))


if __name__ == "__main__":
    sys.exit(main())
