"""The interface of a workload kind: a document model and a member half.

Theory of operation: see the package docstring.  :class:`WorkloadModel` is
what every kind's pydantic model provides; its :meth:`~WorkloadModel.problems`
runs the checks shared by every kind (each pod's requests, the GPU type,
Fleet's annotations, fields only Fleet may set) after the kind's own
(:meth:`~WorkloadModel.kind_problems`).  :class:`Kind` is the member half.
Nothing here does I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Final

from fleet.core.resources import Resources
from fleet.manifests import models
from fleet.manifests.errors import Problem, quote
from fleet.manifests.kinds import pods
from fleet.manifests.models import ObjectMeta, parse_duration

JSON = dict[str, Any]
#: Registered objects a workload may refer to (Trainer's runtimes), their plain
#: documents by key (:func:`fleet.manifests.kinds.trainjob.runtime_key`).
Runtimes = Mapping[str, Mapping[str, Any]]
#: Decorates one pod template of a member object (Fleet's labels, scheduler,
#: planned nodes): ``(role, template) -> template``.
Decorate = Callable[[str, Mapping[str, Any]], JSON]


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` identical pods of one role, as a kind declares them.

    ``path`` is the field path of the set in the document (messages name it);
    ``template`` the path of its pod template.  ``minimum`` is how many pods
    of this set the gang needs (0: the set has no minimum of its own).
    """

    role: str
    path: str
    count: int
    per_pod: Resources
    template: str
    minimum: int = 0


@dataclass(frozen=True, slots=True)
class Dependency:
    """An object a member must hold before a job's object: ``body`` in collection ``path``."""

    path: str
    body: JSON


class Phase(StrEnum):
    """A member object's phase, as Fleet reads it from the kind's status."""

    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class WorkloadModel(models.Namespaced, models._Foreign):
    """A workload document of some kind (tolerant: unknown fields are the schema's to judge)."""

    #: The member half of this model's kind (set by each kind module).
    KIND: ClassVar[Kind]
    api_version: str
    kind: str
    metadata: ObjectMeta

    # What each kind says --------------------------------------------------------------

    @abstractmethod
    def templates(self) -> list[tuple[str, str, pods.PodTemplate]]:
        """``(role, field path of the template, template)`` of every pod set, in order."""

    @abstractmethod
    def pod_sets(self, problems: list[Problem]) -> list[PodSet]:
        """The pod sets in placement order; problems of their requests are appended."""

    def pods_path(self) -> str:
        """The field path of the pod sets as a whole (messages about all pods name it)."""
        return "spec"

    def gang_minimum(self) -> tuple[int, str]:
        """Pods the gang needs in total (0: every pod) and the field that says so."""
        return 0, ""

    def declared_minimum(self) -> tuple[int, str]:
        """The gang's size as the document states it outright (checked against its pods)."""
        return self.gang_minimum()

    def start_pods(self) -> int:
        """Pods an elastic job starts with at most (0: every pod)."""
        return 0

    def queue_field(self) -> tuple[str | None, str]:
        """The queue the document names, if any, and the field path where it would be."""
        return None, ""

    def priority_field(self) -> tuple[str | None, str]:
        """The priority class the document names, if any, and the field path where it would be."""
        return None, ""

    def deadline_field(self) -> tuple[int | None, str]:
        """The job's own deadline as the document states it (seconds of run time; None:
        none) and the field path where it would be (:mod:`fleet.core.run_limits`)."""
        return None, ""

    def kind_problems(self) -> list[Problem]:
        """The kind's own checks (roles, counts, minimums) beyond its schema."""
        return []

    def resolve(self, runtimes: Runtimes) -> tuple[WorkloadModel, list[Problem]]:
        """The document with what it refers to found among the registered ``runtimes``
        (a TrainJob's runtime), or the problems; most kinds refer to nothing."""
        return self, []

    def stored(self, raw: Mapping[str, Any]) -> Mapping[str, Any]:
        """The document as Fleet stores (and later creates) it, from what was submitted."""
        return raw

    # Shared by every kind -------------------------------------------------------------

    def _sku_sources(self) -> list[tuple[str, str]]:
        """``(field path, SKU)`` of every place that names the GPU type."""
        sources: list[tuple[str, str]] = []
        annotated = self.metadata.annotations.get(models.GPU_TYPE_ANNOTATION)
        if annotated is not None:
            sources.append((f"metadata.annotations.{models.GPU_TYPE_ANNOTATION}", annotated))
        for _, path, template in self.templates():
            sku = template.spec.node_selector.get(models.GPU_PRODUCT_LABEL)
            if sku is not None:
                sources.append((f"{path}.spec.nodeSelector.{models.GPU_PRODUCT_LABEL}", sku))
        return sources

    def gpu_sku_path(self) -> str | None:
        """The field path of the (first) place that names the GPU type, if any."""
        sources = self._sku_sources()
        return sources[0][0] if sources else None

    def gpu_sku(self, problems: list[Problem]) -> str | None:
        """The SKU named by the annotation and/or the templates; they must agree."""
        sources = self._sku_sources()
        if not sources:
            return None
        first_path, first = sources[0]
        for path, sku in sources[1:]:
            if sku != first:
                msg = f"GPU type {quote(sku)} differs from {quote(first)} given at {first_path}"
                problems.append((path, msg))
        if not first:
            problems.append((first_path, "GPU type must not be empty"))
        return first

    @property
    def simulated_duration(self) -> float | None:
        """Seconds the simulated backend runs this job, if the annotation says."""
        text = self.metadata.annotations.get(models.SIM_DURATION_ANNOTATION)
        return None if text is None else parse_duration(text)

    @property
    def simulated_outcome(self) -> str | None:
        return self.metadata.annotations.get(models.SIM_OUTCOME_ANNOTATION)

    def problems(self) -> list[Problem]:
        problems = self.kind_problems()
        sets = self.pod_sets(problems)
        self.gpu_sku(problems)
        minimum, path = self.declared_minimum()
        total = sum(s.count for s in sets)
        if minimum and sets and minimum > total:
            problems.append((path, f"{minimum} is more than the job's {total} replicas"))
        deadline, deadline_path = self.deadline_field()
        if deadline is not None and deadline < 1:
            what = f"{deadline} is not a deadline: it is seconds of run time, at least 1"
            problems.append((deadline_path, what))
        problems.extend(_annotation_problems(self.metadata.annotations))
        problems.extend(
            pods.written_key_problems(
                {"labels": self.metadata.labels, "annotations": self.metadata.annotations},
                "metadata",
            )
        )
        for _, path, template in self.templates():
            problems.extend(pods.template_problems(template, path))
        return problems


def _annotation_problems(ann: Mapping[str, str]) -> list[Problem]:
    out: list[Problem] = []
    base = "metadata.annotations"
    pre = ann.get(models.PREEMPTIBLE_ANNOTATION)
    if pre is not None and pre not in ("true", "false"):
        out.append(
            (
                f"{base}.{models.PREEMPTIBLE_ANNOTATION}",
                f'must be "true" or "false", not {quote(pre)}',
            )
        )
    dur = ann.get(models.SIM_DURATION_ANNOTATION)
    if dur is not None:
        try:
            if parse_duration(dur) <= 0:
                out.append((f"{base}.{models.SIM_DURATION_ANNOTATION}", "must be positive"))
        except ValueError as e:
            out.append((f"{base}.{models.SIM_DURATION_ANNOTATION}", str(e)))
    outcome = ann.get(models.SIM_OUTCOME_ANNOTATION)
    if outcome is not None and outcome not in models.SIM_OUTCOMES:
        out.append(
            (
                f"{base}.{models.SIM_OUTCOME_ANNOTATION}",
                f"must be Succeeded or Failed, not {quote(outcome)}",
            )
        )
    return out


class Kind(ABC):
    """The member half of a workload kind: pure functions over the member's JSON."""

    #: ``group/version`` (``batch/v1``) and kind, as in a document.
    api_version: ClassVar[str]
    kind: ClassVar[str]
    #: The resource's plural in the member's REST paths.
    plural: ClassVar[str]
    #: The model of its documents.
    model: ClassVar[type[WorkloadModel]]
    #: Whether a running object can be given more or fewer pods in place.
    resizable: ClassVar[bool] = False

    @property
    def api_path(self) -> str:
        """The REST path of the kind's group and version (``/apis/kubeflow.org/v1``)."""
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"

    @property
    def name(self) -> str:
        """``Kind.group/version``, as members and messages name the kind."""
        return f"{self.kind}.{self.api_version}"

    @abstractmethod
    def member_spec(
        self, spec: Mapping[str, Any], counts: Mapping[str, int], decorate: Decorate
    ) -> JSON:
        """The object's ``spec`` in a member: each role's pod count and decorated template.

        ``counts`` has the roles that have planned pods; a role without any is
        dropped where the kind allows it (else kept with zero pods).
        """

    def resize_patch(self, spec: Mapping[str, Any]) -> JSON:
        """The merge patch of ``spec`` that writes a resize (only when :attr:`resizable`)."""
        raise NotImplementedError(f"{self.kind} cannot be resized in place")

    def dependencies(
        self, obj: Mapping[str, Any], decorate: Decorate
    ) -> tuple[JSON, list[Dependency]]:
        """The member object as it refers to the objects it needs, and those objects.

        A member creates (or patches to this content) each dependency before
        the object, and then makes the object their owner, so that they go
        with it.  Most kinds need nothing: ``obj`` as it is.
        """
        return dict(obj), []

    @abstractmethod
    def phase(self, obj: Mapping[str, Any]) -> tuple[Phase | None, str]:
        """The object's phase and its message (None: nothing said yet)."""

    @abstractmethod
    def replica(self, pod: Mapping[str, Any]) -> tuple[str, int | None] | None:
        """Which planned pod a member pod is: its role and index (None: any of its role)."""


#: Condition types that end a job, for the kinds that report them as conditions.
ENDED: Final = (Phase.SUCCEEDED, Phase.FAILED)


def conditions(obj: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """``status.conditions`` (empty when absent or malformed)."""
    status = obj.get("status")
    found = status.get("conditions") if isinstance(status, Mapping) else None
    return [c for c in found if isinstance(c, Mapping)] if isinstance(found, list) else []


def condition_phase(obj: Mapping[str, Any], types: Mapping[str, Phase]) -> tuple[Phase | None, str]:
    """The phase from true conditions named in ``types``: an end wins, else the last one."""
    found: Phase | None = None
    message = ""
    for c in conditions(obj):
        if c.get("status") != "True":
            continue
        p = types.get(str(c.get("type")))
        if p is None:
            continue
        text = str(c.get("message") or c.get("reason") or "")
        if p in ENDED:
            return p, text
        found, message = p, text
    return found, message


def labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    found = meta.get("labels") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}
