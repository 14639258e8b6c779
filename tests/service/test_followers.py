"""What a follower does on its own and what it forwards: two ``fleet serve`` on one PostgreSQL."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fleet.testing import servers
from fleet.testing.documents import pytorchjob
from tests.databases import fresh_postgres_database

pytestmark = [pytest.mark.slow, pytest.mark.postgresql]

LEASE = ["--leader-lease", "2", "--leader-renew", "0.5"]
YAML = {"Content-Type": "application/yaml"}


@pytest.fixture
async def pair(postgres_url: str, tmp_path: Path) -> AsyncIterator[tuple[str, str, Any]]:
    async with fresh_postgres_database(postgres_url) as url:
        ports = [servers.free_port(), servers.free_port()]
        procs = []
        try:
            for n, port in enumerate(ports):
                log = tmp_path / f"r{n}.log"
                procs.append(
                    await asyncio.to_thread(
                        servers.start, url, port, log, extra=LEASE, env=servers.REPLICA_ENV
                    )
                )
            yield f"http://127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}", procs[0]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    await asyncio.to_thread(servers.stop, proc)


async def body(resp: aiohttp.ClientResponse, status: int) -> Any:
    assert resp.status == status, await resp.text()
    return await resp.json(content_type=None)


async def test_a_follower_serves_submissions_and_forwards_what_the_leader_knows(
    pair: tuple[str, str, Any],
) -> None:
    leader, follower, _ = pair
    async with aiohttp.ClientSession() as s:
        health = await body(await s.get(f"{follower}/healthz"), 200)
        assert health == {
            "status": "ok",
            "version": health["version"],  # the server's, whatever it is
            "role": "follower",
            "term": 1,
            "leader": leader,
        }
        assert (await body(await s.get(f"{follower}/readyz"), 200))["ready"] is True
        # A submission through the follower is stored there and scheduled by the leader.
        job = pytorchjob("through-follower", duration="300s")
        await body(await s.post(f"{follower}/api/v1/submissions", data=job, headers=YAML), 201)
        deadline = time.monotonic() + 10
        while True:
            found = await body(await s.get(f"{follower}/api/v1/jobs/team-a/through-follower"), 200)
            if found["state"] == "Running":
                break
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.1)
        # The queue's usage comes from the leader's loop, through the follower.
        queues = await body(await s.get(f"{follower}/api/v1/queues/team-a"), 200)
        direct = await body(await s.get(f"{leader}/api/v1/queues/team-a"), 200)
        assert queues["used"] == direct["used"] and queues["used"]["nvidia.com/gpu"] == "1"
        # An administrator's change through the follower runs in the leader's loop.
        change = {"healthy": False, "reason": "through the follower"}
        marked = await body(
            await s.put(f"{follower}/api/v1/clusters/west/nodes/west-node-0/health", json=change),
            200,
        )
        assert marked["reason"] == "through the follower"
        audit = await body(await s.get(f"{leader}/api/v1/audit?kind=node-health"), 200)
        assert len(audit["items"]) == 1, audit  # recorded once, by the leader
        # A cancellation through the follower reaches the leader's loop.
        await body(await s.delete(f"{follower}/api/v1/jobs/team-a/through-follower"), 202)
        deadline = time.monotonic() + 10
        while True:
            found = await body(await s.get(f"{leader}/api/v1/jobs/team-a/through-follower"), 200)
            if found["state"] == "Cancelled":
                break
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.1)


async def test_without_a_leader_the_leaders_routes_answer_503_and_then_come_back(
    pair: tuple[str, str, Any],
) -> None:
    _, follower, leader_proc = pair
    async with aiohttp.ClientSession() as s:
        leader_proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(leader_proc.wait)
        resp = await s.get(f"{follower}/api/v1/queues")
        if resp.status == 503:  # the lease has not expired yet
            assert resp.content_type == "application/problem+json"
            assert int(resp.headers["Retry-After"]) >= 1
        # Jobs are read from the database meanwhile.
        await body(await s.get(f"{follower}/api/v1/jobs"), 200)
        deadline = time.monotonic() + 10
        while True:
            health = await body(await s.get(f"{follower}/healthz"), 200)
            if health["role"] == "leader":
                break
            assert time.monotonic() < deadline, health
            await asyncio.sleep(0.1)
        assert health["term"] == 2
        # Once its loop is restored, the new leader answers its routes itself.
        while (resp := await s.get(f"{follower}/api/v1/queues")).status == 503:
            assert "taking over" in (await resp.json(content_type=None))["detail"]
            assert time.monotonic() < deadline + 10
            await asyncio.sleep(0.1)
        await body(resp, 200)


async def test_a_follower_governs_jobs_with_the_policies_another_replica_stored(
    pair: tuple[str, str, Any],
) -> None:
    leader, follower, _ = pair
    standing = (
        "apiVersion: policy.karmada.io/v1alpha1\n"
        "kind: PropagationPolicy\n"
        "metadata: {name: standing, namespace: team-b}\n"
        "spec:\n"
        "  resourceSelectors: [{apiVersion: kubeflow.org/v1, kind: PyTorchJob}]\n"
    )
    job = pytorchjob("governed", namespace="team-b", duration="300s").split("---\n", 1)[1]
    async with aiohttp.ClientSession() as s:
        await body(await s.post(f"{follower}/api/v1/submissions", data=job, headers=YAML), 422)
        await body(await s.post(f"{leader}/api/v1/submissions", data=standing, headers=YAML), 201)
        # The follower takes the stored policies after its next election round.
        deadline = time.monotonic() + 10
        while True:
            resp = await s.post(f"{follower}/api/v1/submissions", data=job, headers=YAML)
            if resp.status == 201:
                break
            await body(resp, 422)
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)
        found = await body(await s.get(f"{follower}/api/v1/jobs/team-b/governed"), 200)
        assert found["policy"] == {"namespace": "team-b", "name": "standing", "source": "stored"}


async def test_only_the_leader_samples_the_history(postgres_url: str, tmp_path: Path) -> None:
    every = 0.5
    extra = [*LEASE, "--history-interval", str(every)]
    async with fresh_postgres_database(postgres_url) as url:
        ports = [servers.free_port(), servers.free_port()]
        procs = []
        try:
            for n, port in enumerate(ports):
                log = tmp_path / f"r{n}.log"
                procs.append(
                    await asyncio.to_thread(
                        servers.start, url, port, log, extra=extra, env=servers.REPLICA_ENV
                    )
                )
            follower = f"http://127.0.0.1:{ports[1]}"
            async with aiohttp.ClientSession() as s:
                assert (await body(await s.get(f"{follower}/healthz"), 200))["role"] == "follower"
                await asyncio.sleep(6 * every)
                history = f"{follower}/api/v1/history?series=gpus&since=60"
                first = await body(await s.get(history), 200)
                await asyncio.sleep(8 * every)
                found = await body(await s.get(history), 200)
            times = [p["time"] for p in found["points"]]
            assert len(times) == len(set(times))
            # One sampler: about one sample per interval (two would write twice as many).
            added = len(times) - len(first["points"])
            assert 4 <= added <= 11, (len(first["points"]), times)
            assert found["points"][-1]["queues"].keys() == {"sandbox", "team-a", "team-b", "team-c"}
        finally:
            for proc in procs:
                if proc.poll() is None:
                    await asyncio.to_thread(servers.stop, proc)
