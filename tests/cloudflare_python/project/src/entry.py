"""Cloudflare Python Workflows written against Cloudflare's SDK (``from workers import ...``),
one per documented pattern: the getting-started workflow, a DAG whose steps name their
dependencies as parameters (with ``concurrent=True``), ``ctx``, ``sleep`` and
``wait_for_event``, a retry config and ``NonRetryableError``. Nothing here imports stepline: the
project runs as it would on Cloudflare.

``LedgerWorkflow`` appends a line to a file each time one of its steps runs, and its second step
waits for a file to appear, so a test can kill the worker in the middle and count what ran.
"""

import os
import time

from workers import Response, WorkerEntrypoint, WorkflowEntrypoint
from workers.workflows import NonRetryableError


class StarterWorkflow(WorkflowEntrypoint):
    async def run(self, event, step):
        @step.do("load the order")
        async def load_order():
            return {"order": event["payload"]["order"], "quantity": 3}

        order = await load_order()
        await step.sleep("cool down", "10 seconds")

        @step.do("ship the order")
        async def ship_order():
            return f"shipped {order['order']} with {order.quantity} items"

        return {"result": await ship_order(), "greeting": self.env.GREETING}


class DiamondWorkflow(WorkflowEntrypoint):
    async def run(self, event, step):
        @step.do()
        async def fetch_source():
            return event.payload["source"]

        @step.do()
        async def count_words(fetch_source):
            return len(fetch_source.split())

        @step.do()
        async def count_letters(fetch_source):
            return sum(ch.isalpha() for ch in fetch_source)

        @step.do(concurrent=True)
        async def summary(count_words, count_letters, ctx):
            return {"words": count_words, "letters": count_letters, "step": ctx["step"]["name"]}

        return await summary()


class ApprovalWorkflow(WorkflowEntrypoint):
    async def run(self, event, step):
        await step.sleep("short pause", 1500)  # a bare number: milliseconds, as in the SDK
        decision = await step.wait_for_event("await decision", "decision", timeout="1 hour")

        @step.do("record decision")
        async def record():
            return {"approved": decision["payload"]["approved"], "type": decision.type}

        return await record()


class FlakyWorkflow(WorkflowEntrypoint):
    async def run(self, event, step):
        @step.do(
            "call a flaky service",
            config={
                "retries": {"limit": 3, "delay": "5 seconds", "backoff": "linear"},
                "timeout": "1 minute",
            },
        )
        async def call_service(ctx):
            if ctx.attempt < 3:
                raise ConnectionError(f"service unavailable on attempt {ctx.attempt}")
            return {"attempt": ctx["attempt"], "limit": ctx["config"]["retries"]["limit"]}

        return await call_service()


class FatalWorkflow(WorkflowEntrypoint):
    async def run(self, event, step):
        @step.do("validate input", config={"retries": {"limit": 5, "delay": 1000}})
        async def validate(ctx):
            raise NonRetryableError(f"invalid input on attempt {ctx['attempt']}")

        try:
            await validate()
        except NonRetryableError as exc:
            return {"caught": type(exc).__name__, "message": str(exc)}


def _note(folder, line):
    with open(os.path.join(folder, "ledger.txt"), "a") as ledger:
        ledger.write(line + "\n")


class LedgerWorkflow(WorkflowEntrypoint):
    async def run(self, event, step):
        folder = event["payload"]["folder"]

        @step.do()
        def first():
            _note(folder, "first")
            return 1

        @step.do()
        def second(first):
            _note(folder, "second started")
            while not os.path.exists(os.path.join(folder, "go")):
                time.sleep(0.05)
            _note(folder, "second")
            return first + 1

        @step.do()
        def third(first, second):
            _note(folder, "third")
            return first + second

        return await third()


class SpawnerWorkflow(WorkflowEntrypoint):
    async def run(self, event, step):
        @step.do("start the children")
        async def start():
            one = await self.env.STARTER.create(id=event.payload["child"], params={"order": "c1"})
            batch = await self.env.DIAMOND.create_batch([{"params": {"source": "a b"}}])
            return [one.id, len(batch)]

        started = await start()

        @step.do("check the child")
        async def check():
            child = await self.env.STARTER.get(started[0])
            return (await child.status()).status

        return {"started": started, "child status": await check()}


class Default(WorkerEntrypoint):
    async def fetch(self, request):
        instance = await self.env.STARTER.create(params={"order": "from-fetch"})
        return Response(f"created {instance.id}")
