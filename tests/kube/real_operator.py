"""The real controllers of each session member, and what tests do with them.

Theory of operation: :class:`MemberControllers` runs, out of cluster against
one :class:`~tests.kube.controlplane.ControlPlane`, the processes a member's
nodes and workloads need for the whole session (:mod:`tests.kube.conftest`
starts one per member and restarts it when a process died or the API server
was restarted: :meth:`MemberControllers.stale`).  It decides which
controllers run and how they are configured; :mod:`tests.kube.controllers`
starts them (flags, the operator's Secret and certificate) and holds the
processes (:class:`~tests.kube.controllers.Processes`):

* **KWOK** plays the kubelets of the Nodes labelled :data:`KWOK_LABEL`, with
  the upstream stages of ``tests/kube/kwok/stages.yaml`` but ``pod-complete``
  (:data:`STAGES_LEFT_OUT`): such a Node is made Ready (its capacity kept)
  and heartbeats; a pod bound to it (by Fleet) becomes Running with an IP; a
  pod being deleted goes; a pod ends only when a test ends it
  (:func:`end_pods`, or a stand-in's own), since ``pod-complete`` would end
  at once every pod owned by a kind named ``Job`` (a Volcano Job's too).
  A Node whose label is taken away (:func:`lose_node`) has no kubelet any
  more, and the test may make it NotReady;
* **the garbage collector** (kube-controller-manager with that controller
  alone): what a workload owns (its pods, the operator's Services, an
  MPIJob's ConfigMap and RBAC, a Volcano Job's PodGroup) goes once it is
  deleted, as in a cluster (a new run of a name would otherwise find its pod
  names taken by the old run's pods);
* **the Kubeflow training operator v1** for PyTorchJob, TFJob and MPIJob v1
  (:data:`~tests.kube.controllers.SCHEMES`), ``-controller-threads`` as
  asked; :meth:`MemberControllers.start` returns once its serving
  certificate is in place and every controller's workers started.

The kinds whose controllers cannot be built here are played by the
stand-ins of :mod:`tests.kube.standins` beside these (a stand-in controller
does not play the kubelets on a session member: KWOK does).

A training job's containers never run (the images are never pulled), so
they never exit by themselves: :func:`end_pods` ends a job's pods the way a
kubelet reports containers that exit (each container ``terminated`` with its
exit code, the pod ``Succeeded`` or ``Failed``, not Ready), and the operator
then sets the job's own ``Succeeded`` or ``Failed`` condition from them, as
it does in a cluster.  A job meant to fail has ``restartPolicy: Never`` (with
``OnFailure`` a kubelet restarts the container and the pod never fails).

:meth:`MemberControllers.pause` stops KWOK and the operator (``SIGSTOP``)
while a test lets a stand-in play their part, and resumes them
(``SIGCONT``).  Each process logs to a file in the directory given;
:meth:`MemberControllers.tails` shows the last lines for an assertion message.
"""

from __future__ import annotations

import contextlib
import datetime
import signal
import time
from pathlib import Path
from typing import Any

from tests.kube.controllers import (
    SCHEMES,
    Processes,
    kwok_stages,
    mount_operator_certs,
    start_controller_manager,
    start_kwok,
    start_training_operator,
    wait_operator_started,
)
from tests.kube.controlplane import ADMIN_TOKEN, Admin, ApiError, ControlPlane

#: The label of the Nodes KWOK plays the kubelet of.
KWOK_LABEL = ("fleet.test/kubelet", "kwok")
#: The stages of ``tests/kube/kwok/stages.yaml`` a member's KWOK does not play.
STAGES_LEFT_OUT = ("pod-complete",)
#: The label the operator puts on every pod of a job (its value: the job's name).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
#: The processes :meth:`MemberControllers.pause` stops.
PAUSED = ("kwok", "training-operator")


class MemberControllers:
    """KWOK, the garbage collector and the training operator of one member; see the module."""

    def __init__(
        self, plane: ControlPlane, bin_dir: Path, log_dir: Path, *, threads: int = 1
    ) -> None:
        self.plane = plane
        self.bin_dir = bin_dir
        self.log_dir = log_dir
        self.threads = threads
        self.procs = Processes(log_dir)
        self.paused = False
        #: The API server process they started against (see :meth:`stale`).
        self.apiserver_pid: int | None = None

    # Start and stop ----------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> MemberControllers:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.apiserver_pid = self.plane.apiserver.pid if self.plane.apiserver else None
        kubeconfig = self.plane.kubeconfig(ADMIN_TOKEN, self.log_dir / "admin.kubeconfig")
        stages = kwok_stages(self.log_dir / "stages.yaml", without=STAGES_LEFT_OUT)
        start_kwok(self.procs, self.bin_dir, kubeconfig, label=KWOK_LABEL, stages=stages)
        start_controller_manager(
            self.procs, self.bin_dir, kubeconfig, ("garbage-collector-controller",)
        )
        schemes = tuple(SCHEMES)
        start_training_operator(
            self.procs, self.plane, self.bin_dir, kubeconfig, schemes, threads=self.threads
        )
        mount_operator_certs(self.procs, self.plane, timeout)
        wait_operator_started(self.procs, schemes, timeout)
        return self

    def alive(self) -> bool:
        return self.procs.alive()

    def stale(self) -> bool:
        """Whether the API server was restarted since they started.

        Their watches then come back only after client-go's backoff (up to
        half a minute), far slower than the next test; they are restarted.
        """
        apiserver = self.plane.apiserver
        return apiserver is None or apiserver.pid != self.apiserver_pid

    def check(self) -> None:
        """AssertionError with its log when a process has exited."""
        self.procs.check()

    def pause(self, paused: bool = True) -> None:
        """Stop (``SIGSTOP``) or resume (``SIGCONT``) KWOK and the operator."""
        if paused == self.paused:
            return
        self.procs.signal(PAUSED, signal.SIGSTOP if paused else signal.SIGCONT)
        self.paused = paused

    def stop(self) -> None:
        self.procs.stop()
        self.paused = False

    def tails(self) -> str:
        return self.procs.tails()

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
