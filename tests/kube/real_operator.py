"""The real training operator and KWOK for a member control plane, as the member tests run them.

Theory of operation: :class:`MemberControllers` runs, out of cluster against
one :class:`~tests.kube.controlplane.ControlPlane`, the processes a
member's nodes and training jobs need, from the binaries that
``scripts/controller-binaries`` builds (:func:`controller_binaries`):

* **KWOK** plays the kubelets of the Nodes labelled :data:`KWOK_LABEL`
  (``--manage-nodes-with-label-selector``), with the upstream stages of
  ``tests/kube/kwok/stages.yaml``: such a Node is made Ready (its capacity
  kept) and heartbeats; a pod bound to it (by Fleet) becomes Running with an
  IP; a pod being deleted goes.  A Node whose label is taken away
  (:func:`lose_node`) has no kubelet any more, and the test may make it
  NotReady;
* **the garbage collector** (kube-controller-manager with that controller
  alone): what a job owns (its pods, the operator's Services, an MPIJob's
  ConfigMap and RBAC) goes once the job is deleted, as in a cluster (a new run
  of a name would otherwise find its pod names taken by the old run's pods);
* **the Kubeflow training operator v1** (PyTorchJob, TFJob and MPIJob v1:
  :data:`SCHEMES`) with ``-kubeconfig`` (the admin's), its webhook server on a
  free port, metrics and probes off, no leader election.  Its certificate
  rotator insists on a Secret (``training-operator-webhook-cert`` in
  ``kubeflow``, made first) and the operator sets up its controllers only once
  the serving certificate it writes there is where a pod would have it
  mounted (:data:`OPERATOR_CERT_DIR`, fixed in v1.8.1): it is copied there.
  No ValidatingWebhookConfiguration is installed, so no admission webhook of
  the operator is ever called.  :meth:`MemberControllers.start` returns once
  the operator logs that every controller's workers started.

A training job's containers never run (the images are never pulled), so
they never exit by themselves: :func:`end_pods` ends a job's pods the way a
kubelet reports containers that exit (each container ``terminated`` with its
exit code, the pod ``Succeeded`` or ``Failed``, not Ready), and the operator
then sets the job's own ``Succeeded`` or ``Failed`` condition from them, as
it does in a cluster.  A job meant to fail has ``restartPolicy: Never`` (with
``OnFailure`` a kubelet restarts the container and the pod never fails).

:meth:`MemberControllers.pause` stops KWOK and the operator (``SIGSTOP``)
while a test lets a stand-in play their part, and resumes them
(``SIGCONT``).  Each
process logs to a file in the directory given; :meth:`MemberControllers.tails`
shows the last lines for an assertion message.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from fleet.testing.servers import free_port
from tests.kube.controlplane import ADMIN_TOKEN, Admin, ApiError, ControlPlane, wait_for
from tests.paths import ROOT

CONTROLLERS = ("training-operator.v1", "kwok", "kube-controller-manager")
STAGES = Path(__file__).parent / "kwok" / "stages.yaml"
#: The label of the Nodes KWOK plays the kubelet of.
KWOK_LABEL = ("fleet.test/kubelet", "kwok")
#: The training operator's kinds, as ``-enable-scheme`` names them, and the
#: controllers (by their log name) that must be started.
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
#: The label the operator puts on every pod of a job (its value: the job's name).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"


def controller_binaries() -> Path | None:
    """The directory with the operator and KWOK, or None when they are not built."""
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


class MemberControllers:
    """KWOK and the training operator for one control plane; see the module docstring."""

    def __init__(
        self, plane: ControlPlane, bin_dir: Path, log_dir: Path, *, threads: int = 1
    ) -> None:
        self.plane = plane
        self.bin_dir = bin_dir
        self.log_dir = log_dir
        self.threads = threads
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.paused = False
        #: The API server process they started against (see :meth:`stale`).
        self.apiserver_pid: int | None = None

    # Start and stop ----------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> MemberControllers:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.apiserver_pid = self.plane.apiserver.pid if self.plane.apiserver else None
        kubeconfig = self.plane.kubeconfig(ADMIN_TOKEN, self.log_dir / "admin.kubeconfig")
        self.start_kwok(kubeconfig)
        self.start_garbage_collector(kubeconfig)
        self.start_operator(kubeconfig, timeout)
        return self

    def start_garbage_collector(self, kubeconfig: Path) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig}",
                "--controllers=garbage-collector-controller",
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=false",
            ],
        )

    def start_kwok(self, kubeconfig: Path) -> None:
        key, value = KWOK_LABEL
        self._spawn(
            "kwok",
            [
                str(self.bin_dir / "kwok"),
                f"--kubeconfig={kubeconfig}",
                f"--config={STAGES}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-label-selector={key}={value}",
                "--node-lease-duration-seconds=0",  # heartbeats by the node-heartbeat stage
                "--cidr=10.0.1.0/24",
                "--node-ip=127.0.0.1",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
        )

    def start_operator(self, kubeconfig: Path, timeout: float) -> None:
        admin = self.plane.admin
        self.plane.namespace(OPERATOR_NAMESPACE)
        # Its certificate rotator updates this Secret and fails at once without it.
        with contextlib.suppress(ApiError):  # 409: there from an earlier start
            admin.request(
                "POST",
                f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets",
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": OPERATOR_SECRET}},
            )
        self._spawn(
            "training-operator",
            [
                str(self.bin_dir / "training-operator.v1"),
                f"-kubeconfig={kubeconfig}",
                *(f"-enable-scheme={scheme}" for scheme in SCHEMES),
                f"-controller-threads={self.threads}",
                f"-webhook-server-port={free_port()}",
                "-metrics-bind-address=0",
                "-health-probe-bind-address=0",
                "-leader-elect=false",
                "-zap-log-level=info",
            ],
            env={"MY_POD_NAMESPACE": OPERATOR_NAMESPACE},
        )
        self._mount_certificate(timeout)
        log = self.log_dir / "training-operator.log"

        def started() -> bool:
            self.check()
            lines = log.read_text(errors="replace").splitlines()
            begun = [line for line in lines if "Starting workers" in line]
            return all(
                any(f'"controller": "{name}"' in line for line in begun)
                for name in SCHEMES.values()
            )

        wait_for(started, "the training operator's controllers", timeout, interval=0.2)

    def _mount_certificate(self, timeout: float) -> None:
        """Write the serving certificate the operator put in its Secret where it waits for it.

        In a cluster the kubelet mounts the Secret; any certificate will do
        here, since nothing calls the webhooks, so one already there is kept
        (another member's operator may have written it).
        """

        def certificate() -> dict[str, str] | None:
            self.check()
            secret = self.plane.admin.get(
                f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets/{OPERATOR_SECRET}"
            )
            data = secret.get("data") or {}
            return data if "tls.crt" in data and "tls.key" in data else None

        data = wait_for(certificate, "the operator's serving certificate in its Secret", timeout)
        OPERATOR_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.key", "tls.crt"):  # the rotator looks for tls.crt: last
            path = OPERATOR_CERT_DIR / name
            if not path.exists():
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_bytes(base64.b64decode(data[name]))
                tmp.replace(path)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        with (self.log_dir / f"{name}.log").open("ab") as log:
            self.procs[name] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
            )

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs.values())

    def stale(self) -> bool:
        """Whether the API server was restarted since they started.

        Their watches then come back only after client-go's backoff (up to
        half a minute), far slower than the next test; they are restarted.
        """
        apiserver = self.plane.apiserver
        return apiserver is None or apiserver.pid != self.apiserver_pid

    def check(self) -> None:
        """AssertionError with its log when a process has exited."""
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited ({proc.returncode}):\n{self.tail(name)}")

    def pause(self, paused: bool = True) -> None:
        """Stop (``SIGSTOP``) or resume (``SIGCONT``) KWOK and the operator."""
        if paused == self.paused:
            return
        for name in ("kwok", "training-operator"):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)
        self.paused = paused

    def stop(self) -> None:
        self.pause(False)
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def tail(self, name: str, lines: int = 40) -> str:
        f = self.log_dir / f"{name}.log"
        text = f.read_text(errors="replace") if f.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def tails(self) -> str:
        return "\n".join(f"--- {name}\n{self.tail(name)}" for name in self.procs)

    # What tests do -----------------------------------------------------------------

    def finish(self, namespace: str, name: str, *, succeeded: bool = True) -> None:
        """End job ``name`` as its containers would: every pod exits 0, or one exits 1."""
        end_pods(self.plane.admin, namespace, name, succeeded=succeeded)


def kwok_node(plane: ControlPlane, node: str, managed: bool = True) -> None:
    """Give Node ``node`` to KWOK (its kubelet), or take it away."""
    key, value = KWOK_LABEL
    plane.admin.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        {"metadata": {"labels": {key: value if managed else None}}},
        content_type="application/merge-patch+json",
    )


def lose_node(plane: ControlPlane, node: str) -> None:
    """Node ``node``'s kubelet goes away: KWOK lets it go, and it is NotReady."""
    kwok_node(plane, node, False)
    time.sleep(0.2)  # a heartbeat KWOK was writing lands before, not after
    plane.set_node_ready(node, False)


def end_pods(admin: Admin, namespace: str, job: str, *, succeeded: bool = True) -> None:
    """End the pods of training job ``job`` as a kubelet reports containers that exit.

    Succeeded: every container of every pod exits 0.  Failed: one pod's (the
    first by name) containers exit 1.
    """
    pods = admin.items(
        f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"{JOB_NAME_LABEL}={job}"
    )
    pods.sort(key=lambda p: p["metadata"]["name"])
    if not succeeded:
        pods = pods[:1]
    code = 0 if succeeded else 1
    for pod in pods:
        with contextlib.suppress(ApiError):
            admin.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status",
                {"status": exited(pod, code)},
                content_type="application/merge-patch+json",
            )


def exited(pod: dict[str, Any], code: int) -> dict[str, Any]:
    """The status a kubelet writes once every container of ``pod`` exited with ``code``."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    started = {
        s["name"]: ((s.get("state") or {}).get("running") or {}).get("startedAt", now)
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    }
    statuses = [
        {
            "name": c["name"],
            "image": c["image"],
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": started.get(c["name"], now),
                    "finishedAt": now,
                }
            },
        }
        for c in pod["spec"]["containers"]
    ]
    conditions = [
        {**c, "status": "False", "lastTransitionTime": now, "reason": "PodCompleted"}
        if c.get("type") in ("Ready", "ContainersReady")
        else c
        for c in (pod.get("status") or {}).get("conditions") or []
    ]
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "containerStatuses": statuses,
        "conditions": conditions,
    }
