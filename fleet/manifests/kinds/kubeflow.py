"""What the Kubeflow training operator's v1 kinds share (PyTorchJob, TFJob, MPIJob v1).

Theory of operation: a v1 job is a map of replica specs (role -> replicas and
pod template) plus ``runPolicy.schedulingPolicy`` (queue, priority class,
``minAvailable``) and ``runPolicy.activeDeadlineSeconds`` (the job's own
deadline, which Fleet counts over every run).  The operator reports the job's phase as conditions
(``Created``, ``Running``, ``Restarting``, ``Succeeded``, ``Failed``) and
labels each pod with its replica type (lowercased) and index
(``training.kubeflow.org/replica-type`` and ``-index``).  A kind module says
which field holds its replica specs and which roles it runs, in placement
order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

from pydantic import StrictInt, StrictStr

from fleet.core.digits import parse_digits
from fleet.manifests import models
from fleet.manifests.errors import Problem, quote
from fleet.manifests.kinds import base, pods
from fleet.manifests.kinds.base import JSON, Decorate, Phase, PodSet
from fleet.manifests.models import ReplicaCount

API_VERSION: Final = "kubeflow.org/v1"
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
_PHASES: Final = {p.value: p for p in Phase}


class ReplicaSpec(models._Foreign):
    replicas: ReplicaCount = 1
    template: pods.PodTemplate


class SchedulingPolicy(models._Foreign):
    queue: StrictStr | None = None
    priority_class: StrictStr | None = None
    min_available: ReplicaCount | None = None


class RunPolicy(models._Foreign):
    scheduling_policy: SchedulingPolicy | None = None
    active_deadline_seconds: StrictInt | None = None


SCHEDULING: Final = "spec.runPolicy.schedulingPolicy"


class TrainingSpec(models._Foreign):
    """A v1 job's spec; each kind gives ``replica_specs`` its Kubernetes name."""

    replica_specs: dict[str, ReplicaSpec]
    run_policy: RunPolicy | None = None


class TrainingJobModel(base.WorkloadModel):
    """A v1 training job; subclasses name the replica-spec field and the roles."""

    #: The spec field of the replica specs (``pytorchReplicaSpecs``).
    REPLICA_FIELD: ClassVar[str]
    #: The roles the kind runs, in placement order (the operator's spelling).
    ROLES: ClassVar[tuple[str, ...]]
    spec: TrainingSpec

    @property
    def scheduling_policy(self) -> SchedulingPolicy:
        rp = self.spec.run_policy
        return rp.scheduling_policy if rp and rp.scheduling_policy else SchedulingPolicy()

    def replica_groups(self) -> list[tuple[str, ReplicaSpec]]:
        """``(role, spec)`` in placement order."""
        specs = self.spec.replica_specs
        return [(role, specs[role]) for role in self.ROLES if role in specs]

    def templates(self) -> list[tuple[str, str, pods.PodTemplate]]:
        base_path = f"spec.{self.REPLICA_FIELD}"
        return [
            (role, f"{base_path}.{role}.template", rs.template)
            for role, rs in self.replica_groups()
        ]

    def pod_sets(self, problems: list[Problem]) -> list[PodSet]:
        out: list[PodSet] = []
        for role, rs in self.replica_groups():
            path = f"spec.{self.REPLICA_FIELD}.{role}"
            per_pod = pods.pod_request(rs.template, f"{path}.template", problems)
            out.append(PodSet(role, path, self.pods_of(role, rs), per_pod, f"{path}.template"))
        return out

    def pods_of(self, role: str, rs: ReplicaSpec) -> int:
        """The most pods of ``role`` the job may have."""
        return rs.replicas

    def pods_path(self) -> str:
        return f"spec.{self.REPLICA_FIELD}"

    def gang_minimum(self) -> tuple[int, str]:
        found = self.scheduling_policy.min_available
        return (found or 0), f"{SCHEDULING}.minAvailable"

    def queue_field(self) -> tuple[str | None, str]:
        return self.scheduling_policy.queue, f"{SCHEDULING}.queue"

    def deadline_field(self) -> tuple[int | None, str]:
        rp = self.spec.run_policy
        return (rp.active_deadline_seconds if rp else None), "spec.runPolicy.activeDeadlineSeconds"

    def priority_field(self) -> tuple[str | None, str]:
        return self.scheduling_policy.priority_class, f"{SCHEDULING}.priorityClass"

    def kind_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        specs = self.spec.replica_specs
        for extra in sorted(set(specs) - set(self.ROLES)):
            runs = " and ".join(self.ROLES) if len(self.ROLES) == 2 else ", ".join(self.ROLES)
            problems.append(
                (
                    f"spec.{self.REPLICA_FIELD}.{extra}",
                    f"replica type {quote(extra)} is not supported; Fleet runs {runs}",
                )
            )
        if not self.replica_groups():
            roles = " or a ".join(self.ROLES)
            problems.append((f"spec.{self.REPLICA_FIELD}", f"needs a {roles} replica spec"))
        return problems


class TrainingKind(base.Kind):
    """The member half of a v1 training job."""

    api_version = API_VERSION
    #: The spec field of the replica specs.
    replica_field: ClassVar[str]

    def member_spec(
        self, spec: Mapping[str, Any], counts: Mapping[str, int], decorate: Decorate
    ) -> JSON:
        out = dict(spec)
        replicas = dict(out.get(self.replica_field) or {})
        for role, replica in list(replicas.items()):
            count = counts.get(role, 0)
            if not count:
                del replicas[role]
                continue
            replica = dict(replica)
            replica["replicas"] = count
            replica["template"] = decorate(role, replica.get("template") or {})
            replicas[role] = replica
        out[self.replica_field] = replicas
        return out

    def resize_patch(self, spec: Mapping[str, Any]) -> JSON:
        return {"spec": {self.replica_field: spec[self.replica_field]}}

    def phase(self, obj: Mapping[str, Any]) -> tuple[Phase | None, str]:
        return base.condition_phase(obj, _PHASES)

    def replica(self, pod: Mapping[str, Any]) -> tuple[str, int | None] | None:
        found = base.labels(pod)
        role = found.get(REPLICA_TYPE_LABEL)
        index = found.get(REPLICA_INDEX_LABEL)
        number = parse_digits(index) if isinstance(index, str) else None
        if not isinstance(role, str) or not role or number is None:
            return None
        return role, number
