"""HTTP API throughput and latency: a real ``fleet serve`` under 32 concurrent clients.

Theory of operation: for each database (a throwaway PostgreSQL server started
with ``scripts/postgres-test-server``, and a SQLite file) the benchmark starts
``fleet serve`` as a separate process on a free port, with one simulated member
cluster of 8-GPU nodes and a one-leaf quota tree, both large enough to admit
every job at once (files written into a temporary directory).  From this
process, 32 aiohttp clients then submit N one-GPU PyTorchJobs (one
PropagationPolicy + PyTorchJob per request) while a 33rd client polls
``GET /api/v1/queues``, and it keeps polling until no job is Queued any more,
so its samples cover scheduling cycles too.

Printed figures, per database:
* the CPU time ``fleet serve`` and the clients used during the submissions
  (all run on this machine: what one uses, the others cannot), and that of
  ``fleet serve``'s worker processes (submissions read, forecasts) and of
  PostgreSQL's server processes;
* submissions per second (N / wall time of the submission phase);
* p50 and p99 latency of a submission;
* p50 and p99 latency of ``GET /api/v1/queues`` while the load runs;
* the time until every job is Admitted (no job left Queued), from the first
  submission;
* whether exactly N jobs exist afterwards, each name once (``OK``), or not
  (``MISMATCH``).  Jobs run for an hour of simulated time, so none has ended
  when they are counted; every state is counted anyway.

Targets (PostgreSQL): >= 1,000 submissions/s with p99 < 50 ms; API reads
p99 < 50 ms while a scheduling cycle runs.  The figures are printed, never
asserted.

    .venv/bin/python bench/bench_api.py [--jobs N] [--database sqlite|postgresql|both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from fleet.testing import servers
from fleet.testing.documents import pytorchjob

ROOT = Path(__file__).resolve().parent.parent
PG_SCRIPT = ROOT / "scripts" / "postgres-test-server"
CLIENTS = 32
NAMESPACE = "bench"
GPUS_PER_NODE = 8
NODES_PER_POOL = 8
TARGET_RATE = 1_000
TARGET_P99_MS = 50.0
PROFILER = os.environ.get("BENCH_API_PROFILER", "").split()


# Fixtures written for the server -------------------------------------------------------


def cluster_yaml(jobs: int) -> str:
    """One simulated cluster with a GPU per job (rounded up to whole pools of nodes)."""
    pools = max(1, -(-jobs // (GPUS_PER_NODE * NODES_PER_POOL)))
    nodes = pools * NODES_PER_POOL
    physical = [
        {
            "cellType": "A100-NODE-POOL",
            "cellChildren": [
                {"cellAddress": f"node-{p * NODES_PER_POOL + n}"} for n in range(NODES_PER_POOL)
            ],
        }
        for p in range(pools)
    ]
    doc = {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": "bench", "labels": {"gpu": "a100"}},
        "spec": {
            "simulated": True,
            "cells": {
                "physicalCluster": {
                    "skuTypes": {"A100": {"gpu": 1, "cpu": 12, "memory": "120Gi"}},
                    "cellTypes": {
                        "A100-NODE": {
                            "childCellType": "A100",
                            "childCellNumber": GPUS_PER_NODE,
                            "isNodeLevel": True,
                        },
                        "A100-NODE-POOL": {
                            "childCellType": "A100-NODE",
                            "childCellNumber": NODES_PER_POOL,
                        },
                    },
                    "physicalCells": physical,
                },
                "virtualClusters": {
                    NAMESPACE: {
                        "virtualCells": [
                            {"cellType": "A100-NODE-POOL.A100-NODE", "cellNumber": nodes}
                        ]
                    }
                },
            },
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


def quota_yaml(jobs: int) -> str:
    """A root and one leaf queue owning the benchmark's namespace, with room for every job."""
    gpus = max(1, -(-jobs // (GPUS_PER_NODE * NODES_PER_POOL))) * GPUS_PER_NODE * NODES_PER_POOL
    quota = {"nvidia.com/gpu": gpus}
    doc = {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "bench"},
        "spec": {
            "root": {
                "name": "root",
                "min": quota,
                "max": quota,
                "children": [
                    {"name": NAMESPACE, "min": quota, "max": quota, "namespaces": [NAMESPACE]}
                ],
            }
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


def submission(name: str) -> bytes:
    """A PropagationPolicy and the one-GPU PyTorchJob it selects."""
    return pytorchjob(name, namespace=NAMESPACE, gpus=1, duration="1h").encode()


# Servers -----------------------------------------------------------------------------------


@contextlib.contextmanager
def postgres_server() -> Any:
    """A throwaway PostgreSQL server; yields its SQLAlchemy URL and its postmaster's pid."""
    directory = tempfile.mkdtemp(prefix="fleet-bench-pg.")
    url = subprocess.run(
        [str(PG_SCRIPT), "start", directory], check=True, capture_output=True, text=True
    ).stdout.strip()
    pid_files = sorted(Path(directory).glob("**/postmaster.pid"))
    postmaster = int(pid_files[0].read_text().split()[0]) if pid_files else None
    try:
        yield url, postmaster
    finally:
        subprocess.run([str(PG_SCRIPT), "stop", directory], check=False, capture_output=True)


@contextlib.asynccontextmanager
async def fleet_serve(database_url: str, work: Path, jobs: int) -> AsyncIterator[tuple[str, int]]:
    """``fleet serve`` on a free port; yields its base URL and pid, terminates it on exit."""
    clusters, quota, log = work / "clusters.yaml", work / "quota.yaml", work / "serve.log"
    clusters.write_text(cluster_yaml(jobs))
    quota.write_text(quota_yaml(jobs))
    port = servers.free_port()
    proc = servers.start(
        database_url,
        port,
        log,
        extra=["--clusters", str(clusters), "--quota", str(quota), "--log-level", "WARNING"],
        schedule_interval=1,
        prefix=PROFILER,
        ready_within=120,
    )
    try:
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        servers.stop(proc)


# Load ----------------------------------------------------------------------------------------


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) of process ``pid`` (None: this one); NaN where unknown."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants_cpu(root: int | None) -> float:
    """CPU time of the live processes below ``root`` (children, their children...); 0 for None.

    A process that exited during the run is not counted (its time is its
    parent's once waited for); the workers measured here live throughout.
    """
    if root is None:
        return 0.0
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    below = {root}
    grew = True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in below} - below
        below |= found
        grew = bool(found)
    total = sum(cpu_seconds(pid) for pid in below - {root})
    return total if total == total else 0.0  # NaN: one exited while read


def percentile(samples: list[float], p: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def submit_all(
    session: aiohttp.ClientSession, base: str, bodies: list[bytes]
) -> tuple[list[float], int]:
    """CLIENTS clients share the submissions; each submission's latency, and the failures."""
    pending = iter(bodies)
    latencies: list[float] = []
    failures = 0

    async def client() -> None:
        nonlocal failures
        for body in pending:
            started = time.perf_counter()
            async with session.post(
                base + "/api/v1/submissions",
                data=body,
                headers={"Content-Type": "application/yaml"},
            ) as resp:
                await resp.read()
                ok = resp.status in (200, 201)
            latencies.append(time.perf_counter() - started)
            if not ok:
                failures += 1

    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return latencies, failures


async def poll_queues(
    session: aiohttp.ClientSession, base: str, stop: asyncio.Event, samples: list[float]
) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        async with session.get(base + "/api/v1/queues") as resp:
            await resp.read()
        samples.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)


async def queued_left(session: aiohttp.ClientSession, base: str) -> int:
    async with session.get(base + "/api/v1/jobs?state=Queued&limit=1") as resp:
        page = await resp.json()
    return len(page["items"])


async def all_names(session: aiohttp.ClientSession, base: str) -> list[str]:
    names: list[str] = []
    url = base + "/api/v1/jobs?limit=1000"
    while True:
        async with session.get(url) as resp:
            page = await resp.json()
        names += [j["name"] for j in page["items"] if j["namespace"] == NAMESPACE]
        if not page.get("continue"):
            return names
        url = base + f"/api/v1/jobs?limit=1000&continue={page['continue']}"


async def run_one(
    kind: str, database_url: str, work: Path, jobs: int, postmaster: int | None = None
) -> None:
    names = [f"job-{n:06d}" for n in range(jobs)]
    async with fleet_serve(database_url, work, jobs) as (base, pid):
        connector = aiohttp.TCPConnector(limit=CLIENTS + 4)
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            stop = asyncio.Event()
            reads: list[float] = []
            bodies = [submission(name) for name in names]  # built before the clock starts
            poller = asyncio.create_task(poll_queues(session, base, stop, reads))
            started = time.perf_counter()
            cpu_before = (
                cpu_seconds(pid),
                cpu_seconds(),
                descendants_cpu(pid),
                cpu_seconds(postmaster) if postmaster else 0.0,
                descendants_cpu(postmaster),
            )
            latencies, failures = await submit_all(session, base, bodies)
            submitted = time.perf_counter() - started
            server_cpu = cpu_seconds(pid) - cpu_before[0]
            client_cpu = cpu_seconds() - cpu_before[1]
            workers_cpu = descendants_cpu(pid) - cpu_before[2]
            database_cpu = (
                (cpu_seconds(postmaster) if postmaster else 0.0)
                + descendants_cpu(postmaster)
                - cpu_before[3]
                - cpu_before[4]
            )
            reads_during_submissions = len(reads)
            while await queued_left(session, base):
                await asyncio.sleep(0.2)
            admitted = time.perf_counter() - started
            stop.set()
            await poller
            counts = Counter(await all_names(session, base))
    rate = jobs / submitted if submitted else float("inf")
    p99 = percentile(latencies, 99) * 1000
    reads_p99 = percentile(reads, 99) * 1000
    exact = (
        len(counts) == jobs and set(counts) == set(names) and all(c == 1 for c in counts.values())
    )
    print(f"--- {kind}: {jobs:,} jobs, {CLIENTS} clients")
    print(f"submissions:        {rate:,.0f}/s ({submitted:.1f} s, {failures} failed)")
    print(
        f"submission latency: p50 {percentile(latencies, 50) * 1000:.1f} ms, "
        f"p99 {p99:.1f} ms, max {max(latencies, default=0) * 1000:.1f} ms"
    )
    print(
        f"GET /api/v1/queues: p50 {percentile(reads, 50) * 1000:.1f} ms, p99 {reads_p99:.1f} ms "
        f"({len(reads)} samples, {reads_during_submissions} during submissions)"
    )
    print(
        f"CPU meanwhile:      fleet serve {server_cpu:.1f} s "
        f"({server_cpu / jobs * 1e6:,.0f} us per submission, the loop's work included), "
        f"clients {client_cpu:.1f} s, over {submitted:.1f} s on {os.cpu_count()} cores"
    )
    print(
        f"                    its worker processes (parsing, forecasts) {workers_cpu:.1f} s "
        f"({workers_cpu / jobs * 1e6:,.0f} us per submission)"
        + (
            f"; PostgreSQL {database_cpu:.1f} s ({database_cpu / jobs * 1e6:,.0f} us)"
            if postmaster
            else ""
        )
    )
    print(f"all admitted after: {admitted:.1f} s from the first submission")
    print(
        f"jobs stored:        {sum(counts.values()):,} ({len(counts):,} names) -> "
        + ("OK" if exact else "MISMATCH")
    )
    if kind == "postgresql":
        print(
            f"targets:            >= {TARGET_RATE:,} submissions/s "
            f"[{'met' if rate >= TARGET_RATE else 'missed'}], "
            f"submission p99 < {TARGET_P99_MS:.0f} ms "
            f"[{'met' if p99 < TARGET_P99_MS else 'missed'}], "
            f"reads p99 < {TARGET_P99_MS:.0f} ms during cycles "
            f"[{'met' if reads_p99 < TARGET_P99_MS else 'missed'}]"
        )


async def main_async(args: argparse.Namespace) -> None:
    kinds = ("postgresql", "sqlite") if args.database == "both" else (args.database,)
    print(
        f"targets (PostgreSQL): >= {TARGET_RATE:,} submissions/s with p99 < "
        f"{TARGET_P99_MS:.0f} ms; API reads p99 < {TARGET_P99_MS:.0f} ms while a "
        "scheduling cycle runs"
    )
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix=f"fleet-bench-{kind}.") as tmp:
            work = Path(tmp)
            if kind == "sqlite":
                await run_one(kind, f"sqlite+aiosqlite:///{work / 'fleet.db'}", work, args.jobs)
            else:
                with postgres_server() as (url, postmaster):
                    await run_one(kind, url, work, args.jobs, postmaster)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs to submit (10,000)")
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgresql", "both"),
        default="both",
        help="which database to run on (both)",
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
