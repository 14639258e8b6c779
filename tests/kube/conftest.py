"""Fixtures: two real member control planes, their stand-in operators, and ``fleet serve``.

Theory of operation: ``members`` (once per session) starts two independent
control planes, ``alpha`` and ``beta`` (etcd and kube-apiserver each, on
free loopback ports, token authentication, RBAC on), installs the
PyTorchJob CRD and ``deploy/member/rbac.yaml`` (Fleet's only rights), makes
the ``team-a`` namespace and two Nodes of 4 GPUs each, named as in the
member's cell config (:data:`NODES`).  Before each test ``clean_members``
removes every PyTorchJob and pod left over and makes every Node Ready and
schedulable again, and each member's stand-in operator (:mod:`.operator`)
runs for the test.  :class:`Fleet` runs ``fleet serve`` on a fresh SQLite
database with the two members from kubeconfig files (its ``--kubeconfig-dir``
the directory that holds the members' own), and reads its HTTP API.

When the binaries are missing (``scripts/kube-binaries`` builds them, and
``make test`` runs it) these tests fail under ``CI=true`` and are skipped
elsewhere.
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
from tests.kube.controlplane import ApiError, ControlPlane, binaries, wait_for
from tests.kube.operator import Operator

NAMES = ("alpha", "beta")
NODES = {name: (f"{name}-node-0", f"{name}-node-1") for name in NAMES}
GPUS_PER_NODE = 4
NAMESPACE = "team-a"

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
) -> str:
    """A PropagationPolicy and the PyTorchJob it selects (Master-less, ``workers`` pods)."""
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
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [container]}},
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
            plane.install_crd()
            plane.install_rbac()
            plane.namespace(NAMESPACE)
            for node in NODES[name]:
                plane.add_node(node, GPUS_PER_NODE)
        yield planes
    finally:
        for plane in planes.values():
            plane.stop()


@pytest.fixture
def operators(members: dict[str, ControlPlane]) -> Iterator[dict[str, Operator]]:
    """Each member's stand-in operator, after every leftover of earlier tests is gone."""
    for name, plane in members.items():
        if plane.apiserver is not None and plane.apiserver.poll() is not None:
            plane.stop_apiserver()  # it died (an earlier test killed it, or it crashed)
        if plane.apiserver is None:
            plane.start_apiserver()
        clean(plane, NODES[name])
    ops = {name: Operator(plane.admin).start() for name, plane in members.items()}
    yield ops
    for op in ops.values():
        op.stop()


def clean(plane: ControlPlane, nodes: tuple[str, ...]) -> None:
    admin = plane.admin
    for job in admin.items("/apis/kubeflow.org/v1/pytorchjobs"):
        meta = job["metadata"]
        with contextlib.suppress(ApiError):
            admin.request(
                "DELETE",
                f"/apis/kubeflow.org/v1/namespaces/{meta['namespace']}/pytorchjobs/{meta['name']}",
            )
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
    for node in nodes:
        try:
            admin.get(f"/api/v1/nodes/{node}")
        except ApiError:
            plane.add_node(node, GPUS_PER_NODE)
        plane.cordon(node, False)
        plane.set_node_ready(node, True)


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
def fleet_factory(
    members: dict[str, ControlPlane], operators: dict[str, Operator], tmp_path: Path
) -> Iterator[Any]:
    """Start ``fleet serve`` with member documents (default: both members, Fleet's token).

    Its kubeconfig directory holds every member's directory (members added later too).
    """
    started: list[Fleet] = []
    holder = Path(os.path.commonpath([str(plane.dir) for plane in members.values()]))

    def make(documents: list[dict[str, Any]] | None = None) -> Fleet:
        if documents is None:
            documents = [
                member_document(name, plane.kubeconfig(), name) for name, plane in members.items()
            ]
        fleet = Fleet(tmp_path, documents, kubeconfig_dir=holder).start()
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
