"""Three ``fleet serve`` replicas on one PostgreSQL: kill the leader, pause one, lose nothing.

Real processes, real PostgreSQL, short leases (2 s, renewed every 0.5 s).
32 clients submit through all three replicas; the leader is killed with
SIGKILL while they do; another replica must lead within 10 s, every
acknowledged job must exist once and run once (one admission and one
dispatch in its event log).  Then the new leader, with jobs of its own under
way, is paused with SIGSTOP past its lease, a third replica takes over, an
administrator's change is waiting at the paused one when it is resumed: the
database must not hold what it would have written, it must step down, and
its jobs must each have run once.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import text

from fleet.testing import servers
from fleet.testing.documents import pytorchjob
from tests.databases import fresh_postgres_database, open_engine

pytestmark = [pytest.mark.slow, pytest.mark.postgresql]

CLIENTS = 32
JOBS = 240
LEASE = ["--leader-lease", "2", "--leader-renew", "0.5"]


class Replica:
    def __init__(self, database_url: str, log: Path) -> None:
        self.port = servers.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = servers.start(
            database_url, self.port, log, extra=LEASE, env=servers.REPLICA_ENV
        )


@pytest.fixture
async def database(postgres_url: str) -> AsyncIterator[str]:
    async with fresh_postgres_database(postgres_url) as url:
        yield url


@pytest.fixture
async def replicas(database: str, tmp_path: Path) -> AsyncIterator[list[Replica]]:
    started: list[Replica] = []
    try:
        for n in range(3):  # one after the other: the first one stores the configuration
            started.append(await asyncio.to_thread(Replica, database, tmp_path / f"r{n}.log"))
        yield started
    finally:
        for r in started:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGCONT)
                await asyncio.to_thread(servers.stop, r.proc)


async def health(session: aiohttp.ClientSession, replica: Replica) -> dict[str, Any] | None:
    try:
        async with session.get(f"{replica.url}/healthz", timeout=aiohttp.ClientTimeout(2)) as r:
            found: dict[str, Any] = await r.json()
            return found
    except (aiohttp.ClientError, TimeoutError):
        return None


async def leader_among(
    session: aiohttp.ClientSession, replicas: list[Replica], within: float
) -> tuple[Replica, float]:
    """The replica that leads (and how long it took to say so), waiting up to ``within`` s."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        for r in replicas:
            found = await health(session, r)
            if found is not None and found.get("role") == "leader":
                return r, time.monotonic() - started
        await asyncio.sleep(0.05)
    raise AssertionError(f"no replica led within {within} s")


async def submit_all(replicas: list[Replica], names: list[str], acked: set[str]) -> None:
    """CLIENTS clients, round robin over the replicas; a refused connection tries the next."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    for name in names:
        queue.put_nowait(name)
    turn = itertools.count()

    async def client(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            name = queue.get_nowait()
            body = pytorchjob(name, gpus=1, duration="1s" if name.startswith("job") else "3s")
            for _attempt in range(20):
                replica = replicas[next(turn) % len(replicas)]
                try:
                    async with session.post(
                        f"{replica.url}/api/v1/submissions",
                        data=body,
                        headers={"Content-Type": "application/yaml"},
                        timeout=aiohttp.ClientTimeout(10),
                    ) as resp:
                        if resp.status in (200, 201):
                            acked.add(name)
                            break
                except (TimeoutError, aiohttp.ClientError):
                    await asyncio.sleep(0.05)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(client(session) for _ in range(CLIENTS)))


async def rows(database: str, query: str) -> list[Any]:
    async with open_engine(database) as engine, engine.connect() as conn:
        return list(await conn.execute(text(query)))


async def wait_until_all_ended(database: str, count: int, within: float) -> dict[str, str]:
    deadline = time.monotonic() + within
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = {r.name: r.state for r in await rows(database, "SELECT name, state FROM jobs")}
        if len(states) >= count and all(s == "Succeeded" for s in states.values()):
            return states
        await asyncio.sleep(0.2)
    return states


async def each_ran_once(database: str, states: dict[str, str]) -> None:
    """Each job was admitted, dispatched, started and ended once (its event log)."""
    events = await rows(
        database, "SELECT j.name, e.reason FROM job_events e JOIN jobs j ON j.id = e.job_id"
    )
    per_job = Counter((e.name, e.reason) for e in events)
    for name in states:
        for reason in ("Admitted", "Dispatched", "Running", "Succeeded"):
            assert per_job[name, reason] == 1, f"{name}: {reason} {per_job[name, reason]}x"


async def test_three_replicas_survive_a_killed_and_a_paused_leader(
    database: str, replicas: list[Replica], tmp_path: Path
) -> None:
    async with aiohttp.ClientSession() as session:
        first, _ = await leader_among(session, replicas, 10)
        names = [f"job-{n}" for n in range(JOBS)]
        acked: set[str] = set()
        submitter = asyncio.create_task(submit_all(replicas, names, acked))
        await asyncio.sleep(1.0)
        first.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.proc.wait)
        survivors = [r for r in replicas if r is not first]
        second, took = await leader_among(session, survivors, 10)
        assert took < 10
        await submitter
        assert len(acked) == JOBS, f"{JOBS - len(acked)} submissions never acknowledged"

        # Every acknowledged job exists once and ends; none was admitted or dispatched twice.
        states = await wait_until_all_ended(database, JOBS, 40)
        assert set(acked) <= set(states), f"lost: {sorted(set(acked) - set(states))}"
        assert Counter(states.values()) == {"Succeeded": len(states)}
        await each_ran_once(database, states)
        assert not await rows(database, "SELECT job_id FROM job_inbox")

        # Pause the leader past its lease while it runs jobs: the third replica takes over.
        third = next(r for r in survivors if r is not second)
        lease_before = (await rows(database, "SELECT term FROM leases"))[0].term
        late_names = [f"late-{n}" for n in range(24)]
        late_acked: set[str] = set()
        await submit_all([second], late_names, late_acked)
        assert late_acked == set(late_names)
        await asyncio.sleep(0.5)  # admitted and started by the leader about to pause
        second.proc.send_signal(signal.SIGSTOP)
        try:
            leader, _ = await leader_among(session, [third], 10)
            assert leader is third
            term = (await rows(database, "SELECT term FROM leases"))[0].term
            assert term == lease_before + 1
            # An administrator's change waits at the paused replica (it accepted the
            # connection); it reaches its loop only once it runs again.
            late = asyncio.create_task(
                asyncio.to_thread(
                    subprocess.run,
                    [
                        "curl",
                        "-s",
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                        "-X",
                        "PUT",
                        "-H",
                        "Content-Type: application/json",
                        "--data",
                        '{"healthy": false, "reason": "late write"}',
                        "--max-time",
                        "20",
                        f"{second.url}/api/v1/clusters/east/nodes/east-node-0/health",
                    ],
                    capture_output=True,
                    text=True,
                )
            )
            await asyncio.sleep(0.5)
        finally:
            second.proc.send_signal(signal.SIGCONT)
        answer = await late
        print(f"failover {took:.2f} s; late write answered {answer.stdout.strip()}")
        # Refused (it no longer leads, or forwarded to the leader which then took it).
        found = await rows(database, "SELECT reason FROM node_health")
        status = answer.stdout.strip()
        if status == "200":
            # Forwarded after stepping down: the leader wrote it, in its own term.
            assert [r.reason for r in found] == ["late write"]
        else:
            assert status == "503", answer
            assert found == [], "a write of the paused leader landed"
        for _ in range(40):
            state = await health(session, second)
            if state is not None and state.get("role") == "follower":
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the resumed replica did not step down: {state}")
        assert (await rows(database, "SELECT term FROM leases"))[0].term == term
        # What the paused leader had under way ends once, under the new leader.
        states = await wait_until_all_ended(database, JOBS + len(late_names), 40)
        assert Counter(states.values()) == {"Succeeded": JOBS + len(late_names)}
        await each_ran_once(database, states)
