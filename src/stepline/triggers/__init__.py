"""Triggers: what creates instances besides a direct call. Cron schedules and queue consumers.

This package sits on the client layer: it creates instances through
:class:`~stepline.client.WorkflowBinding` and keeps its own state through named store
operations; it never reaches into the runtime or the worker. Broker clients are optional extras
(``pip install 'stepline[redis]'``, ``[rabbitmq]``, ``[nats]``), imported only when a trigger
uses them.
"""

from .cron import Backfill, ScheduleClient, ScheduleInfo, Scheduler
from .publish import publish
from .queues import QueueTrigger

__all__ = ["Backfill", "QueueTrigger", "ScheduleClient", "ScheduleInfo", "Scheduler", "publish"]
