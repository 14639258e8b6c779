"""The real member controllers, started out of cluster against a test control plane.

Theory of operation: ``scripts/controller-binaries`` builds the Kubeflow
training operator (v1.8.1), KWOK (v0.8.0) and kube-controller-manager
(v1.34.4) from their Go modules; ``FLEET_CONTROLLERS_BIN`` names their
directory (else the script is asked where its cache is):
:func:`controller_binaries` finds it, :func:`require_controllers` returns it
or fails the test under ``CI=true`` and skips it elsewhere when they are not
built, as the control planes' own binaries do (:mod:`tests.kube.conftest`).

This module is the one place that knows how each controller is started;
its users decide which run where and for how long:
:class:`~tests.kube.real_operator.MemberControllers` runs all three in each
session member for the whole session, ``tests/kube/test_kind_batch.py`` runs
KWOK and the Job controller in its own member for its module, and
``tests/kube/test_real_controllers.py`` KWOK and the operator in a control
plane of its own for one test.

:class:`Processes` holds the processes started, each logging to a file of
its own (appended to across restarts), and stops them all however the test
ends; it also stops and resumes some of them (``SIGSTOP``/``SIGCONT``).
The starters:

* :func:`start_kwok`: KWOK with the admin's kubeconfig, managing one Node by
  name, the Nodes with a label, or every Node, playing the stages of
  ``tests/kube/kwok/stages.yaml`` (or a file :func:`kwok_stages` composed
  from it): Nodes Ready, pods bound to them Running, a pod owned by a
  ``Job`` (any group's) Succeeded at once unless that stage is left out;
* :func:`start_controller_manager`: kube-controller-manager with the
  controllers asked for (the Job controller and the garbage collector by
  default), no leader election, no serving;
* :func:`start_training_operator`: the training operator with ``-kubeconfig``,
  the schemes asked for, its webhook server on a free loopback port, metrics
  and probes off, and the Secret its certificate rotator insists on
  (``training-operator-webhook-cert`` in ``kubeflow``) made first (one made
  earlier is kept); :func:`mount_operator_certs` then puts a serving
  certificate where a pod would have the Secret mounted
  (:data:`OPERATOR_CERT_DIR`, fixed in v1.8.1), as the operator sets up its
  controllers only once ``tls.crt`` is there, and :func:`wait_operator_started`
  waits until every controller's workers run.  That directory is shared by
  every operator on the machine (other test sessions' too): no
  ValidatingWebhookConfiguration is installed, so no webhook is ever called
  and any valid pair will do.  A pair already there is kept, a missing one
  is written under a lock, key then certificate, each by a rename, and
  nothing ever removes it.
"""

from __future__ import annotations

import base64
import fcntl
import os
import signal
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.testing.servers import free_port
from tests.databases import in_ci
from tests.kube.controlplane import ApiError, ControlPlane, cached_binaries, wait_for

CONTROLLERS = ("training-operator.v1", "kwok", "kube-controller-manager")
KWOK_DIR = Path(__file__).parent / "kwok"
STAGES = KWOK_DIR / "stages.yaml"
#: The training operator's kinds, as ``-enable-scheme`` names them, and the
#: controllers (by their log name) whose workers must have started.
SCHEMES = {
    "pytorchjob": "pytorchjob-controller",
    "tfjob": "tfjob-controller",
    "mpijob": "mpijob-controller",
}
#: Where the operator's certificate rotator keeps its Secret (MY_POD_NAMESPACE).
OPERATOR_NAMESPACE = "kubeflow"
OPERATOR_SECRET = "training-operator-webhook-cert"
#: Where the operator (v1.8.1, a constant) expects that Secret mounted, as a pod would.
OPERATOR_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")


def controller_binaries() -> Path | None:
    """The directory with the controllers, or None when they are not built."""
    return cached_binaries("FLEET_CONTROLLERS_BIN", "controller-binaries", CONTROLLERS)


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
    """Processes started for a test or a session, each logging to a file; see the module."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        #: Where each process's log began at its last start.
        self.log_starts: dict[str, int] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}.log").open("ab") as log:
            self.log_starts[name] = log.tell()
            self.procs[name] = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
            )

    def alive(self) -> bool:
        """Whether some were started and every one still runs."""
        return bool(self.procs) and all(p.poll() is None for p in self.procs.values())

    def check(self) -> None:
        """AssertionError with its log when a process has exited."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited ({proc.returncode}):\n{self.tail(name)}")

    def signal(self, names: Iterable[str], signum: signal.Signals) -> None:
        """Send ``signum`` to the running processes named."""
        for name in names:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signum)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def log(self, name: str) -> str:
        """What the process has logged since its last start."""
        with (self.log_dir / f"{name}.log").open("rb") as f:
            f.seek(self.log_starts.get(name, 0))
            return f.read().decode(errors="replace")

    def tail(self, name: str, lines: int = 40) -> str:
        f = self.log_dir / f"{name}.log"
        text = f.read_text(errors="replace") if f.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def tails(self) -> str:
        return "\n".join(f"--- {name}\n{self.tail(name)}" for name in self.procs)

    def stop(self) -> None:
        """SIGTERM (after SIGCONT, for a stopped one) to each, SIGKILL after 20 s; forget them."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


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
    label: tuple[str, str] | None = None,
    stages: Path = STAGES,
) -> None:
    """KWOK managing Node ``node``, or the Nodes labelled ``label``, or (neither) every Node."""
    if node is not None:
        manage = ["--manage-all-nodes=false", f"--manage-single-node={node}"]
    elif label is not None:
        selector = "=".join(label)
        manage = ["--manage-all-nodes=false", f"--manage-nodes-with-label-selector={selector}"]
    else:
        manage = ["--manage-all-nodes=true"]
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
    *,
    threads: int = 1,
) -> None:
    """The training operator for ``schemes``; then :func:`mount_operator_certs`."""
    # Its certificate rotator updates this Secret and fails at once without
    # it; without a ValidatingWebhookConfiguration it only logs, and no
    # admission webhook of the operator is called.
    plane.namespace(OPERATOR_NAMESPACE)
    try:
        plane.admin.request(
            "POST",
            f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": OPERATOR_SECRET}},
        )
    except ApiError as e:
        if e.status != 409:  # 409: made by an earlier start, with its certificate
            raise
    procs.start(
        "training-operator",
        [
            str(bin_dir / "training-operator.v1"),
            f"-kubeconfig={kubeconfig}",
            *(f"-enable-scheme={s}" for s in schemes),
            f"-controller-threads={threads}",
            f"-webhook-server-port={free_port()}",
            "-metrics-bind-address=0",
            "-health-probe-bind-address=0",
            "-leader-elect=false",
            "-zap-log-level=info",
        ],
        env={"MY_POD_NAMESPACE": OPERATOR_NAMESPACE},
    )


def mount_operator_certs(procs: Processes, plane: ControlPlane, timeout: float = 60.0) -> None:
    """Put a serving certificate where the operator waits for its Secret mounted.

    In a cluster the kubelet mounts the Secret; here the pair the operator's
    rotator wrote in it is copied unless a pair is there already (see the
    module docstring).
    """

    def certificate() -> dict[str, str] | None:
        procs.check()
        path = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets/{OPERATOR_SECRET}"
        secret = plane.admin.get(path)
        data = secret.get("data") or {}
        return data if "tls.crt" in data and "tls.key" in data else None

    data = wait_for(certificate, "the operator's serving certificate in its Secret", timeout)
    OPERATOR_CERT_DIR.mkdir(parents=True, exist_ok=True)
    with (OPERATOR_CERT_DIR.parent / "serving-certs.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (OPERATOR_CERT_DIR / "tls.crt").exists():
            return
        for name in ("tls.key", "tls.crt"):  # the rotator looks for tls.crt: last
            path = OPERATOR_CERT_DIR / name
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(base64.b64decode(data[name]))
            tmp.replace(path)


def wait_operator_started(
    procs: Processes, schemes: Sequence[str] = ("pytorchjob",), timeout: float = 60.0
) -> None:
    """Until the operator logs (since its start) that every scheme's controller runs workers."""

    def started() -> bool:
        procs.check()
        lines = procs.log("training-operator").splitlines()
        begun = [line for line in lines if "Starting workers" in line]
        return all(any(f'"controller": "{SCHEMES[s]}"' in line for line in begun) for s in schemes)

    wait_for(started, "the training operator's controllers", timeout, interval=0.2)


def wait_node_ready(procs: Processes, plane: ControlPlane, node: str) -> dict[str, Any]:
    """The Node once it is Ready (KWOK's node stages), checking that every process runs."""

    def ready() -> dict[str, Any] | None:
        procs.check()
        found = plane.admin.get(f"/api/v1/nodes/{node}")
        conditions = (found.get("status") or {}).get("conditions") or []
        ok = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return found if ok else None

    return dict(wait_for(ready, f"KWOK to make Node {node} Ready", 60))
