"""Worker processes for CPU work that should not hold the serving process's interpreter lock.

Theory of operation: :class:`WorkerProcesses` is a process pool of a fixed
size, started the first time work is handed to it (``spawn``: fresh
interpreters that inherit none of the service's threads, event loop or open
connections) and reused after that.  Work and answers are pickled (values of
the compiled core too: :func:`fleet.compiled_core.picklable` runs on both
sides first).  A worker
that dies (killed, out of memory) fails the work it had with
``BrokenProcessPool``; the pool is then replaced at the next call.  Workers
ignore Ctrl-C, which reaches the whole process group: the service stops them
itself, and ``close`` stops them at once, also in the middle of a task.  A
service killed outright cannot: its workers exit within a second of it.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Final, TypeVar

from fleet import compiled_core

T = TypeVar("T")

#: Seconds between a worker's checks that the service still runs.
ORPHAN_CHECK: Final = 1.0


def _serve_the_service(service: int) -> None:
    """In a worker, first: ignore Ctrl-C, and exit once the service process is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        # A service killed outright (SIGKILL) cannot stop its workers: each
        # notices that it was handed to another parent and exits.
        while os.getppid() == service:
            time.sleep(ORPHAN_CHECK)
        os._exit(0)

    threading.Thread(target=watch, name="fleet-worker-watch", daemon=True).start()


def _picklable(work: Callable[..., T], *args: Any) -> T:
    """In a worker: ``work(*args)``, with the compiled core's values made picklable."""
    answer = work(*args)
    compiled_core.picklable()
    return answer


class WorkerProcesses:
    """``processes`` worker processes (see the module docstring)."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"a pool of worker processes needs at least one, not {processes}")
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        #: pools started so far (a new one after a worker died)
        self.started = 0

    async def call(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` in a worker process."""
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_serve_the_service,
                initargs=(os.getpid(),),
            )
            self.started += 1
        pool = self._pool
        compiled_core.picklable()
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, _picklable, work, *args)
        except BrokenProcessPool:
            if self._pool is pool:  # a worker died: a new pool next time
                self._pool = None
                _stop(pool)
            raise

    def pids(self) -> list[int]:
        """The workers' process ids (none before the first call)."""
        return [] if self._pool is None else sorted(self._pool._processes)

    def close(self) -> None:
        """Stop the workers now (work under way is abandoned)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            _stop(pool)


def _stop(pool: ProcessPoolExecutor) -> None:
    # Work can run for long (a forecast, up to its wall limit): terminate, do not wait.
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
