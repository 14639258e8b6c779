"""Worker processes: they do not outlive a service that was killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SERVICE = """
import asyncio, os, sys
from fleet.service.workers import WorkerProcesses

async def main() -> None:
    workers = WorkerProcesses(1)
    pid = await workers.call(os.getpid)
    print(pid, flush=True)
    await asyncio.sleep(600)  # killed here

asyncio.run(main())
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone too: it only waits for its (new) parent to reap it
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_a_worker_exits_when_its_service_is_killed_outright() -> None:
    service = subprocess.Popen(
        [sys.executable, "-c", SERVICE], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert service.stdout is not None
        worker = int(service.stdout.readline())
        assert worker != service.pid and alive(worker)
        service.send_signal(signal.SIGKILL)
        service.wait()
        deadline = time.monotonic() + 20
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(worker)
    finally:
        service.kill()
        service.wait()
        if service.stdout is not None:
            service.stdout.close()
