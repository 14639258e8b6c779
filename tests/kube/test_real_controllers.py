"""The real member controllers run against a test control plane: KWOK and the training operator.

Theory of operation: ``scripts/controller-binaries`` builds the Kubeflow
training operator (v1.8.1), KWOK (v0.8.0) and kube-controller-manager from
their Go modules; ``FLEET_CONTROLLERS_BIN`` names their directory (else the
script is asked where its cache is), and when they are missing this test
fails under ``CI=true`` and is skipped elsewhere, as the control planes'
own binaries are (:mod:`tests.kube.conftest`).

One control plane (:class:`~tests.kube.controlplane.ControlPlane`) with the
PyTorchJob CRD of ``deploy/member/``; KWOK out of cluster with the admin's
kubeconfig manages one fake Node of 8 GPUs, playing the stages of
``tests/kube/kwok/stages.yaml`` (the Node becomes Ready, pods bound to it
Running); the training operator out of cluster with ``-kubeconfig``, its
webhook server, metrics and probes on free loopback ports or off, and the
Secret its certificate rotator insists on (``training-operator-webhook-cert``
in ``kubeflow``) made first; the serving certificate the rotator writes there
is copied to the directory where a pod would have it mounted
(``/tmp/k8s-webhook-server/serving-certs``, fixed in v1.8.1), as the
operator sets up its controllers only once it is there.  A PyTorchJob of one master and one worker,
bound to the fake Node by ``nodeName`` as Fleet binds them, gets its pods
from the operator, Running by KWOK, and a Running condition.  Every process
is stopped at the end, however the test ends.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.testing.servers import free_port
from tests.databases import in_ci
from tests.kube.controlplane import ADMIN_TOKEN, ControlPlane, wait_for
from tests.paths import ROOT

pytestmark = pytest.mark.slow

CONTROLLERS = ("training-operator.v1", "kwok", "kube-controller-manager")
STAGES = Path(__file__).parent / "kwok" / "stages.yaml"
NODE = "kwok-node-0"
GPUS = 8
NAMESPACE = "team-a"
#: Where the operator's certificate rotator keeps its Secret (MY_POD_NAMESPACE).
OPERATOR_NAMESPACE = "kubeflow"
#: Where the operator (v1.8.1, a constant) expects that Secret mounted, as a pod would.
OPERATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


def controller_binaries() -> Path | None:
    """The directory with the controllers, or None when they are not built."""
    named = os.environ.get("FLEET_CONTROLLERS_BIN")
    candidates = [Path(named)] if named else []
    if not named:
        out = subprocess.run(
            [str(ROOT / "scripts" / "controller-binaries"), "--path"],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    for d in candidates:
        if all((d / name).is_file() for name in CONTROLLERS):
            return d
    return None


@pytest.fixture(scope="module")
def controllers_bin() -> Path:
    found = controller_binaries()
    if found is None:
        message = (
            "the member controllers are not built: run scripts/controller-binaries "
            "(.ci/run and scripts/run-tests do), or set FLEET_CONTROLLERS_BIN"
        )
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return found


class Processes:
    """Processes started for one test, each logging to a file; :meth:`stop` ends them all."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with (self.log_dir / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )

    def check(self) -> None:
        """AssertionError with its log when a process has exited."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited ({proc.returncode}):\n{self.tail(name)}")

    def tail(self, name: str, lines: int = 40) -> str:
        f = self.log_dir / f"{name}.log"
        text = f.read_text(errors="replace") if f.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def tails(self) -> str:
        return "\n".join(f"--- {name}\n{self.tail(name)}" for name in self.procs)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def plane(kube_bin: Path, tmp_path: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane("ctl", kube_bin, tmp_path)
    try:
        plane.start()
        plane.install_crd()
        plane.namespace(NAMESPACE)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop()


def start_kwok(procs: Processes, bin_dir: Path, kubeconfig: Path) -> None:
    procs.start(
        "kwok",
        [
            str(bin_dir / "kwok"),
            f"--kubeconfig={kubeconfig}",
            f"--config={STAGES}",
            "--manage-all-nodes=false",
            f"--manage-single-node={NODE}",
            "--node-lease-duration-seconds=0",  # heartbeats by the node-heartbeat stage
            "--cidr=10.0.1.0/24",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{free_port()}",
        ],
    )


def start_training_operator(
    procs: Processes, plane: ControlPlane, bin_dir: Path, kubeconfig: Path
) -> None:
    # Its certificate rotator updates this Secret and fails at once without
    # it; without a ValidatingWebhookConfiguration it only logs, and no
    # admission webhook of the operator is called.
    plane.namespace(OPERATOR_NAMESPACE)
    plane.admin.request(
        "POST",
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "training-operator-webhook-cert"},
        },
    )
    procs.start(
        "training-operator",
        [
            str(bin_dir / "training-operator.v1"),
            f"-kubeconfig={kubeconfig}",
            "-enable-scheme=pytorchjob",
            f"-webhook-server-port={free_port()}",
            "-metrics-bind-address=0",
            "-health-probe-bind-address=0",
            "-leader-elect=false",
            "-zap-log-level=info",
        ],
        env={"MY_POD_NAMESPACE": OPERATOR_NAMESPACE},
    )


def mount_operator_certs(procs: Processes, plane: ControlPlane) -> list[Path]:
    """Write the serving certificate the operator put in its Secret where it waits for it.

    In a cluster the kubelet mounts the Secret; the operator sets up its
    controllers only once the files are there.  The files written, to remove.
    """

    def certificate() -> dict[str, str] | None:
        procs.check()
        secret = plane.admin.get(
            f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets/training-operator-webhook-cert"
        )
        data = secret.get("data") or {}
        return data if "tls.crt" in data and "tls.key" in data else None

    data = wait_for(certificate, "the operator's serving certificate in its Secret", 60)
    OPERATOR_CERT_DIR.mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("tls.crt", "tls.key"):
        path = OPERATOR_CERT_DIR / name
        path.write_bytes(base64.b64decode(data[name]))
        written.append(path)
    return written


def pytorchjob(name: str) -> dict[str, Any]:
    """One master and one worker, bound to the fake Node; the image is never pulled."""

    def replica() -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": 1}},
        }
        return {
            "replicas": 1,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"nodeName": NODE, "containers": [container]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def test_training_operator_and_kwok_run_a_pytorchjob(
    plane: ControlPlane, processes: Processes, controllers_bin: Path
) -> None:
    admin = plane.admin
    kubeconfig = plane.kubeconfig(ADMIN_TOKEN)
    admin.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    capacity = {"nvidia.com/gpu": str(GPUS), "cpu": "64", "memory": "512Gi", "pods": "110"}
    admin.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}/status",
        {"status": {"capacity": capacity, "allocatable": capacity}},
        content_type="application/merge-patch+json",
    )
    start_kwok(processes, controllers_bin, kubeconfig)
    start_training_operator(processes, plane, controllers_bin, kubeconfig)
    certs: list[Path] = []

    def node_ready() -> dict[str, Any] | None:
        processes.check()
        node = admin.get(f"/api/v1/nodes/{NODE}")
        conditions = node["status"].get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return node if ready else None

    try:
        certs = mount_operator_certs(processes, plane)
        node = wait_for(node_ready, "KWOK to make the Node Ready", 60)
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(GPUS)

        admin.request(
            "POST", f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs", pytorchjob("pt")
        )

        def running_pods() -> list[dict[str, Any]] | None:
            processes.check()
            pods = admin.items(
                f"/api/v1/namespaces/{NAMESPACE}/pods",
                labelSelector="training.kubeflow.org/job-name=pt",
            )
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            return pods if len(pods) == 2 and len(running) == 2 else None

        pods = wait_for(running_pods, "the operator's two pods Running by KWOK", 120)
        roles = sorted(p["metadata"]["labels"]["training.kubeflow.org/replica-type"] for p in pods)
        assert roles == ["master", "worker"]
        for pod in pods:
            assert pod["spec"]["nodeName"] == NODE
            assert pod["status"]["podIP"].startswith("10.0.1.")
            owner = pod["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"]) == ("PyTorchJob", "pt")

        def job_running() -> dict[str, Any] | None:
            processes.check()
            job = admin.get(f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs/pt")
            conditions = (job.get("status") or {}).get("conditions") or []
            running = any(c["type"] == "Running" and c["status"] == "True" for c in conditions)
            return job if running else None

        job = wait_for(job_running, "the PyTorchJob's Running condition", 60)
        assert job["status"]["replicaStatuses"]["Master"]["active"] == 1
        assert job["status"]["replicaStatuses"]["Worker"]["active"] == 1
    except AssertionError as e:
        raise AssertionError(f"{e}\n{processes.tails()}\n{plane.log_tail()}") from e
    finally:
        for path in certs:
            with contextlib.suppress(OSError):
                path.unlink()
