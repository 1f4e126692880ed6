"""The workflows the examples of docs/testing.md test: a checkout with retries, an approval, a
cooling-off sleep and a rollback, and an order that pays through a child workflow."""

from __future__ import annotations

from typing import Any

from stepline import StepTimeoutError, WorkflowEvent, WorkflowStep, workflow

CHARGE = {
    "retries": {"limit": 3, "delay": "1 hour", "backoff": "exponential"},
    "timeout": "1 minute",
}


def reserve(order: dict[str, Any]) -> str:
    return f"res-{order['id']}"


def release(error: BaseException | None, reservation: str) -> str:
    return f"released {reservation}"


def charge_card(order: dict[str, Any]) -> dict[str, Any]:
    return {"charge": f"ch-{order['id']}", "amount": order["amount"]}


def ship(order: dict[str, Any]) -> str:
    return f"shipped {order['id']}"


@workflow(name="checkout")
async def checkout(event: WorkflowEvent, step: WorkflowStep) -> Any:
    order = event.payload
    await step.do("reserve", lambda: reserve(order), rollback=release)
    charge = await step.do("charge", CHARGE, lambda: charge_card(order))
    try:
        approval = await step.wait_for_event("approval", type="approval", timeout="7 days")
    except StepTimeoutError:
        return {"status": "expired", "charge": charge["charge"]}
    await step.sleep("cooling-off", "3 days")
    shipped = await step.do("ship", lambda: ship(order))
    return {"status": shipped, "approved_by": approval.payload["by"]}


@workflow(name="payment")
async def payment(event: WorkflowEvent, step: WorkflowStep) -> Any:
    return await step.do("call the bank", lambda: {"paid": event.payload["amount"]})


@workflow(name="order")
async def order(event: WorkflowEvent, step: WorkflowStep) -> Any:
    child = await step.start_workflow("payment", {"amount": event.payload["amount"]})
    receipt = await step.wait_for_workflow("payment", child, timeout="1 day")
    return {"receipt": receipt}
