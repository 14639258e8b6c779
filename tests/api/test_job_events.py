"""``GET /api/v1/job-events`` and the job list's added fields (``fleet get events``, ``get jobs``).

The newest events across jobs, newest first: of one namespace or one job when
asked, and of a team token's own namespaces only.  The job list shows each
job's GPUs, labels and user.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import bearer
from tests.admin.conftest import YAML, Client
from tests.api.test_policies import app_of, call


@pytest.fixture
async def client(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], tmp_path: Path
) -> Client:
    client = await aiohttp_client(app_of(tmp_path))
    for name, namespace in (("ev-a", "team-a"), ("ev-b", "team-b")):
        policy, job = yaml.safe_load_all(pytorchjob(name, namespace=namespace, gpus=2))
        job["metadata"]["labels"] = {"app": name}
        text = yaml.safe_dump(policy) + "---\n" + yaml.safe_dump(job)
        resp = await client.post(
            "/api/v1/submissions", data=text.encode(), headers={**YAML, **bearer("admin")}
        )
        assert resp.status == 201, await resp.text()
    return client


def shown(body: dict[str, list[dict[str, str]]]) -> set[tuple[str, str, str]]:
    return {(e["namespace"], e["name"], e["reason"]) for e in body["items"]}


async def test_events_across_jobs_of_a_namespace_and_of_a_job(client: Client) -> None:
    status, body = await call(client, "GET", "/api/v1/job-events")
    assert status == 200, body
    assert {("team-a", "ev-a", "Queued"), ("team-b", "ev-b", "Queued")} <= shown(body)
    item = body["items"][0]
    assert set(item) == {"namespace", "name", "uid", "time", "type", "reason", "message"}
    _, body = await call(client, "GET", "/api/v1/job-events?namespace=team-b")
    assert {n for _, n, _ in shown(body)} == {"ev-b"}
    _, body = await call(client, "GET", "/api/v1/job-events?job=team-a/ev-a")
    assert {n for _, n, _ in shown(body)} == {"ev-a"}
    status, body = await call(client, "GET", "/api/v1/job-events?job=ev-a")
    assert status == 400


async def test_a_team_token_sees_its_own_namespaces_events_only(client: Client) -> None:
    _, body = await call(client, "GET", "/api/v1/job-events", "team-b")
    assert {ns for ns, _, _ in shown(body)} == {"team-b"}
    _, body = await call(client, "GET", "/api/v1/job-events?job=team-a/ev-a", "team-b")
    assert body == {"items": []}


async def test_the_job_list_shows_gpus_and_labels(client: Client) -> None:
    _, body = await call(client, "GET", "/api/v1/jobs?namespace=team-a")
    (job,) = body["items"]
    assert (job["gpus"], job["labels"]) == (2, {"app": "ev-a"})
