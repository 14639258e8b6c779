"""The fit test: a job that no member cluster it may use could ever hold is refused now.

Theory of operation: a job that passes every check of its documents may
still be one that could never run; left in the queue it would wait for
ever.  :meth:`Capacity.problems` refuses, each at the field that asks for it:

1. a resource that no node of the clusters the job may use offers: an
   *extended* resource (a domain-prefixed name outside ``kubernetes.io``,
   Kubernetes' own rule, such as ``example.com/fpga``) that a pod asks for and
   no node names, at the request (or limit) that names it.  A node offers
   what its cell config says it has (``nvidia.com/gpu`` per leaf cell, cpu and
   memory from its skuType); Kubernetes' own resources (cpu, memory,
   ephemeral-storage, hugepages-*) are on every node, named or not;
2. a pod that no node of those clusters could hold, at its pod set;
3. a gang (``Job.gang_request``) larger than every such cluster's total
   capacity, at the field that sets the gang's size.

Capacities come from each cluster's cell config
(:meth:`~fleet.core.cells.spec.CellConfig.nodes`); a node limits only the
resources it names and its GPUs (none named: none), and a pod asking for
no GPU may use only the CPU-only nodes of a cluster that has some
(:func:`~fleet.core.capacity_nodes.pool_takes`), as in the placers.  This
is a necessary condition: a job that passes may still wait, one that fails
could never run.  With no
cluster known (or none allowed, which the policy's check reports) nothing is
tested.  The server runs it on every submission
(:mod:`fleet.api.submissions`) and ``fleet check jobs --clusters`` through
:func:`fleet.manifests.convert.check_submission`: one test, two callers.
The cluster sizes are computed once per cluster list (the service checks
every submission against the same list until its clusters change).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from fleet.core import resources
from fleet.core.capacity_nodes import pool_takes
from fleet.core.jobs import Job
from fleet.core.resources import Resources
from fleet.manifests.errors import Problem, quote
from fleet.manifests.kinds.base import WorkloadModel
from fleet.manifests.models import MemberClusterModel

_SHOWN: Final = (resources.GPU, resources.CPU, resources.MEMORY)


def extended(name: str) -> bool:
    """Whether ``name`` is an extended resource: domain-prefixed, not ``kubernetes.io``'s."""
    domain, slash, _ = name.partition("/")
    return bool(slash) and domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def _fits(request: resources.Amounts, capacity: resources.Amounts) -> bool:
    """Whether ``request`` fits ``capacity``; a resource the capacity does not name is
    free, but GPUs: a node without them has none."""
    return all(
        capacity.get(name, 0 if name == resources.GPU else amount) >= amount
        for name, amount in request.items()
    )


def _describe(amounts: resources.Amounts, names: Sequence[str] = _SHOWN) -> str:
    parts = [
        f"{name} {resources.format_quantity(name, amounts[name])}"
        for name in names
        if name in amounts
    ]
    return ", ".join(parts) or "nothing"


def _size(amounts: resources.Amounts) -> tuple[int, ...]:
    return tuple(amounts.get(name, 0) for name in _SHOWN)


@dataclass(frozen=True, slots=True)
class _ClusterSize:
    """What a member cluster can ever hold: one node of each node size, its total,
    and the resources its nodes name."""

    name: str
    nodes: tuple[tuple[str, Resources], ...]  # the first node of each size, in node order
    total: Resources
    offered: frozenset[str]
    cpu_nodes: bool  # it has CPU-only nodes: the pods asking no GPU go there alone


def _cluster_size(cluster: MemberClusterModel) -> _ClusterSize:
    firsts: dict[Resources, str] = {}
    total = Resources()
    offered: set[str] = set()
    config = cluster.cell_config()
    for node, capacity in config.nodes().items():
        firsts.setdefault(capacity, node)
        total = total + capacity
        offered.update(name for name, amount in capacity.items() if amount)
    nodes = tuple((n, c) for c, n in firsts.items())
    return _ClusterSize(cluster.name, nodes, total, frozenset(offered), bool(config.cpu_cells))


#: Cluster sizes of the cluster lists seen last (by the list's identity; the list is
#: kept, so that its id is not reused).
_SIZES: dict[int, tuple[Sequence[MemberClusterModel], list[_ClusterSize]]] = {}
_SIZES_KEPT: Final = 4


def _sizes(clusters: Sequence[MemberClusterModel]) -> list[_ClusterSize]:
    known = _SIZES.get(id(clusters))
    if known is not None and known[0] is clusters:
        return known[1]
    sizes = [_cluster_size(c) for c in clusters]
    if len(_SIZES) >= _SIZES_KEPT:
        del _SIZES[next(iter(_SIZES))]
    _SIZES[id(clusters)] = (clusters, sizes)
    return sizes


class Capacity:
    """Node and total capacities of the member clusters (computed once per cluster list)."""

    def __init__(self, clusters: Sequence[MemberClusterModel]) -> None:
        self._sizes = _sizes(clusters)

    def problems(self, job: Job, model: WorkloadModel) -> list[Problem]:
        """Why ``job`` (read from ``model``) could never run in a cluster it may use."""
        usable = [c for c in self._sizes if job.clusters is None or c.name in job.clusters]
        if not usable:  # no clusters known, or the affinity allows none (reported already)
            return []
        names = ", ".join(c.name for c in usable)
        out = _unoffered(job, model, usable, names)
        paths = {s.role: s.path for s in model.pod_sets([])}
        for group in job.groups:
            # The nodes its pods may use: a pod asking no GPU, the CPU-only nodes
            # of a cluster that has some (the placers' rule).
            nodes = [
                (c.name, node, cap)
                for c in usable
                for node, cap in c.nodes
                if pool_takes(group.gpus, cap.get(resources.GPU), c.cpu_nodes)
            ]
            if any(_fits(group.per_pod, cap) for _, _, cap in nodes):
                continue
            if not nodes:
                nodes = [(c.name, node, cap) for c in usable for node, cap in c.nodes]
            cluster, node, cap = max(nodes, key=lambda n: _size(n[2]))  # first of equals
            out.append(
                (
                    paths.get(group.role, model.pods_path()),
                    f"job {job.key}: a {group.role} pod asks for {_describe(group.per_pod)}, "
                    f"more than any node of the member clusters it may use ({names}) has; "
                    f"the largest node, {node} of {cluster}, has {_describe(cap)}",
                ),
            )
        if out:
            return out
        need = job.gang_request
        if any(_fits(need, c.total) for c in usable):
            return []
        biggest = max(usable, key=lambda c: _size(c.total))  # first of equals
        pods = job.gang_size
        return [
            (
                _gang_path(model),
                f"job {job.key}: its {pods} pods that must start together ask for "
                f"{_describe(need)}, more than any member cluster it may use ({names}) has "
                f"in all; the largest, {biggest.name}, has {_describe(biggest.total)}",
            )
        ]


def _unoffered(
    job: Job, model: WorkloadModel, usable: Sequence[_ClusterSize], names: str
) -> list[Problem]:
    """The extended resources the job's pods ask for that no usable node offers, each at
    the first request (else limit) of each pod template that names it."""
    offered = frozenset().union(*(c.offered for c in usable))
    asked = {
        name
        for group in job.groups
        for name, amount in group.per_pod.items()
        if amount and extended(name) and name not in offered
    }
    if not asked:
        return []
    have = ", ".join(sorted(offered)) or "nothing"
    out: list[Problem] = []
    for _, path, template in model.templates():
        found: dict[str, str] = {}
        spec = template.spec
        containers = [("containers", i, c) for i, c in enumerate(spec.containers)]
        containers += [("initContainers", i, c) for i, c in enumerate(spec.init_containers)]
        for field in ("requests", "limits"):
            for where, i, c in containers:
                for name in getattr(c.resources, field):
                    if name in asked and name not in found:
                        found[name] = f"{path}.spec.{where}[{i}].resources.{field}.{name}"
        for name, at in sorted(found.items(), key=lambda item: item[1]):
            out.append(
                (
                    at,
                    f"resource {quote(name)} is offered by no node of the member clusters "
                    f"the job may use ({names}); their nodes offer {have}",
                )
            )
    return out


def _gang_path(model: WorkloadModel) -> str:
    """The field that sets the gang's size."""
    minimum, path = model.gang_minimum()
    return path if minimum else model.pods_path()
