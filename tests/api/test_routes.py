"""The HTTP API end to end: the real app, a real database, simulated members, a virtual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.service.settings import POLICIES
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.running import settings
from tests.databases import fresh_postgres_database

Client = TestClient[web.Request, web.Application]
YAML = {"Content-Type": "application/yaml"}
EXAMPLES = (POLICIES / "jobs" / "examples.yaml").read_text(encoding="utf-8")


@pytest.fixture
async def api(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], database_url: str
) -> AsyncIterator[tuple[Client, VirtualClock]]:
    clock = VirtualClock(1_000.0)
    app = create_app(settings(database_url), clock=clock)
    client = await aiohttp_client(app)
    yield client, clock


async def settle(client: Client, clock: VirtualClock, seconds: float = 0.0) -> None:
    await running.settle(client.app[keys.SERVICE].loop, clock, seconds)


async def ok(resp: Any, status: int = 200) -> Any:
    body = await resp.json()
    assert resp.status == status, body
    return body


async def problem(resp: Any, status: int) -> dict[str, Any]:
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/problem+json"
    body: dict[str, Any] = await resp.json()
    assert body["status"] == status
    return body


async def test_the_example_submission_is_queued_admitted_and_runs(
    api: tuple[Client, VirtualClock],
) -> None:
    client, clock = api
    body = await ok(await client.post("/api/v1/submissions", data=EXAMPLES, headers=YAML), 201)
    names = [j["name"] for j in body["jobs"]]
    assert names == ["pytorch-test", "llm-pretrain", "elastic-imagenet", "hparam-sweep"]
    assert {j["state"] for j in body["jobs"]} == {"Queued"}
    await settle(client, clock)
    job = await ok(await client.get("/api/v1/jobs/team-a/pytorch-test"))
    assert job["state"] == "Running"
    assert job["cluster"] in {"east", "west"}  # the policy allows production clusters only
    assert [p["replica"] for p in job["placement"]] == ["Master-0", "Worker-0", "Worker-1"]
    assert [e["reason"] for e in job["events"]] == ["Queued", "Admitted", "Dispatched", "Running"]
    assert job["mode"] == "guaranteed"
    await settle(client, clock, 301)  # fleet.io/simulated-duration: 5m
    job = await ok(await client.get("/api/v1/jobs/team-a/pytorch-test"))
    assert job["state"] == "Succeeded"


async def test_resubmitting_is_idempotent_and_another_spec_is_a_conflict(
    api: tuple[Client, VirtualClock],
) -> None:
    client, _ = api
    first = await ok(
        await client.post("/api/v1/submissions", data=pytorchjob("a"), headers=YAML), 201
    )
    again = await ok(
        await client.post("/api/v1/submissions", data=pytorchjob("a"), headers=YAML), 200
    )
    assert again["jobs"][0]["uid"] == first["jobs"][0]["uid"]
    body = await problem(
        await client.post("/api/v1/submissions", data=pytorchjob("a", gpus=2), headers=YAML), 409
    )
    assert "team-a/a" in body["detail"]


@pytest.mark.parametrize(
    ("text", "status", "needle"),
    [
        pytest.param("a: [1, 2", 422, "", id="malformed-yaml"),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", 422, "Pod", id="unknown-kind"
        ),
        pytest.param(pytorchjob("big", workers=1, gpus=64), 422, "", id="larger-than-any-cluster"),
        pytest.param(pytorchjob("lost", namespace="nowhere"), 422, "nowhere", id="no-queue"),
        pytest.param(
            pytorchjob("nl", namespace="team-a\n"),
            422,
            "'path': 'metadata.namespace'",
            id="namespace-with-a-trailing-newline",
        ),
        pytest.param(
            pytorchjob("nl\n"), 422, "'path': 'metadata.name'", id="name-with-a-trailing-newline"
        ),
    ],
)
async def test_bad_submissions_are_rejected_whole_with_field_errors(
    api: tuple[Client, VirtualClock], text: str, status: int, needle: str
) -> None:
    client, _ = api
    body = await problem(await client.post("/api/v1/submissions", data=text, headers=YAML), status)
    assert body["errors"], body
    assert needle in str(body)
    listed = await ok(await client.get("/api/v1/jobs"))
    assert listed["items"] == []


async def test_a_job_that_places_its_own_pods_is_refused_and_nothing_is_stored(
    api: tuple[Client, VirtualClock],
) -> None:
    client, clock = api
    policy, job = yaml.safe_load_all(pytorchjob("placed"))
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeName"] = "gpu-node-3"
    text = yaml.safe_dump_all([policy, job])
    body = await problem(await client.post("/api/v1/submissions", data=text, headers=YAML), 422)
    assert [(e["kind"], e["name"], e["path"], e["message"]) for e in body["errors"]] == [
        (
            "PyTorchJob",
            "team-a/placed",
            "spec.pytorchReplicaSpecs.Worker.template.spec.nodeName",
            "only Fleet places pods; remove it",
        )
    ]
    await settle(client, clock)
    listed = await ok(await client.get("/api/v1/jobs"))
    assert listed["items"] == []
    await problem(await client.get("/api/v1/jobs/team-a/placed"), 404)


async def test_a_submission_needs_yaml(api: tuple[Client, VirtualClock]) -> None:
    client, _ = api
    await problem(
        await client.post(
            "/api/v1/submissions", data=b"{}", headers={"Content-Type": "application/json"}
        ),
        415,
    )


async def test_jobs_are_listed_in_submission_order_page_by_page(
    api: tuple[Client, VirtualClock],
) -> None:
    client, _ = api
    for n in range(5):
        await ok(
            await client.post("/api/v1/submissions", data=pytorchjob(f"j{n}"), headers=YAML), 201
        )
    seen: list[str] = []
    url = "/api/v1/jobs?limit=2"
    while True:
        page = await ok(await client.get(url))
        seen += [j["name"] for j in page["items"]]
        if not page.get("continue"):
            break
        url = f"/api/v1/jobs?limit=2&continue={page['continue']}"
    assert seen == [f"j{n}" for n in range(5)]
    filtered = await ok(await client.get("/api/v1/jobs?queue=team-a&namespace=team-a"))
    assert len(filtered["items"]) == 5
    assert (await ok(await client.get("/api/v1/jobs?queue=team-b")))["items"] == []
    await problem(await client.get("/api/v1/jobs?limit=0"), 400)
    await problem(await client.get("/api/v1/jobs?continue=garbage!"), 400)
    await problem(await client.get("/api/v1/jobs?state=Sleeping"), 400)


async def test_cancelling_a_running_job_stops_it_in_its_member(
    api: tuple[Client, VirtualClock],
) -> None:
    client, clock = api
    await ok(
        await client.post("/api/v1/submissions", data=pytorchjob("c", duration="1h"), headers=YAML),
        201,
    )
    await settle(client, clock)
    assert (await ok(await client.get("/api/v1/jobs/team-a/c")))["state"] == "Running"
    await ok(await client.delete("/api/v1/jobs/team-a/c"), 202)
    await settle(client, clock)
    job = await ok(await client.get("/api/v1/jobs/team-a/c"))
    assert job["state"] == "Cancelled"
    members = client.app[keys.SERVICE].loop.members
    assert all("team-a/c" not in m.running() for m in members.values())
    await problem(await client.delete("/api/v1/jobs/team-a/c"), 409)
    await problem(await client.get("/api/v1/jobs/team-a/nobody"), 404)


async def submit(client: Client, text: str, status: int) -> dict[str, Any]:
    body: dict[str, Any] = await ok(
        await client.post("/api/v1/submissions", data=text, headers=YAML), status
    )
    return body


@pytest.mark.parametrize(
    ("ended", "again", "status", "new_run"),
    [
        pytest.param("Cancelled", "same", 201, True, id="cancelled-same-spec"),
        pytest.param("Cancelled", "other", 201, True, id="cancelled-other-spec"),
        pytest.param("Succeeded", "other", 201, True, id="succeeded-other-spec"),
        pytest.param("Failed", "other", 201, True, id="failed-other-spec"),
        pytest.param("Succeeded", "same", 200, False, id="succeeded-same-spec"),
        pytest.param("Running", "same", 200, False, id="live-same-spec"),
        pytest.param("Running", "other", 409, False, id="live-other-spec"),
    ],
)
async def test_a_name_comes_back_once_its_job_is_deleted_or_ended(
    api: tuple[Client, VirtualClock], ended: str, again: str, status: int, new_run: bool
) -> None:
    """As ``kubectl delete`` frees a name: a cancelled job's name takes any spec as a new
    run, an ended job's another spec; the old run stays findable by its uid."""
    client, clock = api
    outcome = "Failed" if ended == "Failed" else None
    duration = "1h" if ended in ("Cancelled", "Running") else "1m"
    first = pytorchjob("again", duration=duration, outcome=outcome)
    old = (await submit(client, first, 201))["jobs"][0]
    await settle(client, clock)
    if ended == "Cancelled":
        await ok(await client.delete("/api/v1/jobs/team-a/again"), 202)
    await settle(client, clock, 0 if ended in ("Cancelled", "Running") else 120)
    assert (await ok(await client.get("/api/v1/jobs/team-a/again")))["state"] == ended
    text = first if again == "same" else pytorchjob("again", duration="2h", gpus=2)
    if status == 409:
        await problem(await client.post("/api/v1/submissions", data=text, headers=YAML), status)
        return
    (answer,) = (await submit(client, text, status))["jobs"]
    assert (answer["uid"] != old["uid"]) is new_run
    current = await ok(await client.get("/api/v1/jobs/team-a/again"))
    assert current["uid"] == answer["uid"]
    # The loop may take the new run up between the answer and this read.
    live = ("Queued", "Admitted", "Dispatched", "Running")
    assert current["state"] in (live if new_run else (ended,)), current["state"]
    listed = await ok(await client.get("/api/v1/jobs?namespace=team-a"))
    assert [j["uid"] for j in listed["items"]] == [answer["uid"]]  # current runs only
    if not new_run:
        return
    await settle(client, clock)
    now = await ok(await client.get("/api/v1/jobs/team-a/again"))
    assert now["state"] == "Running", (now["reason"], now["events"])
    earlier = await ok(await client.get(f"/api/v1/jobs?uid={old['uid']}"))
    assert [(j["uid"], j["state"]) for j in earlier["items"]] == [(old["uid"], ended)]
    run = await ok(await client.get(f"/api/v1/jobs/team-a/again?uid={old['uid']}"))
    assert run["state"] == ended and run["events"][0]["reason"] == "Queued"
    assert run["events"][-1]["reason"] == ended
    await problem(await client.get("/api/v1/jobs/team-a/other?uid=" + old["uid"]), 404)
    # the new run is the one a cancel reaches
    await ok(await client.delete("/api/v1/jobs/team-a/again"), 202)
    await settle(client, clock)
    assert (await ok(await client.get(f"/api/v1/jobs?uid={old['uid']}")))["items"][0][
        "state"
    ] == ended


async def test_queues_show_usage_and_pending_jobs_in_order_with_reasons(
    api: tuple[Client, VirtualClock],
) -> None:
    client, clock = api
    # team-a's max is 32 GPUs: the third 16-GPU job waits, and says why.
    for n in range(3):
        await ok(
            await client.post(
                "/api/v1/submissions",
                data=pytorchjob(f"q{n}", workers=2, gpus=8, duration="1h"),
                headers=YAML,
            ),
            201,
        )
    await settle(client, clock)
    queues = {q["name"]: q for q in (await ok(await client.get("/api/v1/queues")))["items"]}
    assert queues["team-a"]["used"]["nvidia.com/gpu"] == "32"
    assert queues["team-a"]["pending"] == 1 and queues["research"]["pending"] == 1
    detail = await ok(await client.get("/api/v1/queues/team-a"))
    (waiting,) = detail["pending"]
    assert waiting["job"] == "team-a/q2" and waiting["position"] == 1
    assert "is full: 32 of 32 GPUs used" in waiting["reason"]
    await problem(await client.get("/api/v1/queues/nope"), 404)
    job = await ok(await client.get("/api/v1/jobs/team-a/q2"))
    assert job["reason"] == waiting["reason"]


async def test_queues_carry_their_fair_share_rank_among_siblings_and_why(
    api: tuple[Client, VirtualClock],
) -> None:
    client, clock = api
    for n in range(2):
        await ok(
            await client.post(
                "/api/v1/submissions",
                data=pytorchjob(f"big{n}", workers=2, gpus=8, duration="1h"),
                headers=YAML,
            ),
            201,
        )
    await settle(client, clock)
    queues = {q["name"]: q for q in (await ok(await client.get("/api/v1/queues")))["items"]}
    assert "fairShare" not in queues["research"]  # not a leaf
    a, b = queues["team-a"]["fairShare"], queues["team-b"]["fairShare"]
    assert (a["rank"], b["rank"], a["siblings"]) == (2, 1, 2)
    assert a["share"] == 2.0 and b["share"] == 0.0  # 32 GPUs used over a min of 16
    assert (a["weight"], a["halfLifeSeconds"], a["decayedUsage"]) == (1.0, 0.0, {})
    assert a["explanation"] == (
        "team-b borrows before team-a: 0 GPU in use over min 16 GPU against "
        "32 GPU in use over min 16 GPU"
    )
    detail = await ok(await client.get("/api/v1/queues/team-a"))
    assert detail["fairShare"] == a


async def test_tree_clusters_and_health(api: tuple[Client, VirtualClock]) -> None:
    client, _ = api
    resp = await client.get("/api/v1/quota-tree")
    assert resp.status == 200 and "ElasticQuotaTree" in await resp.text()
    clusters = (await ok(await client.get("/api/v1/clusters")))["items"]
    assert {c["name"]: c["gpus"]["total"] for c in clusters} == {"east": 24, "west": 16, "edge": 8}
    health = await ok(await client.get("/healthz"))
    assert health["status"] == "ok"
    # SQLite: this process schedules alone; PostgreSQL: it won the election alone.
    sqlite = client.app[keys.SERVICE].db.dialect == "sqlite"
    assert health["role"] == ("single" if sqlite else "leader")
    assert (health["term"] is None) is sqlite
    assert (await ok(await client.get("/readyz")))["ready"] is True
    await problem(await client.get("/no/such/route"), 404)


async def test_the_openapi_document_is_served(api: tuple[Client, VirtualClock]) -> None:
    client, _ = api
    document = await ok(await client.get("/api/v1/openapi.json"))
    assert document["openapi"].startswith("3.1")
    assert "/api/v1/submissions" in document["paths"]


async def test_a_body_over_the_limit_is_refused_before_it_is_read(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], tmp_path: Path
) -> None:
    app = create_app(
        settings(f"sqlite+aiosqlite:///{tmp_path}/f.db", max_body_bytes=1024),
        clock=VirtualClock(0.0),
    )
    client = await aiohttp_client(app)
    body = pytorchjob("big") + "#" * 2048 + "\n"
    resp = await client.post("/api/v1/submissions", data=body, headers=YAML)
    await problem(resp, 413)
    assert (await ok(await client.get("/api/v1/jobs")))["items"] == []


async def test_healthz_shows_the_leaders_address_without_its_password(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], postgres_url: str
) -> None:
    async with fresh_postgres_database(postgres_url) as url:
        address = "http://ops:hunter2@127.0.0.1:8080"
        app = create_app(settings(url, advertise_url=address), clock=VirtualClock(1_000.0))
        client = await aiohttp_client(app)
        resp = await client.get("/healthz")
        text = await resp.text()
        assert resp.status == 200 and "hunter2" not in text
        assert (await resp.json())["leader"] == "http://ops:***@127.0.0.1:8080"
        await client.close()
