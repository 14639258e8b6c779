"""Kubeflow ``MPIJob`` v2beta1 (``kubeflow.org/v2beta1``, served by the MPI operator).

Theory of operation: the same document as MPIJob v1 (:mod:`.mpijob_v1`): a
Launcher and its Workers in ``spec.mpiReplicaSpecs``, placed in that order,
and ``spec.runPolicy.schedulingPolicy`` (``minAvailable``, ``queue``,
``priorityClass``); the gang is ``minAvailable`` pods, else every pod; it is
not resized in place (admitted whole).  As the MPI operator validates it, the
Launcher is required and has exactly one replica.  ``slotsPerWorker``,
``launcherCreationPolicy`` (the launcher created at once, or once the workers
are ready: Fleet plans every pod up front either way), ``runLauncherAsWorker``
and ``mpiImplementation`` go to the member unchanged.  ``runPolicy.managedBy``
must be the MPI operator's or MultiKueue's (anything else would leave the
member's MPI operator idle), and it and ``runPolicy.suspend`` are dropped from
the member's copy, for the reasons a batch Job's are (:mod:`.batchjob`).

The member half is the v1 family's (:mod:`.kubeflow`: replica counts and
templates written, phase from the same conditions ``Created``, ``Running``,
``Restarting``, ``Succeeded``, ``Failed``) but for its pods: the MPI operator
labels them ``training.kubeflow.org/job-role`` (``launcher`` or ``worker``),
not with a replica type.  The launcher runs as the pod of a batch Job
(``<job>-launcher``): there is one, matched without an index.  A worker is the
pod ``<job>-worker-<index>``; its index is read from that name, because the
``training.kubeflow.org/replica-index`` label is the index plus one when
``runLauncherAsWorker`` is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final, Literal

from pydantic import StrictStr

from fleet.core.digits import parse_digits
from fleet.manifests.errors import Problem, quote
from fleet.manifests.kinds import base, kubeflow, mpijob_v1
from fleet.manifests.kinds.base import JSON, Decorate

API_VERSION: Final = "kubeflow.org/v2beta1"
ROLE_LABEL: Final = "training.kubeflow.org/job-role"
#: ``runPolicy.managedBy`` values whose MPIJob the member's MPI operator runs.
MANAGERS: Final = ("kubeflow.org/mpi-operator", "kueue.x-k8s.io/multikueue")


class RunPolicy(kubeflow.RunPolicy):
    managed_by: StrictStr | None = None


class MPIJobSpec(mpijob_v1.MPIJobSpec):
    run_policy: RunPolicy | None = None


class MPIJobModel(kubeflow.TrainingJobModel):
    REPLICA_FIELD: ClassVar[str] = mpijob_v1.MPIJobModel.REPLICA_FIELD
    ROLES: ClassVar[tuple[str, ...]] = mpijob_v1.MPIJobModel.ROLES
    api_version: Literal["kubeflow.org/v2beta1"]
    kind: Literal["MPIJob"]
    spec: MPIJobSpec

    def kind_problems(self) -> list[Problem]:
        problems = super().kind_problems()
        launcher = self.spec.replica_specs.get("Launcher")
        if launcher is None:
            problems.append(("spec.mpiReplicaSpecs", "needs a Launcher replica spec"))
        elif launcher.replicas != 1:
            problems.append(
                ("spec.mpiReplicaSpecs.Launcher.replicas", "an MPIJob has exactly 1 Launcher")
            )
        rp = self.spec.run_policy
        managed = rp.managed_by if rp is not None else None
        if managed is not None and managed not in MANAGERS:
            problems.append(
                (
                    "spec.runPolicy.managedBy",
                    f"Fleet runs an MPIJob on its member's MPI operator, which skips one "
                    f"managed by {quote(managed)}; leave it out (or name "
                    f"{' or '.join(MANAGERS)})",
                )
            )
        return problems


class MPIJobKind(kubeflow.TrainingKind):
    api_version = API_VERSION
    kind = "MPIJob"
    plural = "mpijobs"
    model = MPIJobModel
    replica_field = mpijob_v1.MPIJobKind.replica_field

    def member_spec(
        self, spec: Mapping[str, Any], counts: Mapping[str, int], decorate: Decorate
    ) -> JSON:
        out = super().member_spec(spec, counts, decorate)
        run_policy = out.get("runPolicy")
        if isinstance(run_policy, Mapping):
            out["runPolicy"] = {
                k: v for k, v in run_policy.items() if k not in ("suspend", "managedBy")
            }
        return out

    def replica(self, pod: Mapping[str, Any]) -> tuple[str, int | None] | None:
        role = base.labels(pod).get(ROLE_LABEL)
        if role == "launcher":
            return "Launcher", None
        if role != "worker":
            return None
        meta = pod.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or "-worker-" not in name:
            return None
        index = parse_digits(name.rsplit("-", 1)[1])
        return None if index is None else ("Worker", index)


KIND = MPIJobKind()
MPIJobModel.KIND = KIND
