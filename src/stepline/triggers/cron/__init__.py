"""Cron schedules: the :class:`Scheduler` that fires them (one per engine that runs a worker)
and the :class:`ScheduleClient` that lists, pauses, resumes, triggers and backfills them."""

from .client import Backfill, ScheduleClient, ScheduleInfo
from .moments import parse_moment
from .scheduler import Scheduler

__all__ = ["Backfill", "ScheduleClient", "ScheduleInfo", "Scheduler", "parse_moment"]
