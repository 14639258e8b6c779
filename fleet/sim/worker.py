"""Forecasts in a process of their own, so that they never hold the service's interpreter lock.

Theory of operation: a forecast (:func:`fleet.sim.forecast.forecast`) reads the
live jobs and replays them on a virtual clock.  Run in a thread of the service,
its replay takes turns with the API and the scheduler loop for Python's one
interpreter lock: while it runs, every request and every cycle waits longer.
A :class:`ForecastWorker` runs the whole forecast (the reading included) in
one separate process instead, started the first time a forecast is asked
for (``spawn``: a fresh interpreter, nothing inherited from the service's
threads or event loop), and reused after that.  The process opens the same
database by its URL, reads what the forecast needs, replays it and sends the
:class:`~fleet.sim.forecast.Forecast` back; the service only waits for the
answer.

A database the process cannot open by its URL (SQLite in memory) is
forecast in a thread, as before.  A process that died (killed, out of
memory) fails that forecast; the next one starts a new process.  ``close``
stops the process at once, also in the middle of a replay.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from sqlalchemy.engine import make_url

T = TypeVar("T")


def reachable_from_another_process(url: str) -> bool:
    """Whether another process opening ``url`` sees the same database (not SQLite in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return True
    database = parsed.database or ""
    return database not in ("", ":memory:") and "mode=memory" not in str(parsed.query)


class ForecastWorker:
    """One process that runs forecasts for the service (see the module docstring)."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        #: processes started so far (a new one after a crash)
        self.started = 0

    async def call(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` in the worker process (``work`` and ``args`` are pickled)."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_leave_interrupts_to_the_service,
            )
            self.started += 1
        pool = self._pool
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, work, *args)
        except BrokenProcessPool:
            if self._pool is pool:  # the process died: a new one next time
                self._pool = None
                _stop(pool)
            raise

    def pids(self) -> list[int]:
        """The worker's process ids (none before the first forecast)."""
        return [] if self._pool is None else sorted(self._pool._processes)

    def close(self) -> None:
        """Stop the worker process now (a forecast under way is abandoned)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            _stop(pool)


def _leave_interrupts_to_the_service() -> None:
    # Ctrl-C reaches the whole process group: the service stops its worker itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop(pool: ProcessPoolExecutor) -> None:
    # A replay can run for up to its wall limit: terminate rather than wait for it.
    processes = list(pool._processes.values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()
