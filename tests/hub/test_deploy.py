"""``deploy/hub`` on a real hub API server, driven with the real kubectl (no Fleet runs).

The CRDs install and are Established, and keep every field Fleet reads (ACK
One's in both policy groups, Fleet's own in the quota tree); the README's
install commands work; the walkthrough's tree, both policies and a PyTorchJob
apply; a Queue shaped as ``deploy/hub/README.md`` documents prints its
columns; ``fleet-hub`` can do what the README says and nothing more; a team's
Role is its namespace's only.  The offline tests check that the role, the
team's Role and the installed CRDs cover every workload kind Fleet runs.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.manifests.kinds.registry import KINDS
from fleet.manifests.models import PropagationPolicyModel
from tests.hub.cluster import HUB_DEPLOY, MEMBER_CRDS, Hub, Kubectl
from tests.kube.controlplane import DEPLOY as MEMBER_DEPLOY
from tests.paths import HUB as HUB_DATA
from tests.paths import ROOT

#: The ACK One walkthrough's policy and job (``policies/jobs/ack-walkthrough.yaml``).
WALKTHROUGH = ROOT / "policies" / "jobs" / "ack-walkthrough.yaml"

WALKTHROUGH_TREE = ROOT / "policies" / "quota" / "ack-example.yaml"
#: The hub's own kinds: (group, version, kind, plural).
HUB_KINDS = {
    ("policy.karmada.io", "v1alpha1", "PropagationPolicy", "propagationpolicies"),
    ("policy.one.alibabacloud.com", "v1alpha1", "PropagationPolicy", "propagationpolicies"),
    ("scheduling.sigs.k8s.io", "v1beta1", "ElasticQuotaTree", "elasticquotatrees"),
    ("scheduling.x-k8s.io", "v1alpha1", "Queue", "queues"),
}


def ok(out: Any) -> str:
    assert out.returncode == 0, f"kubectl failed ({out.returncode}): {out.stderr}{out.stdout}"
    return str(out.stdout)


def table(text: str) -> dict[str, dict[str, str]]:
    """kubectl's table, by the first column then by header (an empty cell is "")."""
    header, *lines = text.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    rows = {}
    for line in lines:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        rows[cells[0]] = dict(zip(names, cells, strict=True))
    return rows


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def hub_crds() -> list[dict[str, Any]]:
    return [d for p in sorted((HUB_DEPLOY / "crds").glob("*.yaml")) for d in documents(p)]


def workload_kinds() -> list[tuple[str, str]]:
    """(group, plural) of every workload kind Fleet runs."""
    return [(k.api_version.rpartition("/")[0], k.plural) for k in KINDS]


def rules(path: Path, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    found = [
        d
        for d in documents(path)
        if d["kind"] == kind and (namespace is None or d["metadata"].get("namespace") == namespace)
    ]
    assert len(found) == 1, f"{path.name}: {len(found)} {kind} in {namespace}"
    return list(found[0]["rules"])


def granted(rule_list: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    return {
        verb
        for r in rule_list
        if group in r["apiGroups"] and resource in r["resources"]
        for verb in r["verbs"]
    }


def get(kubectl: Kubectl, *args: str, user: str = "admin") -> Any:
    """``kubectl get ARGS -o json``, read."""
    return json.loads(ok(kubectl("get", *args, "-o", "json", user=user)))


def patch(
    kubectl: Kubectl, resource: str, namespace: str, body: object, *, user: str, kind: str = "merge"
) -> None:
    """``kubectl patch RESOURCE -n NAMESPACE`` as ``user``."""
    args = ("patch", *resource.split(), "-n", namespace, f"--type={kind}", "-p", json.dumps(body))
    ok(kubectl(*args, user=user))


def patch_status(hub: Hub, path: str, status: object) -> None:
    """Merge ``status`` into the object at API ``path`` through its /status, as Fleet."""
    body = {"status": status}
    hub.fleet.request("PATCH", path + "/status", body, content_type="application/merge-patch+json")


# Offline: the files cover every kind Fleet runs -------------------------------------


def test_hub_crds_are_the_four_kinds_of_fleet_objects() -> None:
    found = set()
    for crd in hub_crds():
        spec = crd["spec"]
        assert spec["scope"] == "Namespaced"
        for version in spec["versions"]:
            found.add(
                (spec["group"], version["name"], spec["names"]["kind"], spec["names"]["plural"])
            )
    assert found == HUB_KINDS


def test_the_hub_serves_every_workload_kind_with_a_status_subresource() -> None:
    """Every kind Fleet runs (but built-in batch/v1) has a CRD in MEMBER_CRDS, with /status."""
    served: dict[tuple[str, str], dict[str, Any]] = {}
    for name in MEMBER_CRDS:
        for crd in documents(MEMBER_DEPLOY / "crds" / name):
            for version in crd["spec"]["versions"]:
                served[
                    (f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])
                ] = version
    missing = []
    for kind in KINDS:
        if kind.api_version == "batch/v1":
            continue
        version = served.get((kind.api_version, kind.kind))
        if version is None:
            if kind.kind == "MPIJob":  # one MPIJob CRD only: they share a name
                continue
            missing.append(kind.kind)
        else:
            assert "status" in (version.get("subresources") or {}), kind.kind
    assert not missing
    assert sum(1 for name in MEMBER_CRDS if name.startswith("kubeflow.org_mpijobs")) == 1


def test_fleet_hub_role_covers_every_workload_kind() -> None:
    role = rules(HUB_DEPLOY / "rbac.yaml", "ClusterRole")
    for group, plural in workload_kinds():
        assert granted(role, group, plural) == {"get", "list", "watch", "create", "update", "patch"}
        assert granted(role, group, f"{plural}/status") == {"update", "patch"}


def test_team_role_covers_every_workload_kind_and_both_policy_groups() -> None:
    role = rules(HUB_DEPLOY / "team-role.yaml", "Role", "team-a")
    every = {"create", "get", "list", "watch", "update", "patch", "delete"}
    for group, plural in workload_kinds():
        assert granted(role, group, plural) == every, (group, plural)
        assert not granted(role, group, f"{plural}/status")
    for group in ("policy.karmada.io", "policy.one.alibabacloud.com"):
        assert granted(role, group, "propagationpolicies") == every


def test_the_hub_data_are_policies_fleet_accepts() -> None:
    policies = [
        d
        for path in (WALKTHROUGH, HUB_DATA / "karmada-policy.yaml")
        for d in documents(path)
        if d["kind"] == "PropagationPolicy"
    ]
    assert {d["apiVersion"] for d in policies} == {
        "policy.one.alibabacloud.com/v1alpha1",
        "policy.karmada.io/v1alpha1",
    }
    for document in policies:
        document["metadata"]["namespace"] = "team-a"
        assert PropagationPolicyModel.model_validate(document).problems() == []


# On the hub ---------------------------------------------------------------------------


def test_every_hub_crd_is_established(hub: Hub) -> None:
    for crd in hub_crds():
        name = crd["metadata"]["name"]
        found = hub.admin.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conditions = {c["type"]: c["status"] for c in found["status"]["conditions"]}
        assert conditions["Established"] == "True", name
        assert conditions["NamesAccepted"] == "True", name


def test_the_readme_install_commands_work(hub: Hub, kubectl: Kubectl) -> None:
    """Each ``kubectl apply`` line of deploy/hub/README.md, run again, succeeds (idempotent)."""
    text = (HUB_DEPLOY / "README.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("kubectl apply")]
    assert len(lines) == 3
    for line in lines:
        args = shlex.split(line)[1:]
        args = [str(ROOT / a) if a.startswith("deploy/") else a for a in args]
        ok(kubectl(*args))
    listed = re.findall(r"deploy/member/crds/(\S+\.yaml)", lines[1])
    assert sorted(listed) == sorted(MEMBER_CRDS)


def test_the_walkthrough_tree_applies_unpruned(hub: Hub, kubectl: Kubectl) -> None:
    tree = documents(WALKTHROUGH_TREE)[0]
    it = "elasticquotatree elasticquotatree"
    try:
        ok(kubectl("apply", "-f", str(WALKTHROUGH_TREE)))
        got = get(kubectl, "elasticquotatree", "-n", "kube-system")
        assert [i["metadata"]["name"] for i in got["items"]] == ["elasticquotatree"]
        assert got["items"][0]["spec"] == tree["spec"]
        # Fleet's own fields survive too, and Fleet writes the status (through /status).
        own = {"name": "root", "preemptMinRuntime": "10m", "min": {"cpu": 1}, "max": {"cpu": 1}}
        patch(kubectl, it, "kube-system", {"spec": {"root": own}}, user="admin")
        status = {"conditions": [{"type": "Accepted", "status": "True", "reason": "Valid"}]}
        tree_path = "/apis/scheduling.sigs.k8s.io/v1beta1/namespaces/kube-system/elasticquotatrees"
        patch_status(hub, f"{tree_path}/elasticquotatree", status)
        got = get(kubectl, *it.split(), "-n", "kube-system")
        assert got["spec"]["root"]["preemptMinRuntime"] == "10m"
        assert got["status"] == status
    finally:
        kubectl("delete", "-f", str(WALKTHROUGH_TREE), "--ignore-not-found")


def test_policies_of_both_groups_and_a_pytorchjob_apply(hub: Hub, kubectl: Kubectl) -> None:
    """As team-a: the walkthrough's policy and job, and Karmada's; nothing is pruned."""
    walkthrough = documents(WALKTHROUGH)
    karmada = documents(HUB_DATA / "karmada-policy.yaml")[0]
    # ACK One's fields in Karmada's group survive too (its upstream schema would prune them).
    karmada_ack = {
        **walkthrough[0],
        "apiVersion": "policy.karmada.io/v1alpha1",
        "metadata": {"name": "ack-fields"},
    }
    ack = "propagationpolicies.policy.one.alibabacloud.com"
    job = "pytorchjob pytorch-test"
    try:
        for path in (WALKTHROUGH, HUB_DATA / "karmada-policy.yaml"):
            ok(kubectl("apply", "-n", "team-a", "-f", str(path), user="team-a"))
        ok(
            kubectl(
                "apply", "-n", "team-a", "-f", "-", user="team-a", input=json.dumps(karmada_ack)
            )
        )

        got = get(kubectl, ack, "example-policy", "-n", "team-a", user="team-a")
        assert got["spec"] == walkthrough[0]["spec"]
        row = table(ok(kubectl("get", ack, "-n", "team-a", user="team-a")))["example-policy"]
        assert (row["SCHEDULING"], row["QUEUED"], row["PRIORITY"]) == ("Gang", "true", "")
        got = get(kubectl, "pp", "karmada-policy", "-n", "team-a", user="team-a")
        assert got["apiVersion"] == "policy.karmada.io/v1alpha1"
        assert got["spec"] == karmada["spec"]
        got = get(kubectl, "pp", "ack-fields", "-n", "team-a", user="team-a")
        assert got["spec"]["placement"]["replicaScheduling"]["customSchedulingType"] == "Gang"
        assert got["spec"]["suspension"] == {"scheduling": True}
        # The plain plural and "pp" name Karmada's (deploy/hub/README.md).
        for plural in ("propagationpolicies", "pp"):
            got = get(kubectl, plural, "-n", "team-a", user="team-a")
            names = {(i["apiVersion"], i["metadata"]["name"]) for i in got["items"]}
            karmada_group = "policy.karmada.io/v1alpha1"
            assert names == {(karmada_group, "karmada-policy"), (karmada_group, "ack-fields")}
        got = get(kubectl, *job.split(), "-n", "team-a", user="team-a")
        replicas = got["spec"]["pytorchReplicaSpecs"]
        assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)

        # Fleet: its finalizer (patch) and the job's status (/status).
        patch(kubectl, job, "team-a", {"metadata": {"finalizers": ["fleet.io/hub"]}}, user="fleet")
        status = {"conditions": [{"type": "Created", "status": "True", "reason": "Queued"}]}
        patch_status(
            hub, "/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs/pytorch-test", status
        )
        got = get(kubectl, *job.split(), "-n", "team-a")
        assert got["metadata"]["finalizers"] == ["fleet.io/hub"]
        assert got["status"] == status
        rows = table(ok(kubectl("get", "pytorchjob", "-n", "team-a", user="team-a")))
        assert rows["pytorch-test"]["STATE"] == "Created"
        # A deleted job stays until Fleet takes its finalizer off.
        ok(kubectl("delete", *job.split(), "-n", "team-a", "--wait=false", user="team-a"))
        assert get(kubectl, *job.split(), "-n", "team-a")["metadata"]["deletionTimestamp"]
        remove = [{"op": "remove", "path": "/metadata/finalizers"}]
        patch(kubectl, job, "team-a", remove, user="fleet", kind="json")
        assert kubectl("get", *job.split(), "-n", "team-a").returncode == 1
    finally:
        kubectl("patch", *job.split(), "-n", "team-a", "-p", '{"metadata":{"finalizers":null}}')
        for path in (WALKTHROUGH, HUB_DATA / "karmada-policy.yaml"):
            kubectl("delete", "-n", "team-a", "-f", str(path), "--ignore-not-found")
        kubectl("delete", "pp", "ack-fields", "-n", "team-a", "--ignore-not-found")


def queue(path: str, status: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Queue as deploy/hub/README.md documents it (generateName), and its status."""
    parent = path.rpartition("/")[0]
    spec: dict[str, Any] = {"path": path, "queuePolicy": "Priority"}
    if parent:
        spec["parent"] = parent
    document = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "Queue",
        "metadata": {
            "generateName": path.replace("/", "-") + "-",
            "namespace": "kube-queue",
            "labels": {"fleet.io/quota-node": path.rpartition("/")[2]},
        },
        "spec": spec,
    }
    return document, {"status": status}


def test_kubectl_get_queue_prints_the_documented_columns(hub: Hub, kubectl: Kubectl) -> None:
    """Fleet (its role alone) creates the walkthrough's two Queues and writes their status."""
    root = queue(
        "root",
        {
            "min": {"cpu": "9999", "memory": "40Gi"},
            "max": {
                "cpu": "999900",
                "nvidia.com/gpu": "100000",
                "kube-queue/max-jobs": "10000000000",
            },
            "used": {"nvidia.com/gpu": "3"},
            "borrowed": {"nvidia.com/gpu": "3"},
            "admitted": 1,
            "pending": 2,
        },
    )
    child = queue(
        "root/child-2",
        {
            "min": {},
            "max": {"nvidia.com/gpu": "10000", "kube-queue/max-jobs": "1"},
            "used": {"nvidia.com/gpu": "3", "kube-queue/max-jobs": "1"},
            "borrowed": {"nvidia.com/gpu": "3"},
            "admitted": 1,
            "pending": 2,
        },
    )
    names = []
    try:
        for document, status in (root, child):
            created = ok(
                kubectl("create", "-f", "-", "-o", "name", user="fleet", input=json.dumps(document))
            )
            name = created.strip().rpartition("/")[2]
            assert re.fullmatch(
                re.escape(document["metadata"]["generateName"]) + "[a-z0-9]{5}", name
            )
            names.append(name)
            queues = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/kube-queue/queues"
            patch_status(hub, f"{queues}/{name}", status["status"])
        text = ok(kubectl("get", "queue", "-n", "kube-queue", user="team-a"))
        columns = ["PATH", "GPU MIN", "GPU MAX", "GPU USED", "ADMITTED", "PENDING"]
        rows = table(text)
        assert list(rows[names[0]]) == ["NAME", *columns, "AGE"], text
        assert [rows[names[0]][c] for c in columns] == ["root", "", "100000", "3", "1", "2"], text
        assert [rows[names[1]][c] for c in columns] == ["root/child-2", "", "10000", "3", "1", "2"]
        selected = ok(
            kubectl(
                "get",
                "queue",
                "-n",
                "kube-queue",
                "-l",
                "fleet.io/quota-node=child-2",
                "-o",
                "name",
            )
        )
        assert selected.split() == [f"queue.scheduling.x-k8s.io/{names[1]}"]
    finally:
        for name in names:
            kubectl("delete", "queue", name, "-n", "kube-queue", user="fleet")


def can(kubectl: Kubectl, user: str, verb: str, resource: str, *where: str) -> bool:
    """``kubectl auth can-i`` as ``user``: yes (exit 0) or no (exit 1)."""
    out = kubectl("auth", "can-i", verb, resource, *where, user=user)
    assert out.returncode in (0, 1), out.stderr
    return out.returncode == 0


EVERYWHERE = "--all-namespaces"


@pytest.mark.parametrize(
    ("verb", "resource", "where"),
    [
        *[
            (verb, f"{plural}.{group}", (EVERYWHERE,))
            for group, plural in workload_kinds()
            for verb in ("get", "list", "watch", "update", "patch")
        ],
        *[
            (verb, f"{plural}.{group}", (EVERYWHERE, "--subresource=status"))
            for group, plural in workload_kinds()
            for verb in ("update", "patch")
        ],
        *[
            (verb, f"propagationpolicies.{group}", (EVERYWHERE,))
            for group in ("policy.karmada.io", "policy.one.alibabacloud.com")
            for verb in ("get", "list", "watch")
        ],
        *[
            (verb, "elasticquotatrees.scheduling.sigs.k8s.io", (EVERYWHERE,))
            for verb in ("get", "list", "watch")
        ],
        (
            "patch",
            "elasticquotatrees.scheduling.sigs.k8s.io",
            ("-n", "kube-system", "--subresource=status"),
        ),
        *[
            (verb, "queues.scheduling.x-k8s.io", ("-n", "kube-queue"))
            for verb in ("get", "list", "watch", "create", "update", "patch", "delete")
        ],
        *[
            (verb, "queues.scheduling.x-k8s.io", ("-n", "kube-queue", "--subresource=status"))
            for verb in ("update", "patch")
        ],
        *[(verb, "events", ("-n", "team-a")) for verb in ("create", "patch")],
        *[(verb, "events.events.k8s.io", ("-n", "team-a")) for verb in ("create", "patch")],
    ],
)
def test_fleet_hub_can(
    hub: Hub, kubectl: Kubectl, verb: str, resource: str, where: tuple[str, ...]
) -> None:
    assert can(kubectl, "fleet", verb, resource, *where)


@pytest.mark.parametrize(
    ("verb", "resource", "where"),
    [
        ("get", "secrets", ("-n", "kube-system")),
        ("list", "secrets", (EVERYWHERE,)),
        ("list", "configmaps", (EVERYWHERE,)),
        ("list", "pods", (EVERYWHERE,)),
        ("create", "namespaces", ()),
        ("delete", "pytorchjobs.kubeflow.org", ("-n", "team-a")),
        ("delete", "jobs.batch", ("-n", "team-a")),
        ("create", "propagationpolicies.policy.karmada.io", ("-n", "team-a")),
        ("patch", "propagationpolicies.policy.one.alibabacloud.com", ("-n", "team-a")),
        ("delete", "propagationpolicies.policy.karmada.io", ("-n", "team-a")),
        ("create", "elasticquotatrees.scheduling.sigs.k8s.io", ("-n", "kube-system")),
        ("update", "elasticquotatrees.scheduling.sigs.k8s.io", ("-n", "kube-system")),
        ("patch", "elasticquotatrees.scheduling.sigs.k8s.io", ("-n", "kube-system")),
        ("delete", "events", ("-n", "team-a")),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io", ()),
        ("create", "customresourcedefinitions.apiextensions.k8s.io", ()),
    ],
)
def test_fleet_hub_cannot(
    hub: Hub, kubectl: Kubectl, verb: str, resource: str, where: tuple[str, ...]
) -> None:
    assert not can(kubectl, "fleet", verb, resource, *where)


def test_fleet_cannot_read_secrets(hub: Hub, kubectl: Kubectl) -> None:
    out = kubectl("get", "secrets", "-n", "kube-system", user="fleet")
    assert out.returncode == 1 and "Forbidden" in out.stderr


def test_a_team_works_in_its_namespace_only(hub: Hub, kubectl: Kubectl) -> None:
    job = documents(WALKTHROUGH)[1]
    try:
        ok(kubectl("apply", "-n", "team-a", "-f", "-", user="team-a", input=json.dumps(job)))
        out = kubectl("apply", "-n", "team-b", "-f", "-", user="team-a", input=json.dumps(job))
        assert out.returncode == 1 and "Forbidden" in out.stderr, out.stderr
        ok(kubectl("apply", "-n", "team-b", "-f", "-", user="team-b", input=json.dumps(job)))
        assert kubectl("get", "pytorchjobs", "-n", "team-b", user="team-a").returncode == 1
        ok(kubectl("get", "queue", "-n", "kube-queue", user="team-a"))
        ok(kubectl("get", "events", "-n", "team-a", user="team-a"))
        ok(kubectl("describe", "pytorchjob", "pytorch-test", "-n", "team-a", user="team-a"))
    finally:
        for team in ("team-a", "team-b"):
            kubectl("delete", "pytorchjob", "pytorch-test", "-n", team, "--ignore-not-found")
    for team in ("team-a", "team-b"):
        assert can(kubectl, team, "list", "queues.scheduling.x-k8s.io", "-n", "kube-queue")
        for verb in ("create", "update", "patch", "delete"):
            assert not can(kubectl, team, verb, "queues.scheduling.x-k8s.io", "-n", "kube-queue")
        assert not can(
            kubectl,
            team,
            "patch",
            "queues.scheduling.x-k8s.io",
            "-n",
            "kube-queue",
            "--subresource=status",
        )
        assert not can(
            kubectl, team, "patch", "pytorchjobs.kubeflow.org", "-n", team, "--subresource=status"
        )
        assert not can(
            kubectl, team, "get", "elasticquotatrees.scheduling.sigs.k8s.io", "-n", "kube-system"
        )
        assert not can(kubectl, team, "list", "secrets", "-n", team)
        assert can(
            kubectl, team, "create", "propagationpolicies.policy.one.alibabacloud.com", "-n", team
        )
    assert not can(kubectl, "nobody", "list", "queues.scheduling.x-k8s.io", "-n", "kube-queue")
