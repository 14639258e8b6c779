"""Kill ``fleet serve`` under load with SIGKILL, restart it: nothing lost or doubled."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleet.testing import servers
from fleet.testing.documents import pytorchjob

pytestmark = pytest.mark.slow

CLIENTS = 32


async def submit_all(port: int, names: list[str], acked: list[str]) -> None:
    """Each of CLIENTS clients submits its share; a 2xx answer is an acknowledgement."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for name in names:
        queue.put_nowait(name)

    async def client(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            name = queue.get_nowait()
            body = pytorchjob(name, gpus=1, duration="2s")
            try:
                async with session.post(
                    f"http://127.0.0.1:{port}/api/v1/submissions",
                    data=body,
                    headers={"Content-Type": "application/yaml"},
                ) as resp:
                    if resp.status in (200, 201):
                        acked.append(name)
            except (TimeoutError, aiohttp.ClientError):
                return  # the server is gone

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(CLIENTS)))


async def all_jobs(port: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    url = f"http://127.0.0.1:{port}/api/v1/jobs?limit=1000"
    async with aiohttp.ClientSession() as session:
        while True:
            async with session.get(url) as resp:
                page = await resp.json()
            items += page["items"]
            if not page.get("continue"):
                return items
            url = f"http://127.0.0.1:{port}/api/v1/jobs?limit=1000&continue={page['continue']}"


async def placements(port: int, jobs: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    out = []
    async with aiohttp.ClientSession() as session:
        for job in jobs:
            if job["state"] not in ("Admitted", "Dispatched", "Running"):
                continue
            url = f"http://127.0.0.1:{port}/api/v1/jobs/{job['namespace']}/{job['name']}"
            async with session.get(url) as resp:
                detail = await resp.json()
            for p in detail["placement"]:
                out += [(job["cluster"], p["node"], g) for g in p["gpus"]]
    return out


@pytest.fixture
async def killed_and_restarted(
    database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[int, list[str]]]:
    port = servers.free_port()
    log = tmp_path / "serve.log"
    proc = await asyncio.to_thread(servers.start, database_url, port, log)
    names = [f"job-{n}" for n in range(400)]
    acked: list[str] = []
    submitter = asyncio.create_task(submit_all(port, names, acked))
    # Killed after a random number of acknowledgements (not a random time: a
    # busy machine may answer none in the first second), while clients submit.
    target = random.Random(os.getpid()).randint(5, 200)
    while len(acked) < target and not submitter.done():
        await asyncio.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    await asyncio.to_thread(proc.wait)
    await submitter
    proc = await asyncio.to_thread(servers.start, database_url, port, log)
    try:
        yield port, acked
    finally:
        await asyncio.to_thread(servers.stop, proc)


async def test_a_crash_loses_no_acknowledged_job_and_doubles_none(
    killed_and_restarted: tuple[int, list[str]],
) -> None:
    port, acked = killed_and_restarted
    assert acked, "the server was killed before it acknowledged anything"
    jobs = await all_jobs(port)
    counts = Counter(j["name"] for j in jobs)
    assert all(n == 1 for n in counts.values()), "a job is stored twice"
    assert set(acked) <= set(counts), f"lost acknowledged jobs: {sorted(set(acked) - set(counts))}"
    gpus = await placements(port, jobs)
    assert len(gpus) == len(set(gpus)), "a GPU is held by two running jobs"
    # Scheduling carries on: every job ends (2 s each, 48 GPUs).
    for _ in range(600):
        jobs = await all_jobs(port)
        if all(j["state"] == "Succeeded" for j in jobs):
            break
        await asyncio.sleep(0.2)
    assert Counter(j["state"] for j in jobs) == {"Succeeded": len(jobs)}
