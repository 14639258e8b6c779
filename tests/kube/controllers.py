"""The real member controllers, started out of cluster against a test control plane.

Theory of operation: ``scripts/controller-binaries`` builds the Kubeflow
training operator (v1.8.1), KWOK (v0.8.0) and kube-controller-manager from
their Go modules; ``FLEET_CONTROLLERS_BIN`` names their directory (else the
script is asked where its cache is).  :func:`require_controllers` returns it,
or fails the test under ``CI=true`` and skips it elsewhere when they are not
built, as the control planes' own binaries do (:mod:`tests.kube.conftest`).

:class:`Processes` holds the processes one test starts, each logging to a
file of its own, and stops them all however the test ends.  The starters:

* :func:`start_kwok`: KWOK with the admin's kubeconfig, managing one Node by
  name or every Node, playing the stages of ``tests/kube/kwok/stages.yaml``
  (or a file :func:`kwok_stages` composed from it): Nodes Ready, pods bound
  to them Running, a batch Job's pods Succeeded at once;
* :func:`start_controller_manager`: kube-controller-manager with the Job
  controller and the garbage collector only (no leader election, no serving);
* :func:`start_training_operator`: the training operator with ``-kubeconfig``,
  the schemes asked for, its webhook server on a free loopback port, metrics
  and probes off, and the Secret its certificate rotator insists on
  (``training-operator-webhook-cert`` in ``kubeflow``) made first;
  :func:`mount_operator_certs` then copies the serving certificate the
  rotator writes there to where a pod would have it mounted
  (``/tmp/k8s-webhook-server/serving-certs``, fixed in v1.8.1), as the
  operator sets up its controllers only once it is there.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.testing.servers import free_port
from tests.databases import in_ci
from tests.kube.controlplane import ControlPlane, wait_for
from tests.paths import ROOT

CONTROLLERS = ("training-operator.v1", "kwok", "kube-controller-manager")
KWOK_DIR = Path(__file__).parent / "kwok"
STAGES = KWOK_DIR / "stages.yaml"
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


def require_controllers() -> Path:
    """The controllers' directory; the test fails (CI) or is skipped without them."""
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


def kwok_stages(
    out: Path, *, without: Sequence[str] = (), adding: Sequence[Path] = (), base: Path = STAGES
) -> Path:
    """A stages file: ``base``'s stages but those named in ``without``, then ``adding``'s."""
    stages: list[Any] = [
        s
        for s in yaml.safe_load_all(base.read_text())
        if s and s["metadata"]["name"] not in without
    ]
    for path in adding:
        stages.extend(s for s in yaml.safe_load_all(path.read_text()) if s)
    out.write_text(yaml.safe_dump_all(stages))
    return out


def start_kwok(
    procs: Processes,
    bin_dir: Path,
    kubeconfig: Path,
    *,
    node: str | None = None,
    stages: Path = STAGES,
) -> None:
    """KWOK managing Node ``node`` (None: every Node) with the stages of ``stages``."""
    manage = (
        ["--manage-all-nodes=false", f"--manage-single-node={node}"]
        if node is not None
        else ["--manage-all-nodes=true"]
    )
    procs.start(
        "kwok",
        [
            str(bin_dir / "kwok"),
            f"--kubeconfig={kubeconfig}",
            f"--config={stages}",
            *manage,
            "--node-lease-duration-seconds=0",  # heartbeats by the node-heartbeat stage
            "--cidr=10.0.1.0/24",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{free_port()}",
        ],
    )


def start_controller_manager(
    procs: Processes,
    bin_dir: Path,
    kubeconfig: Path,
    controllers: Sequence[str] = ("job-controller", "garbage-collector-controller"),
) -> None:
    """kube-controller-manager running ``controllers`` only, as the admin."""
    procs.start(
        "kube-controller-manager",
        [
            str(bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--controllers={','.join(controllers)}",
            "--leader-elect=false",
            "--secure-port=0",
            "--use-service-account-credentials=false",
        ],
    )


def start_training_operator(
    procs: Processes,
    plane: ControlPlane,
    bin_dir: Path,
    kubeconfig: Path,
    schemes: Sequence[str] = ("pytorchjob",),
) -> None:
    """The training operator for ``schemes``; then :func:`mount_operator_certs`."""
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
            *(f"-enable-scheme={s}" for s in schemes),
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


def wait_node_ready(procs: Processes, plane: ControlPlane, node: str) -> dict[str, Any]:
    """The Node once it is Ready (KWOK's node stages), checking that every process runs."""

    def ready() -> dict[str, Any] | None:
        procs.check()
        found = plane.admin.get(f"/api/v1/nodes/{node}")
        conditions = (found.get("status") or {}).get("conditions") or []
        ok = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return found if ok else None

    return dict(wait_for(ready, f"KWOK to make Node {node} Ready", 60))
