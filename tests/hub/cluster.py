"""Fixtures: a real hub cluster (etcd and kube-apiserver) set up from ``deploy/hub``, and kubectl.

A plugin of the whole suite (``pytest_plugins`` in ``tests/conftest.py``), so the
tests of ``tests/hub`` and ``tests/kube`` share one hub.

Theory of operation: ``hub`` (once per session) calls :func:`start_hub`
(``bench/bench_hub.py`` sets its hub up with it too), which starts a
:class:`~tests.kube.controlplane.ControlPlane` named ``hub`` whose token file
also holds one user per team (:data:`TEAMS`: the user ``<team>-user`` in the
group ``<team>``), installs every CRD of ``deploy/hub/crds`` and the workload
CRDs of ``deploy/member/crds`` that a hub serves (:data:`MEMBER_CRDS`, as
``deploy/hub/README.md`` lists them), applies ``deploy/hub/rbac.yaml`` (the
namespaces ``fleet-system`` and ``kube-queue``, Fleet's service account and
its only role, ``fleet-hub``) and ``deploy/hub/team-role.yaml`` once per team
(its text with ``team-a`` replaced by the team: the namespace, the Role and
the bindings).  :class:`Hub` gives a kubeconfig for Fleet
(:meth:`Hub.kubeconfig_for_fleet`: the service account, whose rights are
``fleet-hub``'s alone), one for any user of :data:`USERS`, and
:meth:`Hub.kubectl`, which runs the real ``kubectl`` (built by
``scripts/kube-binaries`` beside the API server) as one of them; the
``kubectl`` fixture is that method; :attr:`Hub.fleet` makes plain API calls
with Fleet's token.  Nothing is cleaned between tests: a
test names its objects after itself and deletes them.

When the binaries are missing these tests fail under ``CI=true`` and are
skipped elsewhere, as ``tests/kube``'s are.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest

from tests.databases import in_ci
from tests.kube.controlplane import (
    ADMIN_TOKEN,
    FLEET_TOKEN,
    NOBODY_TOKEN,
    Admin,
    ControlPlane,
    Token,
    binaries,
)
from tests.paths import ROOT

HUB_DEPLOY = ROOT / "deploy" / "hub"
#: The teams of the session's hub: each has its namespace, Role and user.
TEAMS = ("team-a", "team-b")
#: The workload CRDs a hub serves (``deploy/hub/README.md`` lists the same): every
#: kind Fleet runs but ``batch/v1`` Job (built in), and one MPIJob version only,
#: as the two MPIJob CRDs share a name; TrainJob's runtimes beside it.
MEMBER_CRDS = (
    "kubeflow.org_pytorchjobs.yaml",
    "kubeflow.org_tfjobs.yaml",
    "kubeflow.org_mpijobs.yaml",
    "batch.volcano.sh_jobs.yaml",
    "jobset.x-k8s.io_jobsets.yaml",
    "trainer.kubeflow.org_trainjobs.yaml",
    "trainer.kubeflow.org_trainingruntimes.yaml",
    "trainer.kubeflow.org_clustertrainingruntimes.yaml",
)
#: Who ``kubectl`` runs as: the admin (``system:masters``), Fleet (``fleet-hub``
#: only), a user with no rights, and each team's user.
USERS = {
    "admin": ADMIN_TOKEN,
    "fleet": FLEET_TOKEN,
    "nobody": NOBODY_TOKEN,
    **{team: f"{team}-token" for team in TEAMS},
}


class Kubectl(Protocol):
    def __call__(
        self, *args: str, user: str = "admin", input: str | None = None
    ) -> subprocess.CompletedProcess[str]: ...


class Hub:
    """The session's hub cluster; see the module docstring."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.admin = plane.admin
        #: Plain calls as Fleet (for what kubectl cannot do with Fleet's rights alone, such
        #: as a patch of /status, which kubectl reads first).
        self.fleet = Admin(plane.url, FLEET_TOKEN, plane.dir / "ca.crt")
        self.kubectl_bin = plane.bin_dir / "kubectl"

    def kubeconfig(self, user: str = "admin") -> Path:
        """A kubeconfig for the hub as ``user`` (a key of :data:`USERS`)."""
        return self.plane.kubeconfig(USERS[user], self.plane.dir / f"kubeconfig-{user}.yaml")

    def kubeconfig_for_fleet(self) -> Path:
        """Fleet's kubeconfig: its service account, with the rights of ``fleet-hub`` alone."""
        return self.kubeconfig("fleet")

    def kubectl(
        self, *args: str, user: str = "admin", input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS`` as ``user`` (``input`` on its stdin); never raises on failure."""
        return subprocess.run(
            [str(self.kubectl_bin), "--kubeconfig", str(self.kubeconfig(user)), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def team_role(team: str) -> str:
    """``deploy/hub/team-role.yaml`` for ``team``."""
    return (HUB_DEPLOY / "team-role.yaml").read_text().replace("team-a", team)


@pytest.fixture(scope="session")
def hub_bin() -> Path:
    found = binaries(kubectl=True)
    if found is None:
        message = (
            "kube-apiserver, etcd and kubectl are not built: run scripts/kube-binaries "
            "(make test does), or set FLEET_KUBE_BIN"
        )
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return found


def start_hub(bin_dir: Path, directory: Path, teams: Sequence[str] = TEAMS) -> Hub:
    """A hub set up from ``deploy/hub`` in ``directory`` (see the module docstring), with
    ``teams``' users, Roles and namespaces; the caller stops ``hub.plane``.  The ``hub``
    fixture and ``bench/bench_hub.py`` both start theirs so."""
    tokens = [Token(f"{team}-token", f"{team}-user", (team,)) for team in teams]
    plane = ControlPlane("hub", bin_dir, directory, tokens=tokens)
    try:
        plane.start()
        plane.install_crd(*sorted((HUB_DEPLOY / "crds").glob("*.yaml")), *MEMBER_CRDS)
        plane.install_rbac(HUB_DEPLOY / "rbac.yaml")
        found = Hub(plane)
        for team in teams:
            out = found.kubectl("apply", "-f", "-", input=team_role(team))
            assert out.returncode == 0, out.stderr
    except BaseException:
        plane.stop()
        raise
    return found


@pytest.fixture(scope="session")
def hub(hub_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    found = start_hub(hub_bin, tmp_path_factory.mktemp("hub"))
    try:
        yield found
    finally:
        found.plane.stop()


@pytest.fixture(scope="session")
def kubectl(hub: Hub) -> Kubectl:
    """:meth:`Hub.kubectl` of the session's hub."""
    return hub.kubectl


def one_pod_job(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """A PyTorchJob of one 1-GPU pod (the hub tests' and ``bench/bench_hub.py``'s job)."""
    container = {
        "name": "pytorch",
        "image": "example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [container]}},
                }
            }
        },
    }
