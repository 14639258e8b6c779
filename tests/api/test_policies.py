"""Standing PropagationPolicies through the API: stored by a submission, selecting later jobs.

A submission's policies are stored (all of them), a submission of policies
alone included; a later job that arrives without a policy is governed by a
stored one of its namespace (also when a parse worker reads it), its own
submission's policy winning over a stored one; the job's detail says which
policy applied and where it came from.  A job governed by a stored policy is
hashed alone, so it is the same job after the policy was edited.  A team
token stores, reads, lists and deletes policies in its own namespaces only;
the policy routes list, show and delete them, and every write is audited.
A submission's policies are stored in the transaction that stores its jobs
and its audit record, and not at all when it is refused for a taken name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import bearer, write_tokens_file
from tests.admin.conftest import YAML, Client
from tests.databases import WriteTransactions, sqlite_url

PYTORCHJOBS = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}]


def policy(name: str = "standing", namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    """A Karmada PropagationPolicy selecting every PyTorchJob of ``namespace``."""
    return {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"resourceSelectors": PYTORCHJOBS, **spec},
    }


def job_alone(name: str, namespace: str = "team-a") -> dict[str, Any]:
    """The PyTorchJob ``namespace/name`` without a policy."""
    _, job = yaml.safe_load_all(pytorchjob(name, namespace=namespace, duration="1h"))
    assert isinstance(job, dict)
    return job


def app_of(tmp_path: Path, **kw: Any) -> web.Application:
    settings = running.settings(
        sqlite_url(tmp_path), tokens_file=write_tokens_file(tmp_path / "tokens.yaml"), **kw
    )
    return create_app(settings, clock=VirtualClock(1_000.0))


@pytest.fixture
async def client(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], tmp_path: Path
) -> Client:
    return await aiohttp_client(app_of(tmp_path))


async def submit(client: Client, who: str, *docs: dict[str, Any] | str) -> tuple[int, Any]:
    text = "---\n".join(d if isinstance(d, str) else yaml.safe_dump(d) for d in docs)
    resp = await client.post(
        "/api/v1/submissions", data=text.encode(), headers={**YAML, **bearer(who)}
    )
    return resp.status, await resp.json()


async def call(client: Client, method: str, path: str, who: str = "admin") -> tuple[int, Any]:
    resp = await client.request(method, path, headers=bearer(who))
    return resp.status, await resp.json()


@pytest.mark.parametrize("parse_processes", [0, 1], ids=["in-process", "parse-worker"])
async def test_a_policy_alone_is_stored_and_governs_later_jobs_of_its_namespace(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    tmp_path: Path,
    parse_processes: int,
) -> None:
    client = await aiohttp_client(app_of(tmp_path, parse_processes=parse_processes))
    status, body = await submit(client, "team-a", job_alone("early"))
    assert status == 422, body
    (error,) = body["errors"]
    assert "store one with `fleet apply -f policy.yaml`" in error["message"]

    status, body = await submit(client, "team-a", policy(suspension={"scheduling": True}))
    assert status == 201, body
    assert body == {"jobs": [], "policies": ["team-a/standing"]}
    # The same policy again changes nothing.
    status, body = await submit(client, "team-a", policy(suspension={"scheduling": True}))
    assert status == 200, body

    status, body = await submit(client, "team-a", job_alone("later"))
    assert status == 201, body
    assert [(j["name"], j["created"]) for j in body["jobs"]] == [("later", True)]
    assert "policies" not in body
    status, job = await call(client, "GET", "/api/v1/jobs/team-a/later")
    assert job["policy"] == {"namespace": "team-a", "name": "standing", "source": "stored"}
    assert job["suspended"] is False  # scheduling queues it, as it does every job
    resp = await client.get("/api/v1/jobs/team-a/later/submitted", headers=bearer("admin"))
    documents = list(yaml.safe_load_all(await resp.text()))
    assert documents[0] == policy(suspension={"scheduling": True})


async def test_a_submissions_own_policy_wins_over_a_stored_one(client: Client) -> None:
    assert (await submit(client, "team-a", policy(priority=100)))[0] == 201
    status, body = await submit(client, "team-a", pytorchjob("own", duration="1h"))
    assert status == 201, body
    assert body["policies"] == ["team-a/own"]
    _, job = await call(client, "GET", "/api/v1/jobs/team-a/own")
    assert job["policy"] == {"namespace": "team-a", "name": "own", "source": "submission"}


async def test_a_job_is_the_same_job_after_its_stored_policy_was_edited(client: Client) -> None:
    assert (await submit(client, "team-a", policy()))[0] == 201
    status, body = await submit(client, "team-a", job_alone("steady"))
    assert status == 201, body
    uid = body["jobs"][0]["uid"]
    assert (await submit(client, "team-a", policy(priority=5)))[0] == 201
    status, body = await submit(client, "team-a", job_alone("steady"))
    assert status == 200, body  # not a 409: the job's spec is the job alone
    assert body["jobs"][0]["uid"] == uid and body["jobs"][0]["created"] is False


async def test_a_team_stores_reads_and_deletes_policies_in_its_own_namespaces_only(
    client: Client,
) -> None:
    status, body = await submit(client, "team-b", policy())
    assert status == 403, body
    assert "PropagationPolicy team-a/standing is in namespace team-a" in body["detail"]
    assert (await call(client, "GET", "/api/v1/policies"))[1] == {"items": []}

    assert (await submit(client, "team-a", policy()))[0] == 201
    assert (await submit(client, "team-b", policy("theirs", "team-b")))[0] == 201
    _, listed = await call(client, "GET", "/api/v1/policies", "team-b")
    assert [(p["namespace"], p["name"]) for p in listed["items"]] == [("team-b", "theirs")]
    _, listed = await call(client, "GET", "/api/v1/policies")
    assert [(p["namespace"], p["name"]) for p in listed["items"]] == [
        ("team-a", "standing"),
        ("team-b", "theirs"),
    ]
    assert (await call(client, "GET", "/api/v1/policies/team-a/standing", "team-b"))[0] == 403
    assert (await call(client, "DELETE", "/api/v1/policies/team-a/standing", "team-b"))[0] == 403
    assert (await call(client, "GET", "/api/v1/policies/team-a/standing", "team-a"))[0] == 200


async def test_the_policy_routes_list_show_and_delete(client: Client) -> None:
    labelled = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "labelSelector": {"matchLabels": {"tier": "gold"}},
    }
    named = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "tf"}
    document = policy(priority=3)
    document["spec"]["resourceSelectors"] = [*PYTORCHJOBS, labelled, named]
    assert (await submit(client, "team-a", document))[0] == 201
    status, listed = await call(client, "GET", "/api/v1/policies")
    assert status == 200
    (item,) = listed["items"]
    assert {k: v for k, v in item.items() if k not in ("created", "updated")} == {
        "namespace": "team-a",
        "name": "standing",
        "apiVersion": "policy.karmada.io/v1alpha1",
        "priority": 3,
        "selects": ["PyTorchJob", "PyTorchJob{tier=gold}", "TFJob/tf"],
        "author": "ci-a",
    }
    assert item["created"].startswith("1970-01-01T00:16:40")
    status, shown = await call(client, "GET", "/api/v1/policies/team-a/standing")
    assert (status, shown) == (200, document)

    status, deleted = await call(client, "DELETE", "/api/v1/policies/team-a/standing", "team-a")
    assert status == 200 and deleted["name"] == "standing"
    assert (await call(client, "DELETE", "/api/v1/policies/team-a/standing"))[0] == 404
    assert (await call(client, "GET", "/api/v1/policies/team-a/standing"))[0] == 404
    assert (await call(client, "GET", "/api/v1/policies"))[1] == {"items": []}
    # Deleted, it governs no later job.
    assert (await submit(client, "team-a", job_alone("orphan")))[0] == 422

    _, audit = await call(client, "GET", "/api/v1/audit?kind=policy")
    assert [(a["operation"], a["status"], a["actor"]) for a in audit["items"]] == [
        ("deletePolicy", 404, "ops"),
        ("deletePolicy", 200, "ci-a"),
    ]
    _, audit = await call(client, "GET", "/api/v1/audit?kind=submission")
    assert [(a["status"], a["actor"]) for a in audit["items"]][-1] == (201, "ci-a")


async def test_stored_policies_outlive_a_restart(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], tmp_path: Path
) -> None:
    first = await aiohttp_client(app_of(tmp_path))
    assert (await submit(first, "team-a", policy()))[0] == 201
    await first.close()
    again = await aiohttp_client(app_of(tmp_path))
    status, body = await submit(again, "team-a", job_alone("after"))
    assert status == 201, body


async def test_a_submission_and_its_policies_are_one_write_transaction(client: Client) -> None:
    svc = client.app[keys.SERVICE]
    transactions = WriteTransactions(svc.db.writer)
    try:
        batches = svc.intake.batches
        status, body = await submit(client, "team-a", pytorchjob("one", duration="1h"))
        assert status == 201, body
        assert svc.intake.batches == batches + 1
        (stored,) = transactions.writing("policies")
        assert {"jobs", "job_events", "audit"} <= stored
        held = svc.policies
        assert "team-a/one" in held
        # The same policy again is not written, and the service keeps its mapping.
        status, body = await submit(client, "team-a", pytorchjob("one", duration="1h"))
        assert status == 200, body
        assert len(transactions.writing("policies")) == 1 and svc.policies is held
    finally:
        transactions.close()


async def test_a_submission_refused_for_a_taken_name_stores_none_of_its_policies(
    client: Client,
) -> None:
    assert (await submit(client, "team-a", pytorchjob("taken", duration="1h")))[0] == 201
    changed = pytorchjob("taken", gpus=2, duration="1h")
    status, body = await submit(client, "team-a", policy("would-be"), changed)
    assert status == 409, body
    assert (await call(client, "GET", "/api/v1/policies/team-a/would-be"))[0] == 404
    assert "team-a/would-be" not in client.app[keys.SERVICE].policies
    _, audit = await call(client, "GET", "/api/v1/audit?kind=submission")
    assert [a["status"] for a in audit["items"]] == [409, 201]
