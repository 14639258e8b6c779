"""Fixtures: two real member control planes, their controllers, and ``fleet serve``.

Theory of operation: ``members`` (once per session) starts two independent
control planes, ``alpha`` and ``beta`` (etcd and kube-apiserver each, on
free loopback ports, token authentication, RBAC on), installs the CRDs of
every kind the session's tests run there (:data:`CRDS`: the training
operator's PyTorchJob, TFJob and MPIJob v1, Volcano's Job and PodGroup) and
``deploy/member/rbac.yaml`` (Fleet's only rights), makes the ``team-a``
namespace and two Nodes of 4 GPUs each, named as in the member's cell config
(:data:`NODES`) and given to KWOK.  ``member_controllers`` (once per
session, each start costs seconds) runs each member's real controllers
(:mod:`.real_operator`, started by :mod:`.controllers`): the Kubeflow
training operator v1, KWOK as the Nodes' kubelets, and the garbage
collector.  Before each test ``clean_members`` starts an API server that
died or was stopped, restarts the controllers when one died or the API
server was restarted, and removes what an earlier test left (:func:`clean`):
every workload of every kind (:data:`WORKLOADS`), every pod, and what the
controllers made beside them; it makes every Node Ready, schedulable and
KWOK's again.  A test asks for ``operators`` (the real controllers,
resumed), with a stand-in of :mod:`.standins` beside them for a kind whose
controller cannot be built here (it plays that controller alone), or, where
it needs what the real operator cannot do on demand, for
``standin_operators``: KWOK and the real operator paused (``SIGSTOP``) while
the stand-in of :mod:`.operator` plays the operator and the kubelets; such a
test's docstring says "stand-in:" and why.  Tests that need controllers the
session's members do not run (the Job controller, KWOK's ``pod-complete``)
or a member without the CRDs start control planes of their own.
:class:`Fleet` runs ``fleet serve`` on a fresh SQLite database with the
members given from kubeconfig files (its ``--kubeconfig-dir`` the directory
that holds the members' own), and reads its HTTP API.

When the binaries are missing (``scripts/kube-binaries`` and
``scripts/controller-binaries`` build them, and ``make test`` runs them)
these tests fail under ``CI=true`` and are skipped elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.testing import servers
from tests.databases import in_ci
from tests.kube.controllers import require_controllers
from tests.kube.controlplane import ApiError, ControlPlane, binaries, wait_for
from tests.kube.operator import Operator
from tests.kube.real_operator import MemberControllers, kwok_node

NAMES = ("alpha", "beta")
NODES = {name: (f"{name}-node-0", f"{name}-node-1") for name in NAMES}
GPUS_PER_NODE = 4
NAMESPACE = "team-a"
#: The CRDs every member has: the training operator v1's kinds and Volcano's.
CRDS = (
    "kubeflow.org_pytorchjobs.yaml",
    "kubeflow.org_tfjobs.yaml",
    "kubeflow.org_mpijobs.yaml",
    "batch.volcano.sh_jobs.yaml",
    "scheduling.volcano.sh_podgroups.yaml",
)
#: Every kind's workloads and what their controllers make of them, by API
#: prefix and plural: deleted in every namespace before each test.
WORKLOADS = (
    ("/apis/kubeflow.org/v1", "pytorchjobs"),
    ("/apis/kubeflow.org/v1", "tfjobs"),
    ("/apis/kubeflow.org/v1", "mpijobs"),
    ("/apis/batch.volcano.sh/v1alpha1", "jobs"),
    ("/apis/scheduling.volcano.sh/v1beta1", "podgroups"),
)
#: What the controllers make beside pods (owned by a workload), deleted in every
#: namespace before each test when it has an owner.
OWNED = (
    ("/api/v1", "services"),
    ("/api/v1", "configmaps"),
    ("/api/v1", "serviceaccounts"),
    ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
)

QUOTA = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: kube-tests}
spec:
  root:
    name: root
    min: {nvidia.com/gpu: 8, kube-queue/max-jobs: 100}
    max: {nvidia.com/gpu: 8, kube-queue/max-jobs: 100}
    children:
      - name: team-a
        min: {nvidia.com/gpu: 8, kube-queue/max-jobs: 100}
        max: {nvidia.com/gpu: 8, kube-queue/max-jobs: 100}
        namespaces: [team-a]
"""


def member_document(name: str, kubeconfig: Path, context: str | None = None) -> dict[str, Any]:
    """A real MemberCluster: two nodes of 4 GPUs, named as the Nodes the fixture makes."""
    spec: dict[str, Any] = {"path": str(kubeconfig)}
    if context:
        spec["context"] = context
    return {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": name, "labels": {"site": name}},
        "spec": {
            "kubeconfig": spec,
            "cells": {
                "physicalCluster": {
                    "skuTypes": {"GPU": {"gpu": 1, "cpu": 8, "memory": "64Gi"}},
                    "cellTypes": {
                        "GPU-NODE": {
                            "childCellType": "GPU",
                            "childCellNumber": GPUS_PER_NODE,
                            "isNodeLevel": True,
                        },
                        "GPU-POOL": {"childCellType": "GPU-NODE", "childCellNumber": 2},
                    },
                    "physicalCells": [
                        {
                            "cellType": "GPU-POOL",
                            "cellChildren": [
                                {"cellAddress": n}
                                for n in NODES.get(name, (f"{name}-node-0", f"{name}-node-1"))
                            ],
                        }
                    ],
                }
            },
        },
    }


def submission(
    name: str,
    *,
    workers: int = 2,
    gpus: int = 2,
    priority_class: str | None = None,
    clusters: list[str] | None = None,
    toleration: int | None = None,
    purge_mode: str | None = None,
    restart_policy: str = "OnFailure",
    affinity: dict[str, Any] | None = None,
) -> str:
    """A PropagationPolicy and the PyTorchJob it selects (Master-less, ``workers`` pods;
    ``affinity``: its pod template's).

    A job meant to fail has ``restart_policy="Never"`` (with ``OnFailure`` the
    operator restarts a pod that failed).
    """
    placement: dict[str, Any] = {
        "replicaScheduling": {"replicaSchedulingType": "Divided", "customSchedulingType": "Gang"}
    }
    if clusters:
        placement["clusterAffinity"] = {"clusterNames": clusters}
    spec: dict[str, Any] = {
        "resourceSelectors": [
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name}
        ],
        "placement": placement,
    }
    if toleration is not None or purge_mode is not None:
        application: dict[str, Any] = {}
        if toleration is not None:
            application["decisionConditions"] = {"tolerationSeconds": toleration}
        if purge_mode is not None:
            application["purgeMode"] = purge_mode
        spec["failover"] = {"application": application}
    policy = {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }
    container = {
        "name": "pytorch",
        "image": "example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    run_policy = {"schedulingPolicy": {"priorityClass": priority_class}} if priority_class else {}
    template: dict[str, Any] = {"containers": [container]}
    if affinity is not None:
        template["affinity"] = affinity
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": restart_policy,
                    "template": {"spec": template},
                }
            },
        },
    }
    return yaml.safe_dump_all([policy, job])


@pytest.fixture(scope="session")
def kube_bin() -> Path:
    found = binaries()
    if found is None:
        message = (
            "kube-apiserver and etcd are not built: run scripts/kube-binaries "
            "(make test does), or set FLEET_KUBE_BIN"
        )
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def members(
    kube_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ControlPlane]]:
    root = tmp_path_factory.mktemp("members")
    planes = {name: ControlPlane(name, kube_bin, root) for name in NAMES}
    try:
        for plane in planes.values():
            plane.start()
        for name, plane in planes.items():
            plane.install_crd(*CRDS)
            plane.install_rbac()
            plane.namespace(NAMESPACE)
            for node in NODES[name]:
                plane.add_node(node, GPUS_PER_NODE)
                kwok_node(plane, node)
        yield planes
    finally:
        for plane in planes.values():
            plane.stop()


@pytest.fixture(scope="session")
def controllers_bin() -> Path:
    return require_controllers()


@pytest.fixture(scope="session")
def member_controllers(
    members: dict[str, ControlPlane], controllers_bin: Path
) -> Iterator[dict[str, MemberControllers]]:
    """Each member's training operator and KWOK, for the whole session."""
    found: dict[str, MemberControllers] = {}
    try:
        for name, plane in members.items():
            found[name] = MemberControllers(plane, controllers_bin, plane.dir / "controllers")
            found[name].start()
        yield found
    finally:
        for controllers in found.values():
            controllers.stop()


@pytest.fixture
def clean_members(
    members: dict[str, ControlPlane], member_controllers: dict[str, MemberControllers]
) -> dict[str, ControlPlane]:
    """The members, without anything an earlier test left, their controllers alive."""
    for name, plane in members.items():
        if plane.apiserver is not None and plane.apiserver.poll() is not None:
            plane.stop_apiserver()  # it died (an earlier test killed it, or it crashed)
        if plane.apiserver is None:
            plane.start_apiserver()
        controllers = member_controllers[name]
        if not controllers.alive() or controllers.stale():
            controllers.stop()
            controllers.start()
        clean(plane, NODES[name])
    return members


@pytest.fixture
def operators(
    clean_members: dict[str, ControlPlane], member_controllers: dict[str, MemberControllers]
) -> dict[str, MemberControllers]:
    """Each member's real training operator and KWOK, running."""
    for controllers in member_controllers.values():
        controllers.pause(False)
    return member_controllers


@pytest.fixture
def standin_operators(
    clean_members: dict[str, ControlPlane], member_controllers: dict[str, MemberControllers]
) -> Iterator[dict[str, Operator]]:
    """Each member's stand-in operator (:mod:`.operator`), the real controllers paused."""
    for controllers in member_controllers.values():
        controllers.pause()
    ops = {name: Operator(plane.admin).start() for name, plane in clean_members.items()}
    yield ops
    for op in ops.values():
        op.stop()
    for plane in clean_members.values():
        clean(plane, NODES[plane.name])  # the real operator must not find the stand-in's jobs
    for controllers in member_controllers.values():
        controllers.pause(False)


def clean(plane: ControlPlane, nodes: tuple[str, ...]) -> None:
    """Remove every workload, pod and owned object; every Node Ready, schedulable, KWOK's."""
    admin = plane.admin
    for prefix, plural in WORKLOADS:
        delete_all(admin, prefix, plural)
    # A controller that had not seen a workload's deletion yet may make a pod again: twice.
    delete_pods(admin)
    time.sleep(0.2)
    delete_pods(admin)
    for prefix, plural in OWNED:
        delete_all(admin, prefix, plural, owned=True)
    for node in nodes:
        try:
            admin.get(f"/api/v1/nodes/{node}")
        except ApiError:
            plane.add_node(node, GPUS_PER_NODE)
        plane.cordon(node, False)
        kwok_node(plane, node)
        plane.set_node_ready(node, True)


def delete_all(admin: Any, prefix: str, plural: str, *, owned: bool = False) -> None:
    """Delete every ``plural`` of every namespace (``owned``: those with an owner only)."""
    try:
        found = admin.items(f"{prefix}/{plural}")
    except ApiError as e:
        if e.status == 404:  # a test took its CRD away
            return
        raise
    for obj in found:
        meta = obj["metadata"]
        if owned and not meta.get("ownerReferences"):
            continue
        with contextlib.suppress(ApiError):
            admin.request(
                "DELETE", f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
            )


def delete_pods(admin: Any) -> None:
    for pod in admin.items("/api/v1/pods"):
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        if meta.get("finalizers"):  # a test's hold on a pod must not outlive the test
            with contextlib.suppress(ApiError):
                admin.request(
                    "PATCH",
                    path,
                    {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )
        with contextlib.suppress(ApiError):
            admin.request(
                "DELETE",
                path,
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            )


class Fleet:
    """``fleet serve`` on a fresh SQLite database, with real members, and its HTTP API."""

    def __init__(
        self,
        tmp: Path,
        documents: list[dict[str, Any]],
        quota: str = QUOTA,
        kubeconfig_dir: Path | None = None,
    ) -> None:
        self.tmp = tmp
        #: --kubeconfig-dir: given, or the directory that holds every document's kubeconfig
        self.kubeconfig_dir = kubeconfig_dir or kubeconfigs_holder(documents)
        self.clusters = tmp / "clusters.yaml"
        self.clusters.write_text(yaml.safe_dump_all(documents))
        self.quota = tmp / "quota.yaml"
        self.quota.write_text(quota)
        self.database_url = f"sqlite+aiosqlite:///{tmp / 'fleet.db'}"
        self.log = tmp / "fleet.log"
        self.port = servers.free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Fleet:
        self.proc = servers.start(
            self.database_url,
            self.port,
            self.log,
            extra=self.files(),
        )
        return self

    def files(self) -> list[str]:
        """The flags naming the cluster and quota files and the kubeconfig directory."""
        return [
            "--clusters",
            str(self.clusters),
            "--quota",
            str(self.quota),
            "--kubeconfig-dir",
            str(self.kubeconfig_dir),
        ]

    def stop(self) -> None:
        if self.proc is not None:
            servers.stop(self.proc)
            self.proc = None

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def request(self, method: str, path: str, body: bytes | None = None, ctype: str = "") -> Any:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=body, method=method
        )
        if ctype:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{method} {path}: HTTP {e.code}: {e.read().decode()}") from e

    def submit(self, text: str) -> Any:
        return self.request("POST", "/api/v1/submissions", text.encode(), "application/yaml")

    def job(self, name: str) -> dict[str, Any]:
        return dict(self.request("GET", f"/api/v1/jobs/{NAMESPACE}/{name}"))

    def clusters_view(self) -> dict[str, dict[str, Any]]:
        return {c["name"]: c for c in self.request("GET", "/api/v1/clusters")["items"]}

    def wait_state(self, name: str, *states: str, timeout: float = 60.0) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def reached() -> dict[str, Any] | None:
            job = self.job(name)
            seen.update(job)
            return job if job["state"] in states else None

        try:
            return dict(wait_for(reached, f"job {name} in {states}", timeout))
        except AssertionError as e:
            last = f"it is {seen.get('state')}: {seen.get('reason')!r}"
            raise AssertionError(f"{e}; {last}\n{self.log_tail()}") from e

    def log_tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def kubeconfigs_holder(documents: list[dict[str, Any]]) -> Path:
    """The innermost directory holding every real member's kubeconfig file."""
    paths = [
        d["spec"]["kubeconfig"]["path"] for d in documents if "kubeconfig" in d.get("spec", {})
    ]
    if not paths:
        return Path("/nonexistent")
    return Path(os.path.commonpath([os.path.dirname(p) for p in paths]))


@pytest.fixture
def fleet_factory(clean_members: dict[str, ControlPlane], tmp_path: Path) -> Iterator[Any]:
    """Start ``fleet serve`` with member documents (default: both members, Fleet's token)
    and a quota tree (default: :data:`QUOTA`).

    Its kubeconfig directory holds every member's directory (members added later too).
    """
    members = clean_members
    started: list[Fleet] = []
    holder = Path(os.path.commonpath([str(plane.dir) for plane in members.values()]))

    def make(documents: list[dict[str, Any]] | None = None, quota: str = QUOTA) -> Fleet:
        if documents is None:
            documents = [
                member_document(name, plane.kubeconfig(), name) for name, plane in members.items()
            ]
        fleet = Fleet(tmp_path, documents, quota=quota, kubeconfig_dir=holder).start()
        started.append(fleet)
        return fleet

    yield make
    for fleet in started:
        fleet.stop()


def pytorchjobs(plane: ControlPlane) -> list[dict[str, Any]]:
    return plane.admin.items(f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs")


def pods_of(plane: ControlPlane, uid: str) -> list[dict[str, Any]]:
    return plane.admin.items(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"fleet.io/job-uid={uid}"
    )


def settle(seconds: float) -> None:
    time.sleep(seconds)
