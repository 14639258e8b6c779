"""Pod templates as every workload kind carries them: requests and Fleet's own fields.

Theory of operation: a kind's pod template is Kubernetes' ``PodTemplateSpec``;
Fleet reads each container's requests (falling back to limits per resource,
as Kubernetes defaults them) and the pod's ``nodeSelector`` (where a job may
name its GPU type); the GPU terms of its ``nodeSelector`` and node affinity
are read by :mod:`fleet.manifests.gpu_terms`.  One pod's request is the sum over its containers, at
least its largest init container.  Only Fleet places pods: a template that
names its node or scheduler, or carries a label or annotation Fleet writes
itself (:data:`fleet.manifests.models.FLEET_WRITTEN_KEYS`), is refused at that
field (:func:`template_problems`).  Unknown fields are kept here: the kind's
schema judges them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, StrictStr

from fleet.core import resources
from fleet.core.resources import Resources
from fleet.manifests import models
from fleet.manifests.errors import Problem, quote
from fleet.manifests.models import QuantityMap, parse_resources


class ResourceRequirements(models._Foreign):
    requests: QuantityMap = Field(default_factory=dict)
    limits: QuantityMap = Field(default_factory=dict)


class Container(models._Foreign):
    name: StrictStr | None = None
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)


class PodSpec(models._Foreign):
    containers: Annotated[list[Container], Field(min_length=1)]
    init_containers: list[Container] = Field(default_factory=list)
    node_selector: dict[str, StrictStr] = Field(default_factory=dict)


class PodTemplate(models._Foreign):
    spec: PodSpec


def _container_request(c: Container, path: str, problems: list[Problem]) -> Resources:
    """Requests, falling back to limits per resource (as Kubernetes defaults them)."""
    req, p1 = parse_resources(c.resources.requests, f"{path}.resources.requests")
    lim, p2 = parse_resources(c.resources.limits, f"{path}.resources.limits")
    problems.extend(p1 + p2)
    merged = dict(lim)
    merged.update(req)
    for name, amount in req.items():
        if name in c.resources.limits and amount > lim[name]:
            problems.append(
                (f"{path}.resources.requests.{name}", "request must not exceed the limit")
            )
        elif name == resources.GPU and name in c.resources.limits and amount != lim[name]:
            problems.append(
                (f"{path}.resources.requests.{name}", "request must equal the limit for GPUs")
            )
    return Resources(merged)


def pod_request(template: PodTemplate, path: str, problems: list[Problem]) -> Resources:
    """One pod's request (``path``: the template's): containers summed, at least any init."""
    total = resources.ZERO
    for i, c in enumerate(template.spec.containers):
        total = total + _container_request(c, f"{path}.spec.containers[{i}]", problems)
    for i, c in enumerate(template.spec.init_containers):
        init = _container_request(c, f"{path}.spec.initContainers[{i}]", problems)
        total = Resources({k: max(total[k], init[k]) for k in set(total) | set(init)})
    return total


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def written_key_problems(metadata: Mapping[str, Any], path: str) -> list[Problem]:
    """The labels and annotations under ``metadata`` (at ``path``) that Fleet writes itself."""
    out: list[Problem] = []
    for field in ("labels", "annotations"):
        for key in _mapping(metadata.get(field)):
            if key in models.FLEET_WRITTEN_KEYS:
                out.append(
                    (
                        f"{path}.{field}.{key}",
                        f"{quote(key)} is written by Fleet itself on what it creates; remove it",
                    )
                )
    return out


def template_problems(template: PodTemplate, path: str) -> list[Problem]:
    """What would let a pod template place its own pods or pass for Fleet's own writing.

    A pod template may not name its node (``nodeName`` skips every scheduler)
    or its scheduler (``schedulerName``: Fleet names its own), nor carry a
    label or annotation Fleet writes.  ``nodeSelector`` and ``affinity`` stay
    allowed: they are constraints, not a placement (Fleet adds its planned
    node to the affinity); ``nvidia.com/gpu.product`` in ``nodeSelector`` is
    how a job names its GPU type.
    """
    out = written_key_problems(
        _mapping((template.model_extra or {}).get("metadata")), f"{path}.metadata"
    )
    pod = template.spec.model_extra or {}
    for field, message in models.FLEET_PLACES.items():
        if pod.get(field) not in (None, ""):
            out.append((f"{path}.spec.{field}", message))
    return out
