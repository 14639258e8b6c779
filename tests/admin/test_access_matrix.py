"""Every route × every kind of caller: admin, the team's token, another team's, none, malformed."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleet.api.openapi import ROUTES
from fleet.settings import POLICIES
from tests.admin.conftest import TOKENS, YAML, Api
from tests.service.helpers import pytorchjob

CALLERS = ("admin", "team-a", "team-b", "none", "malformed")
TREE = (POLICIES / "quota" / "team-tree.yaml").read_text(encoding="utf-8")
EXTRA = """
apiVersion: fleet.io/v1alpha1
kind: MemberCluster
metadata: {name: extra}
spec: {simulated: true, cells: {physicalCluster: {cellTypes: {N: {childCellType: GPU,
  childCellNumber: 8, isNodeLevel: true}}, physicalCells: [{cellType: N, cellAddress: x0}]}}}
"""
_names = itertools.count()


def _job(caller: str) -> str:
    return f"m-{caller}-{next(_names)}"


@dataclass(frozen=True)
class Case:
    operation: str
    method: str
    #: caller -> path (a fresh job per caller where the call changes it)
    path: Callable[[str], str]
    statuses: dict[str, int]
    body: Callable[[str], dict[str, Any]] = lambda caller: {}


READ = {"admin": 200, "team-a": 200, "team-b": 200, "none": 401, "malformed": 401}
OPEN = dict.fromkeys(CALLERS, 200)
ADMIN = {"admin": 200, "team-a": 403, "team-b": 403, "none": 401, "malformed": 401}


def submission(caller: str) -> dict[str, Any]:
    return {"data": pytorchjob(_job(caller), namespace="team-a"), "headers": YAML}


CASES = [
    Case("liveness", "GET", lambda c: "/healthz", OPEN),
    Case("readiness", "GET", lambda c: "/readyz", OPEN),
    Case("openapi", "GET", lambda c: "/api/v1/openapi.json", OPEN),
    Case(
        "submitJobs",
        "POST",
        lambda c: "/api/v1/submissions",
        {"admin": 201, "team-a": 201, "team-b": 403, "none": 401, "malformed": 401},
        submission,
    ),
    Case("listJobs", "GET", lambda c: "/api/v1/jobs", READ),
    Case("getJob", "GET", lambda c: "/api/v1/jobs/team-a/seed", READ),
    Case(
        "cancelJob",
        "DELETE",
        lambda c: f"/api/v1/jobs/team-a/victim-{c}",
        {"admin": 202, "team-a": 202, "team-b": 403, "none": 401, "malformed": 401},
    ),
    Case("listQueues", "GET", lambda c: "/api/v1/queues", READ),
    Case("getQueue", "GET", lambda c: "/api/v1/queues/team-a", READ),
    Case("getQuotaTree", "GET", lambda c: "/api/v1/quota-tree", READ),
    Case(
        "replaceQuotaTree",
        "PUT",
        lambda c: "/api/v1/quota-tree?dryRun=All",
        ADMIN,
        lambda c: {"data": TREE, "headers": YAML},
    ),
    Case(
        "patchQuotaNode",
        "PATCH",
        lambda c: "/api/v1/quota-tree/nodes/team-a?dryRun=All",
        ADMIN,
        lambda c: {"json": {"max": {"nvidia.com/gpu": 16}}},
    ),
    Case("quotaTreeHistory", "GET", lambda c: "/api/v1/quota-tree/history", READ),
    Case(
        "simulateQuotaTree",
        "POST",
        lambda c: "/api/v1/quota-tree?dryRun=Simulate&horizon=3600",
        READ,
        lambda c: {"data": TREE, "headers": YAML},
    ),
    Case("listClusters", "GET", lambda c: "/api/v1/clusters", READ),
    Case(
        "putCluster",
        "PUT",
        lambda c: "/api/v1/clusters/extra",
        {"admin": 201, "team-a": 403, "team-b": 403, "none": 401, "malformed": 401},
        lambda c: {"data": EXTRA, "headers": YAML},
    ),
    Case(
        "deleteCluster",
        "DELETE",
        lambda c: "/api/v1/clusters/nope",
        {"admin": 404, "team-a": 403, "team-b": 403, "none": 401, "malformed": 401},
    ),
    Case(
        "setNodeHealth",
        "PUT",
        lambda c: "/api/v1/clusters/east/nodes/east-node-2/health",
        ADMIN,
        lambda c: {"json": {"healthy": True}},
    ),
    Case("listAudit", "GET", lambda c: "/api/v1/audit", ADMIN),
    Case("whoami", "GET", lambda c: "/api/v1/whoami", READ),
    Case("watchViews", "GET", lambda c: "/api/v1/events", READ),
    Case("getClusterCells", "GET", lambda c: "/api/v1/clusters/east/cells", READ),
    Case(
        "getSubmittedJob",
        "GET",
        lambda c: "/api/v1/jobs/team-a/seed/submitted",
        {"admin": 200, "team-a": 200, "team-b": 403, "none": 401, "malformed": 401},
    ),
]


def headers(caller: str) -> dict[str, str]:
    if caller == "none":
        return {}
    if caller == "malformed":
        return {"Authorization": "Bearer two words"}
    return {"Authorization": f"Bearer {TOKENS[caller]}"}


def test_the_matrix_covers_every_route() -> None:
    assert sorted(c.operation for c in CASES) == sorted(r.operation_id for r in ROUTES)


async def test_every_route_answers_every_caller_as_its_role_allows(api: Api) -> None:
    await api.call("POST", "/api/v1/submissions", data=pytorchjob("seed"), headers=YAML, status=201)
    for caller in CALLERS:
        await api.call(
            "POST",
            "/api/v1/submissions",
            data=pytorchjob(f"victim-{caller}"),
            headers=YAML,
            status=201,
        )
    await api.settle()
    seen: dict[tuple[str, str], int] = {}
    for case in CASES:
        for caller in CALLERS:
            kw = case.body(caller)
            sent = {**kw.pop("headers", {}), **headers(caller)}
            resp = await api.client.request(case.method, case.path(caller), headers=sent, **kw)
            seen[case.operation, caller] = resp.status
            if resp.status == 401:
                assert resp.headers["WWW-Authenticate"].startswith('Bearer realm="fleet"')
            if resp.status >= 400:
                assert resp.content_type == "application/problem+json"
    expected = {(c.operation, caller): c.statuses[caller] for c in CASES for caller in CALLERS}
    assert seen == expected


async def test_an_unknown_token_is_refused_as_invalid(api: Api) -> None:
    resp = await api.client.get(
        "/api/v1/queues", headers={"Authorization": "Bearer fleet_not-a-token"}
    )
    assert resp.status == 401
    assert 'error="invalid_token"' in resp.headers["WWW-Authenticate"]
    resp = await api.client.get("/api/v1/queues", headers={"Authorization": "Basic dXNlcg=="})
    assert resp.status == 401
    assert 'error="invalid_request"' in resp.headers["WWW-Authenticate"]
