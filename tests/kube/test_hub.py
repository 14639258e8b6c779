"""The hub as the front door: ACK One's walkthrough with kubectl, a real hub and real members.

A hub cluster (etcd and kube-apiserver set up from ``deploy/hub``, the
``hub`` fixture of :mod:`tests.hub.cluster`) and ``fleet serve
--hub-kubeconfig`` with Fleet's service account, whose only rights are the
role ``fleet-hub``: so these tests also show that Fleet works with exactly
that role.  The walkthrough runs against the two members of the ``members``
fixture with the real training operator and KWOK; the restart test against a
member of its own, large enough to dispatch every job at once.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.clusters.base import member_object_name
from tests.hub.cluster import Hub, one_pod_job
from tests.kube.conftest import QUOTA, Fleet, member_document
from tests.kube.controlplane import ApiError, ControlPlane, wait_for
from tests.kube.real_operator import MemberControllers
from tests.paths import ROOT

pytestmark = pytest.mark.slow

WALKTHROUGH_TREE = ROOT / "policies" / "quota" / "ack-example.yaml"
WALKTHROUGH_JOB = ROOT / "policies" / "jobs" / "ack-walkthrough.yaml"
PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"


class HubFleet(Fleet):
    """``fleet serve`` that also serves the hub, as Fleet's service account."""

    def __init__(
        self, tmp: Path, documents: list[dict[str, Any]], hub: Hub, quota: str = QUOTA
    ) -> None:
        super().__init__(tmp, documents, quota)
        self.hub_kubeconfig = hub.kubeconfig_for_fleet()

    def files(self) -> list[str]:
        return [*super().files(), "--hub-kubeconfig", str(self.hub_kubeconfig)]


def kubectl_ok(hub: Hub, *args: str, user: str = "admin", input: str | None = None) -> str:
    out = hub.kubectl(*args, user=user, input=input)
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    return out.stdout


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


def test_the_walkthrough_with_kubectl(
    hub: Hub,
    operators: dict[str, MemberControllers],
    tmp_path: Path,
) -> None:
    members = {name: c.plane for name, c in operators.items()}
    documents = [member_document(n, p.kubeconfig(), n) for n, p in members.items()]
    fleet = HubFleet(tmp_path, documents, hub).start()
    try:
        # Step one: the administrator applies the tree; Kube Queue's queues appear.
        kubectl_ok(hub, "apply", "-f", str(WALKTHROUGH_TREE))

        def queues() -> str | None:
            table = kubectl_ok(hub, "get", "queue", "-n", "kube-queue")
            names = {line.split()[0] for line in table.splitlines()[1:]}
            found = {n for n in names if re.fullmatch(r"root-[a-z0-9]{5}", n)} and {
                n for n in names if re.fullmatch(r"root-child-2-[a-z0-9]{5}", n)
            }
            return table if found else None

        table = wait_for(queues, "the queues of the tree", 60)
        print(table)
        tree = json.loads(
            kubectl_ok(hub, "get", "elasticquotatree", "-n", "kube-system", "-o", "json")
        )["items"][0]
        assert condition(tree, "Accepted") is not None
        assert condition(tree, "Accepted")["status"] == "True"  # type: ignore[index]
        assert "child-2" in {q["name"] for q in fleet.request("GET", "/api/v1/queues")["items"]}

        # Step two: the policy and the job, with kubectl.
        kubectl_ok(hub, "apply", "-n", "default", "-f", str(WALKTHROUGH_JOB))

        # Step three: the job's state, and the binding in its Events.
        def bound() -> str | None:
            text = kubectl_ok(hub, "describe", "pytorchjob", "pytorch-test", "-n", "default")
            return text if "ScheduleBindingSucceed" in text else None

        described = wait_for(bound, "the binding event", 90)
        print(described)
        match = re.search(r"Result: \{(alpha|beta):0,\[\{master 1\} \{worker 2\}\]\}", described)
        assert match, described
        assert "NoPolicy" not in described  # its policy came with it
        member = members[match.group(1)]

        def running() -> str | None:
            table = kubectl_ok(hub, "get", "pytorchjob", "-n", "default")
            return table if re.search(r"pytorch-test\s+Running", table) else None

        print(wait_for(running, "pytorch-test Running on the hub", 90))
        # In its member, the object Fleet made, run by the operator.
        name = member_object_name("default/pytorch-test")
        obj = member.admin.get(PYTORCHJOBS.format(ns="default") + f"/{name}")
        assert obj["metadata"]["name"] == name
        # The job is Fleet's through the HTTP door too.
        job = fleet.request("GET", "/api/v1/jobs/default/pytorch-test")
        assert job["state"] == "Running" and job["cluster"] == match.group(1)

        # Deleting the hub object cancels the job and removes it from its member.
        kubectl_ok(hub, "delete", "pytorchjob", "pytorch-test", "-n", "default", "--timeout=60s")

        def gone() -> bool:
            try:
                member.admin.get(PYTORCHJOBS.format(ns="default") + f"/{name}")
            except ApiError as e:
                return e.status == 404
            return False

        wait_for(gone, "the member's object deleted", 60)
        assert fleet.request("GET", "/api/v1/jobs/default/pytorch-test")["state"] == "Cancelled"

        # Its queue's figures go back to nothing used (the status replaced whole).
        def released() -> bool:
            queues = json.loads(kubectl_ok(hub, "get", "queue", "-n", "kube-queue", "-o", "json"))
            child = [q for q in queues["items"] if q["spec"]["path"] == "root/child-2"]
            return bool(child) and child[0]["status"].get("used") == {}

        wait_for(released, "child-2's GPUs released on the hub", 60)
    finally:
        hub.kubectl("delete", "-n", "default", "-f", str(WALKTHROUGH_JOB), "--timeout=60s")
        hub.kubectl("delete", "-f", str(WALKTHROUGH_TREE), "--timeout=60s")
        fleet.stop()


# Killed while jobs are applied ----------------------------------------------------------

JOBS = 200
NODES = 25  # of 8 GPUs: every job (one 1-GPU pod) is dispatched at once
RESTART_MEMBER = "gamma"
RESTART_NAMESPACE = "team-a"  # the hub's team namespace
RESTART_QUOTA = f"""\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {{name: restart}}
spec:
  root:
    name: root
    min: {{nvidia.com/gpu: {NODES * 8}}}
    children:
      - name: team-a
        min: {{nvidia.com/gpu: {NODES * 8}}}
        namespaces: [{RESTART_NAMESPACE}]
"""


def big_member(name: str, kubeconfig: Path) -> dict[str, Any]:
    """A MemberCluster of :data:`NODES` nodes of 8 GPUs."""
    nodes = [f"{name}-node-{i}" for i in range(NODES)]
    return {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": name},
        "spec": {
            "kubeconfig": {"path": str(kubeconfig)},
            "cells": {
                "physicalCluster": {
                    "skuTypes": {"GPU": {"gpu": 1, "cpu": 8, "memory": "64Gi"}},
                    "cellTypes": {
                        "GPU-NODE": {
                            "childCellType": "GPU",
                            "childCellNumber": 8,
                            "isNodeLevel": True,
                        }
                    },
                    "physicalCells": [{"cellType": "GPU-NODE", "cellAddress": n} for n in nodes],
                }
            },
        },
    }


def job_object(name: str) -> dict[str, Any]:
    return one_pod_job(name, RESTART_NAMESPACE, {"bench": "kill"})


class Creations:
    """Every PyTorchJob a member ever held: a watch of its ADDED and DELETED events."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.added: dict[str, list[str]] = {}  # name -> uids, in order
        self.deleted: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Creations:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        import ssl
        import urllib.request

        admin = self.plane.admin
        context = ssl.create_default_context(cafile=str(admin.ca_file))
        version = "0"
        while not self._stop.is_set():
            url = (
                f"{admin.url}/apis/kubeflow.org/v1/pytorchjobs?watch=true"
                f"&resourceVersion={version}&timeoutSeconds=5"
            )
            req = urllib.request.Request(url)
            req.add_header("Authorization", f"Bearer {admin.token}")
            try:
                with urllib.request.urlopen(req, timeout=30, context=context) as resp:
                    for line in resp:
                        event = json.loads(line)
                        meta = event["object"].get("metadata") or {}
                        version = meta.get("resourceVersion") or version
                        if event["type"] == "ADDED":
                            self.added.setdefault(meta["name"], []).append(meta["uid"])
                        elif event["type"] == "DELETED":
                            self.deleted.append(meta["name"])
            except OSError:
                time.sleep(0.2)


def test_fleet_killed_while_jobs_are_applied_loses_none_and_runs_none_twice(
    hub: Hub,
    kube_bin: Path,
    tmp_path: Path,
) -> None:
    plane = ControlPlane(RESTART_MEMBER, kube_bin, tmp_path / "member")
    plane.start()
    creations: Creations | None = None
    fleet: HubFleet | None = None
    names = [f"kill-{i:03d}" for i in range(JOBS)]
    try:
        plane.install_crd()
        plane.install_rbac()
        plane.namespace(RESTART_NAMESPACE)
        for i in range(NODES):
            plane.add_node(f"{RESTART_MEMBER}-node-{i}", 8)
        creations = Creations(plane).start()
        # Fleet's tree is the one it starts with (no ElasticQuotaTree on the hub).
        kubectl_ok(hub, "delete", "elasticquotatree", "--all", "-n", "kube-system")
        fleet = HubFleet(
            tmp_path, [big_member(RESTART_MEMBER, plane.kubeconfig())], hub, RESTART_QUOTA
        )
        fleet.start()
        kubectl_ok(
            hub,
            "apply",
            "-n",
            RESTART_NAMESPACE,
            "-f",
            "-",
            input=yaml.safe_dump(
                {
                    "apiVersion": "policy.karmada.io/v1alpha1",
                    "kind": "PropagationPolicy",
                    "metadata": {"name": "kill"},
                    "spec": {
                        "resourceSelectors": [
                            {
                                "apiVersion": "kubeflow.org/v1",
                                "kind": "PyTorchJob",
                                "labelSelector": {"matchLabels": {"bench": "kill"}},
                            }
                        ]
                    },
                }
            ),
        )
        path = PYTORCHJOBS.format(ns=RESTART_NAMESPACE)
        applied: list[str] = []

        def apply_all() -> None:
            for name in names:
                hub.admin.request("POST", path, job_object(name))
                applied.append(name)

        applier = threading.Thread(target=apply_all)
        applier.start()
        wait_for(lambda: len(applied) >= JOBS // 3, "a third of the jobs applied", 60)
        fleet.kill()
        fleet.start()
        applier.join(120)
        assert len(applied) == JOBS

        def all_dispatched() -> bool:
            listed = plane.admin.items(PYTORCHJOBS.format(ns=RESTART_NAMESPACE))
            return len(listed) == JOBS

        wait_for(all_dispatched, f"{JOBS} objects in the member", 180)

        def states() -> dict[str, int]:
            items = hub.admin.items(path, labelSelector="bench=kill")
            found = [
                ((o.get("status") or {}).get("conditions") or [{}])[-1].get("type") for o in items
            ]
            return {str(s): found.count(s) for s in set(found)}

        try:
            wait_for(lambda: states() == {"Dispatched": JOBS}, "every hub job Dispatched", 120)
        except AssertionError as e:
            raise AssertionError(f"{e}: {states()}") from None
        time.sleep(2.0)  # a second create would show now
        # None lost: each job once in Fleet, once in the member, never deleted there.
        jobs = fleet.request("GET", f"/api/v1/jobs?namespace={RESTART_NAMESPACE}&limit=1000")
        mine = sorted(j["name"] for j in jobs["items"] if j["name"].startswith("kill-"))
        assert mine == names
        assert creations.deleted == []
        twice = {n: uids for n, uids in creations.added.items() if len(uids) != 1}
        assert twice == {}
        assert len(creations.added) == JOBS
    finally:
        if creations is not None:
            creations.stop()
        # Fleet takes its finalizers off as it cancels the jobs.
        hub.kubectl(
            "delete", "pytorchjob", "-n", RESTART_NAMESPACE, "-l", "bench=kill", "--timeout=120s"
        )
        hub.kubectl("delete", "pp", "kill", "-n", RESTART_NAMESPACE, "--timeout=60s")
        if fleet is not None:
            fleet.stop()
        plane.stop()


# What the hub says back: refusals, late policies, the tree ------------------------------

EXAMPLE_CLUSTERS = ROOT / "policies" / "clusters" / "example.yaml"
TEAM_TREE = ROOT / "policies" / "quota" / "team-tree.yaml"


def events_of(hub: Hub, namespace: str, name: str) -> list[dict[str, Any]]:
    out = kubectl_ok(
        hub,
        "get",
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"involvedObject.name={name}",
        "-o",
        "json",
    )
    return list(json.loads(out)["items"])


def reasons(hub: Hub, namespace: str, name: str) -> set[str]:
    return {e["reason"] for e in events_of(hub, namespace, name)}


def hub_job(hub: Hub, namespace: str, name: str) -> dict[str, Any]:
    return dict(
        json.loads(kubectl_ok(hub, "get", "pytorchjob", name, "-n", namespace, "-o", "json"))
    )


def test_the_hub_says_why_it_refuses_and_waits_for_a_policy(hub: Hub, tmp_path: Path) -> None:
    """On simulated members: a job before its policy, a job no member can hold, a broken tree."""
    documents = list(yaml.safe_load_all(EXAMPLE_CLUSTERS.read_text()))
    fleet = HubFleet(tmp_path, documents, hub, TEAM_TREE.read_text())
    ns = "team-b"
    job = job_object("late")
    job["metadata"]["namespace"] = ns
    huge = job_object("huge")
    huge["metadata"]["namespace"] = ns
    container = huge["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"]["nvidia.com/gpu"] = 64
    policy = {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": "late", "namespace": ns},
        "spec": {
            "resourceSelectors": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "late"},
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "huge"},
            ]
        },
    }
    fleet.start()
    try:
        # A job no policy selects is not Fleet's: no finalizer, one NoPolicy Event.
        kubectl_ok(hub, "apply", "-f", "-", input=json.dumps(job))
        wait_for(lambda: "NoPolicy" in reasons(hub, ns, "late"), "the NoPolicy event", 30)
        assert "finalizers" not in hub_job(hub, ns, "late")["metadata"]
        assert fleet.request("GET", "/api/v1/policies")["items"] == []
        # Its policy arrives: the job is Fleet's and runs; the policy is a stored one.
        kubectl_ok(hub, "apply", "-f", "-", input=json.dumps(policy))

        def admitted() -> dict[str, Any] | None:
            obj = hub_job(hub, ns, "late")
            return obj if condition(obj, "Admitted") else None

        obj = wait_for(admitted, "late admitted", 30)
        assert obj["metadata"]["finalizers"] == ["fleet.io/hub"]
        detail = fleet.request("GET", f"/api/v1/jobs/{ns}/late")
        assert detail["policy"] == {"namespace": ns, "name": "late", "source": "stored"}
        stored = fleet.request("GET", "/api/v1/policies")["items"]
        assert [(p["namespace"], p["name"]) for p in stored] == [(ns, "late")]
        # A job no member can hold: the condition Invalid and a Warning with the field path.
        kubectl_ok(hub, "apply", "-f", "-", input=json.dumps(huge))

        def refused() -> dict[str, Any] | None:
            found = condition(hub_job(hub, ns, "huge"), "Invalid")
            return found if found else None

        invalid = wait_for(refused, "huge refused", 30)
        assert "spec.pytorchReplicaSpecs.Master" in invalid["message"], invalid
        wait_for(lambda: "InvalidSpec" in reasons(hub, ns, "huge"), "the InvalidSpec Event", 30)
        with pytest.raises(AssertionError, match="404"):
            fleet.request("GET", f"/api/v1/jobs/{ns}/huge")
        # A tree that breaks a rule is refused whole; the tree in force stays.
        before = fleet.request("GET", "/api/v1/queues")
        broken = yaml.safe_load(TEAM_TREE.read_text())
        broken["metadata"] = {"name": "fleet", "namespace": "kube-system"}
        broken["spec"]["root"]["children"][0]["min"]["nvidia.com/gpu"] = 4000
        kubectl_ok(hub, "apply", "-f", "-", input=json.dumps(broken))

        def answered() -> dict[str, Any] | None:
            out = kubectl_ok(
                hub, "get", "elasticquotatree", "fleet", "-n", "kube-system", "-o", "json"
            )
            return condition(json.loads(out), "Accepted")

        accepted = wait_for(answered, "the tree's answer", 30)
        assert accepted["status"] == "False" and "research" in accepted["message"], accepted
        wait_for(
            lambda: "InvalidTree" in reasons(hub, "kube-system", "fleet"),
            "the InvalidTree Event",
            30,
        )
        assert fleet.request("GET", "/api/v1/queues") == before
        # Deleting the hub's policy removes the stored one.
        kubectl_ok(hub, "delete", "pp", "late", "-n", ns)
        wait_for(
            lambda: fleet.request("GET", "/api/v1/policies")["items"] == [],
            "the stored policy removed",
            30,
        )
    finally:
        hub.kubectl("delete", "pytorchjob", "late", "huge", "-n", ns, "--timeout=60s")
        hub.kubectl("delete", "pp", "late", "-n", ns, "--timeout=30s")
        hub.kubectl("delete", "elasticquotatree", "--all", "-n", "kube-system")
        fleet.stop()


def test_a_job_of_the_http_door_is_shown_on_the_hub_and_cancelled_from_there(
    hub: Hub, tmp_path: Path
) -> None:
    documents = list(yaml.safe_load_all(EXAMPLE_CLUSTERS.read_text()))
    fleet = HubFleet(tmp_path, documents, hub, TEAM_TREE.read_text())
    ns = "team-b"
    job = job_object("from-http")
    job["metadata"]["namespace"] = ns
    policy = {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": "from-http", "namespace": ns},
        "spec": {
            "resourceSelectors": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "from-http"}
            ]
        },
    }
    fleet.start()
    try:
        answer = fleet.submit(yaml.safe_dump_all([policy, job]))
        uid = answer["jobs"][0]["uid"]

        def shown() -> dict[str, Any] | None:
            out = hub.kubectl("get", "pytorchjob", "from-http", "-n", ns, "-o", "json")
            if out.returncode != 0:
                return None
            obj = json.loads(out.stdout)
            return obj if condition(obj, "Running") else None

        obj = wait_for(shown, "the HTTP door's job on the hub, Running", 30)
        assert obj["metadata"]["annotations"]["fleet.io/job-uid"] == uid
        assert obj["metadata"]["finalizers"] == ["fleet.io/hub"]
        # The Event is written beside the status, not before it: wait for it too.
        wait_for(
            lambda: "ScheduleBindingSucceed" in reasons(hub, ns, "from-http"),
            "the HTTP door's job's ScheduleBindingSucceed Event",
            30,
        )
        # Deleting it on the hub cancels the job, as for the hub's own jobs.
        kubectl_ok(hub, "delete", "pytorchjob", "from-http", "-n", ns, "--timeout=30s")
        job_now = fleet.request("GET", f"/api/v1/jobs/{ns}/from-http")
        assert job_now["state"] == "Cancelled" and job_now["uid"] == uid
        # A restarted Fleet makes no second object for it (it ended).
        fleet.stop()
        fleet.start()
        time.sleep(3.0)
        assert hub.kubectl("get", "pytorchjob", "from-http", "-n", ns).returncode != 0
    finally:
        hub.kubectl("delete", "pytorchjob", "from-http", "-n", ns, "--timeout=30s")
        hub.kubectl("delete", "pp", "from-http", "-n", ns, "--timeout=30s")
        fleet.stop()
