"""The HiveD lab's five experiments, end to end through the HTTP API.

Each test starts the real app on a lab cluster and quota tree from
``policies/lab/`` (see its README), submits the experiment's job files there
in order, advances a virtual clock and reads states and placements back over
HTTP: the same expectations as ``tests/cells/test_lab_experiments_cycle.py``
checks on the scheduling core.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.service.settings import POLICIES, Settings
from fleet.testing import running

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]
YAML = {"Content-Type": "application/yaml"}
LAB = POLICIES / "lab"
CAROL, DAN = "hostname-carol", "hostname-dan"
INTERVAL = 5.0  # seconds between scheduling cycles


async def start(
    aiohttp_client: MakeClient, database_url: str, cluster: str, quota: str
) -> tuple[Client, VirtualClock]:
    clock = VirtualClock(1_000.0)
    settings = Settings(
        database_url=database_url,
        clusters=POLICIES / "clusters" / cluster,
        quota=LAB / quota,
        schedule_interval=INTERVAL,
    )
    client = await aiohttp_client(create_app(settings, clock=clock))
    await settle(client, clock)
    return client, clock


async def settle(client: Client, clock: VirtualClock, seconds: float = 0.0) -> None:
    await running.settle(client.app[keys.SERVICE].loop, clock, seconds)


async def submit(client: Client, clock: VirtualClock, file: str) -> None:
    text = (LAB / file).read_text(encoding="utf-8")
    resp = await client.post("/api/v1/submissions", data=text, headers=YAML)
    assert resp.status == 201, await resp.text()
    await settle(client, clock, INTERVAL)


#: the lab's jobs by name: vc1's live in namespace lab-vc1, default's in lab
VC1_JOBS = frozenset({"vc1-0", "vc1-1", "vc1-2", "low", "high", "prod", "oppo"})


async def job(client: Client, name: str) -> dict[str, Any]:
    namespace = "lab-vc1" if name in VC1_JOBS else "lab"
    resp = await client.get(f"/api/v1/jobs/{namespace}/{name}")
    body: dict[str, Any] = await resp.json()
    assert resp.status == 200, body
    return body


async def pending(client: Client, queue: str) -> dict[str, str]:
    resp = await client.get(f"/api/v1/queues/{queue}")
    body = await resp.json()
    assert resp.status == 200, body
    return {p["job"]: p["reason"] for p in body["pending"]}


def nodes(body: dict[str, Any]) -> list[str]:
    return sorted(p["node"] for p in body["placement"])


def reasons(body: dict[str, Any]) -> list[str]:
    return [e["reason"] for e in body["events"]]


async def test_vc_safety_vc1_never_runs_guaranteed_work_on_defaults_node(
    aiohttp_client: MakeClient, database_url: str
) -> None:
    client, clock = await start(
        aiohttp_client, database_url, "lab-1.yaml", "quota-two-vcs-borrowing.yaml"
    )
    await submit(client, clock, "vc-safety-1-vc1-jobs.yaml")
    first, second, third = [await job(client, f"vc1-{i}") for i in range(3)]
    assert (first["state"], first["mode"], nodes(first)) == ("Running", "guaranteed", [DAN])
    # The idle default VC's machine is only borrowed, never vc1's guaranteed work.
    assert (second["state"], second["mode"], nodes(second)) == ("Running", "borrowed", [CAROL])
    assert third["state"] == "Queued" and third["placement"] == []
    assert list(await pending(client, "vc1")) == ["lab-vc1/vc1-2"]
    # default wants its machine back: the borrowed job goes, default's job starts there.
    await submit(client, clock, "vc-safety-2-default-job.yaml")
    taken = await job(client, "default-0")
    assert (taken["state"], taken["mode"], nodes(taken)) == ("Running", "guaranteed", [CAROL])
    second = await job(client, "vc1-1")
    assert second["state"] == "Queued" and second["placement"] == []
    assert reasons(second)[-2:] == ["Preempted", "Queued"]
    assert "lab/default-0" in second["events"][-2]["message"]
    first = await job(client, "vc1-0")
    assert (first["state"], nodes(first)) == ("Running", [DAN])
    assert "Preempted" not in reasons(first)
    assert list(await pending(client, "vc1")) == ["lab-vc1/vc1-1", "lab-vc1/vc1-2"]


async def test_vc_safety_with_a_hard_share_vc1_jobs_queue_instead(
    aiohttp_client: MakeClient, database_url: str
) -> None:
    client, clock = await start(aiohttp_client, database_url, "lab-1.yaml", "quota-two-vcs.yaml")
    await submit(client, clock, "vc-safety-1-vc1-jobs.yaml")
    first = await job(client, "vc1-0")
    assert (first["state"], first["mode"], nodes(first)) == ("Running", "guaranteed", [DAN])
    waiting = await pending(client, "vc1")
    assert list(waiting) == ["lab-vc1/vc1-1", "lab-vc1/vc1-2"]
    assert "queue vc1 is full" in waiting["lab-vc1/vc1-1"]
    assert (await job(client, "vc1-1"))["reason"] == waiting["lab-vc1/vc1-1"]


async def test_priority_prod_preempts_test_in_the_same_vc_and_the_victim_resumes(
    aiohttp_client: MakeClient, database_url: str
) -> None:
    client, clock = await start(aiohttp_client, database_url, "lab-1.yaml", "quota-two-vcs.yaml")
    await submit(client, clock, "priority-1-low.yaml")
    low = await job(client, "low")
    assert (low["state"], nodes(low)) == ("Running", [DAN])
    await submit(client, clock, "priority-2-high.yaml")
    high = await job(client, "high")
    assert (high["state"], high["mode"], nodes(high)) == ("Running", "guaranteed", [DAN])
    low = await job(client, "low")
    assert low["state"] == "Queued" and low["placement"] == []
    assert reasons(low) == ["Queued", "Admitted", "Dispatched", "Running", "Preempted", "Queued"]
    assert list(await pending(client, "vc1")) == ["lab-vc1/low"]
    # high runs for 10 minutes (fleet.io/simulated-duration); then low runs on dan again.
    await settle(client, clock, 600 + 2 * INTERVAL)
    assert (await job(client, "high"))["state"] == "Succeeded"
    low = await job(client, "low")
    assert (low["state"], nodes(low)) == ("Running", [DAN])
    assert reasons(low)[-4:] == ["Queued", "Admitted", "Dispatched", "Running"]
    assert await pending(client, "vc1") == {}


async def test_opportunistic_job_uses_idle_default_cells_and_yields_to_default(
    aiohttp_client: MakeClient, database_url: str
) -> None:
    client, clock = await start(aiohttp_client, database_url, "lab-1.yaml", "quota-two-vcs.yaml")
    await submit(client, clock, "opportunistic-1-prod.yaml")
    prod = await job(client, "prod")
    assert (prod["state"], prod["mode"], nodes(prod)) == ("Running", "guaranteed", [DAN])
    await submit(client, clock, "opportunistic-2-oppo.yaml")
    oppo = await job(client, "oppo")
    # It did not wait for the prod job: it runs on default's idle machine.
    assert (oppo["state"], oppo["mode"], nodes(oppo)) == ("Running", "opportunistic", [CAROL])
    await submit(client, clock, "opportunistic-3-default.yaml")
    taken = await job(client, "default-test")
    assert (taken["state"], taken["mode"], nodes(taken)) == ("Running", "guaranteed", [CAROL])
    oppo = await job(client, "oppo")
    assert oppo["state"] == "Queued" and reasons(oppo)[-2:] == ["Preempted", "Queued"]
    prod = await job(client, "prod")
    assert (prod["state"], nodes(prod)) == ("Running", [DAN])
    assert "Preempted" not in reasons(prod)


async def test_gang_never_starts_one_replica_early(
    aiohttp_client: MakeClient, database_url: str
) -> None:
    client, clock = await start(aiohttp_client, database_url, "lab-2.yaml", "quota-one-vc.yaml")
    await submit(client, clock, "gang-1-one-node.yaml")
    assert (await job(client, "one-node"))["state"] == "Running"
    await submit(client, clock, "gang-2-two-nodes.yaml")
    # One GPU is free for the next ten minutes, yet no worker of the gang starts.
    for _ in range(3):
        await settle(client, clock, 3 * 60)
        gang = await job(client, "two-nodes")
        assert gang["state"] == "Queued" and gang["placement"] == []
        assert reasons(gang) == ["Queued"]
        assert list(await pending(client, "default")) == ["lab/two-nodes"]
    # one-node ends at 10 minutes; the gang then starts whole, on both machines.
    await settle(client, clock, 60 + 2 * INTERVAL)
    assert (await job(client, "one-node"))["state"] == "Succeeded"
    gang = await job(client, "two-nodes")
    assert gang["state"] == "Running"
    assert nodes(gang) == [CAROL, DAN]
    assert reasons(gang) == ["Queued", "Admitted", "Dispatched", "Running"]


async def test_incremental_job_starts_one_replica_now_and_the_other_later(
    aiohttp_client: MakeClient, database_url: str
) -> None:
    client, clock = await start(aiohttp_client, database_url, "lab-2.yaml", "quota-one-vc.yaml")
    await submit(client, clock, "incremental-1-one-node.yaml")
    (busy,) = nodes(await job(client, "one-node"))
    await submit(client, clock, "incremental-2-grow.yaml")
    grow = await job(client, "grow")
    assert grow["state"] == "Running"
    assert [p["node"] for p in grow["placement"]] == [{CAROL, DAN}.difference({busy}).pop()]
    assert "Grew" not in reasons(grow)
    # one-node ends at 10 minutes; then the job's second worker starts on the freed machine.
    await settle(client, clock, 600 + 2 * INTERVAL)
    assert (await job(client, "one-node"))["state"] == "Succeeded"
    grow = await job(client, "grow")
    assert grow["state"] == "Running"
    assert nodes(grow) == [CAROL, DAN]
    assert reasons(grow)[-1] == "Grew"
