"""Two ``fleet serve`` replicas on one PostgreSQL with real members: the leader killed
mid-dispatch leaves exactly one PyTorchJob per job, created by whichever replica led."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from fleet.clusters.base import member_object_name
from tests.databases import fresh_postgres_database
from tests.kube.conftest import NAMESPACE, Fleet, member_document, pytorchjobs, submission
from tests.kube.controlplane import ControlPlane, wait_for
from tests.kube.real_operator import MemberControllers

pytestmark = [pytest.mark.slow, pytest.mark.postgresql]

LEASE = ["--leader-lease", "2", "--leader-renew", "0.5"]
JOBS = 4  # 2 GPUs each: the tests' quota holds 8


class Replica(Fleet):
    """``fleet serve`` on a shared PostgreSQL database, with short leases."""

    def __init__(self, tmp: Path, documents: list[dict[str, Any]], database_url: str) -> None:
        tmp.mkdir()
        super().__init__(tmp, documents)
        self.database_url = database_url

    def start(self) -> Replica:
        from fleet.testing import servers

        self.proc = servers.start(
            self.database_url,
            self.port,
            self.log,
            extra=[*self.files(), *LEASE],
            env=servers.REPLICA_ENV,
        )
        return self

    def role(self) -> str:
        return str(self.request("GET", "/healthz")["role"])

    def schedules(self) -> bool:
        """Whether its loop runs (the leader's routes answer; 503 while it restores)."""
        try:
            self.request("GET", "/api/v1/queues")
        except AssertionError:
            return False
        return True


@pytest.fixture
async def database(postgres_url: str) -> AsyncIterator[str]:
    async with fresh_postgres_database(postgres_url) as url:
        yield url


def copies(members: dict[str, ControlPlane], name: str) -> list[tuple[str, str]]:
    object_name = member_object_name(f"{NAMESPACE}/{name}")
    return [
        (cluster, job["metadata"]["labels"]["fleet.io/job-uid"])
        for cluster, plane in members.items()
        for job in pytorchjobs(plane)
        if job["metadata"]["name"] == object_name
    ]


async def test_a_killed_leader_leaves_one_pytorchjob_per_job(
    members: dict[str, ControlPlane],
    operators: dict[str, MemberControllers],
    database: str,
    tmp_path: Path,
) -> None:
    documents = [member_document(n, plane.kubeconfig(), n) for n, plane in members.items()]
    first = await asyncio.to_thread(Replica(tmp_path / "a", documents, database).start)
    second = await asyncio.to_thread(Replica(tmp_path / "b", documents, database).start)
    try:
        assert (first.role(), second.role()) == ("leader", "follower")
        names = [f"ha-{n}" for n in range(JOBS)]
        uids = {}
        for n, name in enumerate(names):  # through both replicas
            through = first if n % 2 else second
            uids[name] = through.submit(submission(name, workers=2, gpus=1))["jobs"][0]["uid"]
        await asyncio.sleep(0.05)  # some created, some not yet
        await asyncio.to_thread(first.kill)
        started = time.monotonic()
        await asyncio.to_thread(
            wait_for, lambda: second.role() == "leader", "the second replica leads", 10.0
        )
        assert time.monotonic() - started < 10
        await asyncio.to_thread(wait_for, second.schedules, "the new leader's loop", 30.0)
        for name in names:
            job = await asyncio.to_thread(second.wait_state, name, "Running")
            assert job["uid"] == uids[name]
            await asyncio.to_thread(wait_for, lambda n=name: copies(members, n), "the job")
        await asyncio.sleep(1.0)  # a few iterations of the new leader
        for name in names:
            job = second.job(name)
            assert copies(members, name) == [(job["cluster"], uids[name])]
            reasons = [e["reason"] for e in job["events"]]
            assert reasons.count("Admitted") == 1, reasons
            assert reasons.count("Dispatched") == 1, reasons
    finally:
        await asyncio.to_thread(second.stop)
        await asyncio.to_thread(first.stop)
