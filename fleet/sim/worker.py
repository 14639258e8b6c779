"""Forecasts in a process of their own, so that they never hold the service's interpreter lock.

Theory of operation: a forecast (:func:`fleet.sim.forecast.forecast`) reads the
live jobs and replays them on a virtual clock.  Run in a thread of the service,
its replay takes turns with the API and the scheduler loop for Python's one
interpreter lock: while it runs, every request and every cycle waits longer.
A :class:`ForecastWorker` runs the whole forecast (the reading included) in
one worker process (:class:`fleet.service.workers.WorkerProcesses`) instead, started
the first time a forecast is asked for and reused after that.  The process
opens the same database by its URL, reads what the forecast needs, replays
it and sends the :class:`~fleet.sim.forecast.Forecast` back; the service only
waits for the answer.

A database the process cannot open by its URL (SQLite in memory) is
forecast in a thread, as before (the store reads the URL:
:func:`fleet.store.database.reachable_from_another_process`, named here too).
A process that died fails that forecast; the next one starts a new process.
"""

from __future__ import annotations

from fleet.service.workers import WorkerProcesses
from fleet.store.database import reachable_from_another_process

__all__ = ["ForecastWorker", "reachable_from_another_process"]


class ForecastWorker(WorkerProcesses):
    """The one process that runs a service's forecasts."""

    def __init__(self) -> None:
        super().__init__(1)
