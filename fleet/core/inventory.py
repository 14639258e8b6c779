"""What the member clusters hold, and whether the quota tree promises more.

Theory of operation: the *inventory* is the capacity of the member clusters
per resource: ``nvidia.com/gpu``, ``cpu`` and ``memory``, and
``gpu.fleet.io/<type>`` for every GPU type (a node's GPUs are of its leaf
cell type: the typed quota resource of :func:`fleet.core.resources.typed_gpu`).
:func:`node_capacities` reads one cell config into node -> capacity once;
:func:`total` sums the nodes of the clusters in service, leaving out the bad
nodes the caller knows of and every draining cluster (a drained member's
capacity is not held: it is on its way out); :func:`inventory` is both in one
call, from the clusters' cell configs.  The running service keeps the
inventory in the scheduler state (:meth:`fleet.core.state.SchedulerState.refresh_inventory`,
from each placer's nodes and bad nodes); ``fleet check quota --clusters``
calls :func:`inventory` on files, every node healthy.

An :class:`Inventory` also says which resources it *counts*: the GPUs (any
and each type) always, ``cpu`` and ``memory`` when some member declares them
(a cell config whose skuTypes give no cpu says nothing about cpu; it does not
hold none).  Only counted resources are compared or filled in.

The tree's *guarantees* (:func:`guarantees`) are, per resource, the sum of
the ``min`` of the root's children, or the root's own ``min`` when it is
written and larger.  :func:`overpromised` compares them with the inventory:
every counted resource promised beyond what is held is a :class:`Shortfall`
(``promised``, ``held``, ``short``).  A shortfall is a report, never an
error: a tree that was right yesterday is still the tree in force when a
member drains or a node goes bad, as in Kueue, where nominal quota is not
checked against the nodes.

``capacity: auto`` on the root (:attr:`fleet.core.quota_rules.QuotaNodeSpec.auto`):
:func:`with_capacity` gives the root the inventory as its ``min`` (what is
held) and ``max`` (a limit on every counted resource, 0 included), so the
tree shares exactly what the members hold now; the state fills it in again
whenever the inventory changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from fleet.core import resources
from fleet.core.cells.spec import CellConfig, PhysicalCellSpec
from fleet.core.quota_rules import QuotaNodeSpec
from fleet.core.quota_structure import QuotaStructure
from fleet.core.resources import Resources, format_quantity, typed_gpu

#: Resources the inventory counts when some member declares them (GPUs: always).
DECLARED: tuple[str, ...] = (resources.CPU, resources.MEMORY)


@dataclass(frozen=True, slots=True)
class Inventory:
    """The healthy capacity of the clusters in service, and the resources it counts."""

    held: Resources = resources.ZERO
    #: ``nvidia.com/gpu``, every GPU type some member has, and ``cpu`` / ``memory``
    #: when some member declares them (healthy or not, in service or draining)
    declared: frozenset[str] = frozenset({resources.GPU})

    def counts(self, resource: str) -> bool:
        """Whether the inventory speaks for ``resource`` (held 0 then means none)."""
        return resource in self.declared or resource.startswith(resources.TYPED_GPU_PREFIX)

    def limits(self) -> Resources:
        """A ``max`` limiting every declared resource to what is held (0 included)."""
        return Resources.limits({r: self.held[r] for r in sorted(self.declared)})


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One resource the tree promises beyond what the members hold."""

    resource: str
    promised: int
    held: int

    @property
    def short(self) -> int:
        return self.promised - self.held

    def __str__(self) -> str:
        q = self.quantities()
        return (
            f"{q['resource']}: the tree guarantees {q['promised']}, the members hold "
            f"{q['held']} ({q['short']} short)"
        )

    def quantities(self) -> dict[str, str]:
        """``{resource, promised, held, short}``, amounts written the Kubernetes way."""
        r = self.resource
        return {
            "resource": r,
            "promised": format_quantity(r, self.promised),
            "held": format_quantity(r, self.held),
            "short": format_quantity(r, self.short),
        }


def _leaves(cell: PhysicalCellSpec) -> Iterable[PhysicalCellSpec]:
    stack = [cell]
    while stack:
        c = stack.pop()
        if c.children:
            stack.extend(c.children)
        else:
            yield c


def node_capacities(config: CellConfig) -> dict[str, Resources]:
    """Node -> what it holds: its GPUs, cpu and memory, and its GPUs by type."""
    out = config.nodes()
    typed: dict[str, dict[str, int]] = {}
    for top in config.physical_cells:
        for leaf in _leaves(top):
            if leaf.node is None:
                continue
            kind = config.cell_types[leaf.cell_type].leaf_type
            sku = config.sku_types.get(kind)
            gpus = 1 if sku is None else sku.gpu
            counts = typed.setdefault(leaf.node, {})
            counts[typed_gpu(kind)] = counts.get(typed_gpu(kind), 0) + gpus
    for node, counts in typed.items():
        out[node] = out.get(node, resources.ZERO) + Resources(counts)
    return out


def total(
    clusters: Mapping[str, Mapping[str, Resources]],
    bad: Mapping[str, Collection[str]] | None = None,
    draining: Collection[str] = (),
) -> Inventory:
    """The inventory of ``clusters`` (cluster -> node -> capacity), without the
    ``bad`` nodes (cluster -> nodes) and the ``draining`` clusters."""
    declared = {resources.GPU}
    held: dict[str, int] = {}
    for cluster in sorted(clusters):
        skip = bad.get(cluster, ()) if bad is not None else ()
        in_service = cluster not in draining
        for node, capacity in clusters[cluster].items():
            for r, amount in capacity.items():
                if amount and (r in DECLARED or r.startswith(resources.TYPED_GPU_PREFIX)):
                    declared.add(r)
                if in_service and node not in skip:
                    held[r] = held.get(r, 0) + amount
    return Inventory(Resources(held), frozenset(declared))


def inventory(
    configs: Mapping[str, CellConfig],
    bad: Mapping[str, Collection[str]] | None = None,
    draining: Collection[str] = (),
) -> Inventory:
    """The healthy capacity of the member clusters' cell configs (cluster -> config),
    without the ``bad`` nodes and the ``draining`` clusters; see the module docstring."""
    return total({name: node_capacities(c) for name, c in configs.items()}, bad, draining)


def guarantees(root_min: Resources | None, children_min: Iterable[Resources]) -> Resources:
    """What a tree guarantees: its root's children's ``min`` in sum, or the root's own
    ``min`` (None: ``capacity: auto``, not written) where that is larger."""
    out: dict[str, int] = {}
    for child in children_min:
        for r, v in child.items():
            out[r] = out.get(r, 0) + v
    if root_min is not None:
        for r, v in root_min.items():
            out[r] = max(out.get(r, 0), v)
    return Resources(out)


def spec_guarantees(root: QuotaNodeSpec) -> Resources:
    """:func:`guarantees` of a tree as written."""
    return guarantees(None if root.auto else root.min, (c.min for c in root.children))


def tree_guarantees(tree: QuotaStructure) -> Resources:
    """:func:`guarantees` of a tree in force (its root's figures ignored when auto)."""
    root = tree.nodes()[0]
    children = [tree.min_of(c) for c in tree.children(root)]
    return guarantees(None if tree.auto else tree.min_of(root), children)


def overpromised(promised: Resources, held: Inventory) -> tuple[Shortfall, ...]:
    """Every counted resource ``promised`` beyond what is ``held``, by resource name."""
    return tuple(
        Shortfall(r, v, held.held[r])
        for r, v in sorted(promised.items())
        if held.counts(r) and v > held.held[r]
    )


def with_capacity(root: QuotaNodeSpec, held: Inventory) -> QuotaNodeSpec:
    """``root`` with the inventory as its ``min`` and ``max`` when its capacity is auto
    (else ``root`` itself)."""
    if not root.auto:
        return root
    return dataclasses.replace(root, min=held.held, max=held.limits())
