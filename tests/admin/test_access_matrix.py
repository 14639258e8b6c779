"""Every route × every kind of caller: admin, the team's token, another team's, none, malformed."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleet.api.routes import ROUTES
from fleet.service.settings import POLICIES
from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import TOKENS
from tests.admin.conftest import YAML, Api

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
    Case("listJobEvents", "GET", lambda c: "/api/v1/job-events", READ),
    Case("getJob", "GET", lambda c: "/api/v1/jobs/team-a/seed", READ),
    Case(
        "cancelJob",
        "DELETE",
        lambda c: f"/api/v1/jobs/team-a/victim-{c}",
        {"admin": 202, "team-a": 202, "team-b": 403, "none": 401, "malformed": 401},
    ),
    Case("listPolicies", "GET", lambda c: "/api/v1/policies", READ),
    Case(
        "getPolicy",
        "GET",
        lambda c: "/api/v1/policies/team-a/seed",
        {"admin": 200, "team-a": 200, "team-b": 403, "none": 401, "malformed": 401},
    ),
    Case(
        "deletePolicy",
        "DELETE",
        lambda c: f"/api/v1/policies/team-a/victim-{c}",
        {"admin": 200, "team-a": 200, "team-b": 403, "none": 401, "malformed": 401},
    ),
    Case("listQueues", "GET", lambda c: "/api/v1/queues", READ),
    Case("getHistory", "GET", lambda c: "/api/v1/history?series=gpus", READ),
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


# Namespaces ---------------------------------------------------------------------------
#
# A namespace belongs to one leaf (team-tree.yaml: team-a lists team-a and default,
# team-b lists team-b, kube-system is listed by no leaf).  A team token acts only in
# its leaves' namespaces, on any job there, whoever submitted it.

NAMESPACE_CALLERS = ("admin", "team-a", "team-b")


@dataclass(frozen=True)
class NamespaceCase:
    id: str
    namespace: str
    #: ``schedulingPolicy.queue`` of the submitted job (None: left out)
    queue: str | None
    #: caller -> status of a submission
    submit: dict[str, int]
    #: caller -> status of cancelling (and of reading the documents of) a job an
    #: admin submitted there; None when no job can be there
    cancel: dict[str, int] | None


NAMESPACE_CASES = [
    NamespaceCase(
        "own-namespace",
        "team-a",
        None,
        {"admin": 201, "team-a": 201, "team-b": 403},
        {"admin": 202, "team-a": 202, "team-b": 403},
    ),
    NamespaceCase(
        "own-second-namespace",
        "default",
        None,
        {"admin": 201, "team-a": 201, "team-b": 403},
        {"admin": 202, "team-a": 202, "team-b": 403},
    ),
    NamespaceCase(
        "own-queue-named",
        "team-a",
        "team-a",
        {"admin": 201, "team-a": 201, "team-b": 403},
        None,
    ),
    NamespaceCase(
        "another-teams-namespace",
        "team-b",
        None,
        {"admin": 201, "team-a": 403, "team-b": 201},
        {"admin": 202, "team-a": 403, "team-b": 202},
    ),
    # The attack: naming one's own leaf to put a job into another team's namespace.
    NamespaceCase(
        "another-teams-namespace-own-queue-named",
        "team-b",
        "team-a",
        dict.fromkeys(NAMESPACE_CALLERS, 422),
        None,
    ),
    NamespaceCase(
        "a-namespace-no-leaf-lists",
        "kube-system",
        None,
        dict.fromkeys(NAMESPACE_CALLERS, 422),
        None,
    ),
    NamespaceCase(
        "a-namespace-no-leaf-lists-own-queue-named",
        "kube-system",
        "team-a",
        dict.fromkeys(NAMESPACE_CALLERS, 422),
        None,
    ),
]


def test_the_namespace_cases_are_unique() -> None:
    assert len({c.id for c in NAMESPACE_CASES}) == len(NAMESPACE_CASES)


async def test_a_team_acts_only_in_its_own_namespaces_on_any_job_there(api: Api) -> None:
    """Route × caller × namespace: submit, cancel and read the submitted documents."""
    for case in NAMESPACE_CASES:
        if case.cancel is not None:
            for caller in NAMESPACE_CALLERS:  # submitted by the admin, acted on by caller
                job = pytorchjob(f"{case.id}-by-admin-{caller}", namespace=case.namespace)
                await api.call("POST", "/api/v1/submissions", data=job, headers=YAML, status=201)
    await api.settle()
    seen: dict[tuple[str, str, str], int] = {}
    expected: dict[tuple[str, str, str], int] = {}
    for case in NAMESPACE_CASES:
        for caller in NAMESPACE_CALLERS:
            name = f"{case.id}-{caller}"
            job = pytorchjob(name, namespace=case.namespace, queue=case.queue)
            resp = await api.client.post(
                "/api/v1/submissions", data=job, headers={**YAML, **headers(caller)}
            )
            seen[case.id, caller, "submit"] = resp.status
            expected[case.id, caller, "submit"] = case.submit[caller]
            if resp.status == 422:
                body = await resp.json()
                paths = {e["path"] for e in body["errors"]}
                wanted = "metadata.namespace" if case.namespace == "kube-system" else None
                assert paths == {wanted or "spec.runPolicy.schedulingPolicy.queue"}, body
            if resp.status == 403:
                detail = (await resp.json())["detail"]
                assert f"is in namespace {case.namespace}" in detail, detail
            if case.cancel is None:
                continue
            path = f"/api/v1/jobs/{case.namespace}/{case.id}-by-admin-{caller}"
            resp = await api.client.get(path + "/submitted", headers=headers(caller))
            seen[case.id, caller, "documents"] = resp.status
            expected[case.id, caller, "documents"] = 200 if case.cancel[caller] == 202 else 403
            resp = await api.client.get(path, headers=headers(caller))
            events = (await resp.json())["events"]
            seen[case.id, caller, "sees events"] = int(bool(events))
            expected[case.id, caller, "sees events"] = int(case.cancel[caller] == 202)
            resp = await api.client.delete(path, headers=headers(caller))
            seen[case.id, caller, "cancel"] = resp.status
            expected[case.id, caller, "cancel"] = case.cancel[caller]
    assert seen == expected


async def test_a_team_follows_its_namespaces_when_the_tree_moves_them(api: Api) -> None:
    """The rule reads the tree in force: a namespace moved to team-b's leaf is team-b's."""
    await api.call(
        "POST", "/api/v1/submissions", data=pytorchjob("moving"), headers=YAML, status=201
    )
    await api.settle()  # running: its leaf stays, its namespace moves
    await api.call(
        "PATCH",
        "/api/v1/quota-tree/nodes/team-a",
        json={"namespaces": ["default"]},
        status=200,
    )
    await api.call(
        "PATCH",
        "/api/v1/quota-tree/nodes/team-b",
        json={"namespaces": ["team-b", "team-a"]},
        status=200,
    )
    await api.settle()
    await api.call("DELETE", "/api/v1/jobs/team-a/moving", "team-a", status=403)
    await api.call("DELETE", "/api/v1/jobs/team-a/moving", "team-b", status=202)
    who = await api.call("GET", "/api/v1/whoami", "team-b", status=200)
    assert who["namespaces"] == ["team-a", "team-b"]
