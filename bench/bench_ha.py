"""Replicas on one PostgreSQL: failover time after SIGKILL, submissions/s through three replicas.

Theory of operation: a throwaway PostgreSQL server (``scripts/postgres-test-server``,
or the server of ``--database-url``) holds a fresh database per phase; ``fleet serve``
replicas run as separate processes on free ports with short leases (``--lease``,
``--renew``), one simulated member cluster and a one-leaf tree large enough to admit
every job (the files of ``bench_api.py``).  The replicas share
``fleet.testing.servers.REPLICA_ENV``'s replica secret: without one a follower
forwards none of the leader's routes (it answers 421 naming the leader).

* **Submissions/s.**  32 aiohttp clients submit N one-GPU jobs (one request each),
  first to a single replica (the baseline), then round robin through three.  Printed:
  submissions per second, p50/p99 latency, and whether exactly N jobs exist after.
* **Failover.**  With three replicas running, the leader is killed with SIGKILL
  ``--kills`` times (a new replica replaces it each time).  Printed per kill and as
  the median: the seconds until another replica says it leads (``/healthz``), and
  until ``GET /api/v1/queues`` answers 200 through a follower (the new leader's loop
  runs and the followers forward to it).  With a lease of L seconds a failover takes
  about L plus one renewal interval plus the time to restore the state.

Both machines' worth of work share this machine's cores; the figures are printed,
never asserted.

    .venv/bin/python bench/bench_ha.py [--jobs N] [--kills K] [--lease S] [--renew S]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
from bench_api import cluster_yaml, postgres_server, quota_yaml, submission
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from fleet.testing import servers

CLIENTS = 32
_databases = itertools.count(1)


class Replica:
    """One ``fleet serve`` process."""

    def __init__(self, database_url: str, work: Path, lease: float, renew: float) -> None:
        self.port = servers.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = work / f"serve-{self.port}.log"
        files = ["--clusters", str(work / "clusters.yaml"), "--quota", str(work / "quota.yaml")]
        lease_args = ["--leader-lease", str(lease), "--leader-renew", str(renew)]
        self.proc = servers.launch(
            database_url,
            self.port,
            self.log,
            extra=[*files, "--log-level", "WARNING", *lease_args],
            env=servers.REPLICA_ENV,
            schedule_interval=1,
        )

    async def ready(self, session: aiohttp.ClientSession) -> None:
        for _ in range(600):
            if self.proc.poll() is not None:
                raise RuntimeError("fleet serve exited:\n" + self.log.read_text())
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(self.url + "/readyz") as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
        raise RuntimeError("fleet serve did not become ready:\n" + self.log.read_text())

    async def role(self, session: aiohttp.ClientSession) -> str | None:
        try:
            async with session.get(self.url + "/healthz", timeout=aiohttp.ClientTimeout(2)) as r:
                found: dict[str, Any] = await r.json()
                return found.get("role")
        except (aiohttp.ClientError, TimeoutError):
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            servers.stop(self.proc)


@contextlib.asynccontextmanager
async def fresh_database(server_url: str) -> AsyncIterator[str]:
    name = f"fleet_ha_bench_{os.getpid()}_{next(_databases)}"
    engine = create_async_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE template0'))
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        async with engine.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await engine.dispose()


@contextlib.asynccontextmanager
async def replicas(
    database_url: str, work: Path, count: int, args: argparse.Namespace
) -> AsyncIterator[list[Replica]]:
    started: list[Replica] = []
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(count):  # the first one stores the configuration
                replica = Replica(database_url, work, args.lease, args.renew)
                started.append(replica)
                await replica.ready(session)
        yield started
    finally:
        for replica in started:
            replica.stop()


async def submit(targets: list[Replica], jobs: int, prefix: str) -> tuple[float, list[float]]:
    """CLIENTS clients submit ``jobs`` jobs round robin over ``targets``; wall time, latencies."""
    names = iter(range(jobs))
    turn = itertools.count()
    latencies: list[float] = []

    async def client(session: aiohttp.ClientSession) -> None:
        for n in names:
            body = submission(f"{prefix}-{n}")
            target = targets[next(turn) % len(targets)]
            started = time.perf_counter()
            async with session.post(
                target.url + "/api/v1/submissions",
                data=body,
                headers={"Content-Type": "application/yaml"},
            ) as resp:
                await resp.read()
                if resp.status not in (200, 201):
                    raise RuntimeError(f"submission answered {resp.status}")
            latencies.append(time.perf_counter() - started)

    connector = aiohttp.TCPConnector(limit=CLIENTS * 2)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(CLIENTS)))
        return time.perf_counter() - started, latencies


async def count_jobs(database_url: str) -> int:
    engine = create_async_engine(database_url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return int(
                (await conn.execute(text("SELECT count(DISTINCT name) FROM jobs"))).scalar_one()
            )
    finally:
        await engine.dispose()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def throughput(server: str, work: Path, count: int, args: argparse.Namespace) -> None:
    async with fresh_database(server) as url, replicas(url, work, count, args) as running:
        wall, latencies = await submit(running, args.jobs, f"r{count}")
        stored = await count_jobs(url)
    print(
        f"{count} replica{'s' if count > 1 else ''}: {args.jobs / wall:8.0f} submissions/s  "
        f"p50 {quantile(latencies, 0.5) * 1000:6.1f} ms  "
        f"p99 {quantile(latencies, 0.99) * 1000:6.1f} ms"
        f"  {'OK' if stored == args.jobs else f'MISMATCH ({stored} stored)'}"
    )


async def failover(server: str, work: Path, args: argparse.Namespace) -> None:
    leading: list[float] = []
    serving: list[float] = []
    async with fresh_database(server) as url, replicas(url, work, 3, args) as running:
        await submit(running, 200, "before")  # something to restore
        async with aiohttp.ClientSession() as session:
            for kill in range(1, args.kills + 1):
                leader = await wait_for_leader(session, running, 30.0)
                leader.proc.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                await asyncio.to_thread(leader.proc.wait)
                running.remove(leader)
                await wait_for_leader(session, running, 60.0)
                leading.append(time.monotonic() - killed)
                follower = (
                    running[0] if await running[0].role(session) == "follower" else running[1]
                )
                await wait_for_queues(session, follower, 60.0)
                serving.append(time.monotonic() - killed)
                print(
                    f"kill {kill}: another replica leads after {leading[-1]:5.2f} s, "
                    f"queues answer through a follower after {serving[-1]:5.2f} s"
                )
                replacement = Replica(url, work, args.lease, args.renew)
                running.append(replacement)
                await replacement.ready(session)
    print(
        f"failover (lease {args.lease} s, renewal every {args.renew} s), median of {args.kills}: "
        f"leads after {statistics.median(leading):.2f} s, "
        f"serves the leader's routes after {statistics.median(serving):.2f} s"
    )


async def wait_for_leader(
    session: aiohttp.ClientSession, running: list[Replica], within: float
) -> Replica:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for replica in running:
            if await replica.role(session) == "leader":
                return replica
        await asyncio.sleep(0.02)
    raise RuntimeError(f"no replica led within {within} s")


async def wait_for_queues(session: aiohttp.ClientSession, follower: Replica, within: float) -> None:
    """Return once ``GET /api/v1/queues`` answers 200 through ``follower``."""
    deadline = time.monotonic() + within
    last = "no answer"
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(follower.url + "/api/v1/queues") as resp:
                if resp.status == 200:
                    return
                last = f"{resp.status}: {(await resp.text())[:300]}"
        await asyncio.sleep(0.02)
    raise RuntimeError(f"queues did not answer through a follower within {within} s ({last})")


@contextlib.contextmanager
def server(args: argparse.Namespace) -> Iterator[str]:
    if args.database_url:
        yield args.database_url
        return
    with postgres_server() as (url, _postmaster):
        yield url


async def main_async(args: argparse.Namespace) -> None:
    with server(args) as url, tempfile.TemporaryDirectory(prefix="fleet-bench-ha.") as tmp:
        work = Path(tmp)
        (work / "clusters.yaml").write_text(cluster_yaml(args.jobs + 200))
        (work / "quota.yaml").write_text(quota_yaml(args.jobs + 200))
        print(f"{args.jobs} one-GPU submissions from {CLIENTS} clients, PostgreSQL")
        await throughput(url, work, 1, args)
        await throughput(url, work, 3, args)
        await failover(url, work, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000, help="jobs to submit (3,000)")
    parser.add_argument("--kills", type=int, default=5, help="leaders to kill (5)")
    parser.add_argument("--lease", type=float, default=2.0, help="lease seconds (2)")
    parser.add_argument("--renew", type=float, default=0.5, help="renewal seconds (0.5)")
    parser.add_argument(
        "--database-url",
        help="maintenance URL of a PostgreSQL server whose user may create databases "
        "(default: a throwaway server)",
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
