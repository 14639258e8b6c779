"""Training runtimes through the API: an administrator registers them, TrainJobs name them.

A runtime travels in ``POST /api/v1/submissions`` like any document; only an
admin token may send one (a team token is refused with 403 and nothing is
stored); once registered it is stored and a TrainJob of a later submission
that names it is accepted, also when a parse worker reads that submission;
one naming no registered runtime is a 422 at ``spec.runtimeRef.name``.  The
registered runtimes are read back from the database when the service
starts again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.tokens import bearer, write_tokens_file
from tests import paths
from tests.admin.conftest import YAML, Client
from tests.databases import sqlite_url

TRAINJOB = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"}
RUNTIME = (paths.KIND_EXAMPLES / "trainer-runtime-torch-distributed.yaml").read_text()


def trainjob(name: str = "tj", runtime: str = "torch-distributed") -> str:
    policy = {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"resourceSelectors": [{**TRAINJOB, "name": name}]},
    }
    job = {
        **TRAINJOB,
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}},
        },
    }
    return yaml.safe_dump_all([policy, job])


def app_of(tmp_path: Path, **kw: Any) -> web.Application:
    settings = running.settings(
        sqlite_url(tmp_path), tokens_file=write_tokens_file(tmp_path / "tokens.yaml"), **kw
    )
    return create_app(settings, clock=VirtualClock(1_000.0))


@pytest.fixture(params=[0, 1], ids=["in-process", "parse-worker"])
async def client(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Client:
    return await aiohttp_client(app_of(tmp_path, parse_processes=request.param))


async def submit(client: Client, text: str, who: str) -> tuple[int, Any]:
    resp = await client.post(
        "/api/v1/submissions", data=text.encode(), headers={**YAML, **bearer(who)}
    )
    return resp.status, await resp.json()


async def test_an_admin_registers_a_runtime_and_a_trainjob_naming_it_is_accepted(
    client: Client,
) -> None:
    status, body = await submit(client, trainjob(), "team-a")
    assert status == 422, body
    (error,) = body["errors"]
    assert error["path"] == "spec.runtimeRef.name"
    assert "no ClusterTrainingRuntime 'torch-distributed' is registered" in error["message"]

    status, body = await submit(client, RUNTIME, "admin")
    assert status == 201, body
    assert body == {"jobs": [], "runtimes": ["ClusterTrainingRuntime/torch-distributed"]}

    status, body = await submit(client, trainjob(), "team-a")
    assert status == 201, body
    assert [(j["name"], j["state"]) for j in body["jobs"]] == [("tj", "Queued")]
    assert "runtimes" not in body


async def test_a_team_token_cannot_register_a_runtime(client: Client) -> None:
    status, body = await submit(client, RUNTIME + "---\n" + trainjob(), "team-a")
    assert status == 403, body
    assert "only an administrator registers training runtimes" in body["detail"]
    status, body = await submit(client, trainjob(), "team-a")
    assert status == 422, body  # nothing was registered


async def test_registered_runtimes_outlive_a_restart(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], tmp_path: Path
) -> None:
    first = await aiohttp_client(app_of(tmp_path))
    assert (await submit(first, RUNTIME, "admin"))[0] == 201
    await first.close()
    again = await aiohttp_client(app_of(tmp_path))
    status, body = await submit(again, trainjob(), "team-a")
    assert status == 201, body
