"""Health of the nodes of a member's cell config, and the nodes its topology reads.

Theory of operation: :class:`NodeTracker` holds the Nodes the watch lists,
and remembers the health it last reported for every node of the cell config
(all healthy at first, as the allocator starts).  :meth:`NodeTracker.changes`
says which of those nodes changed: a node is healthy when its Node exists,
is Ready and is not cordoned.  While the member is not ready, and before
its first list, nothing is said: what Fleet does not see it does not change
(the member's readiness keeps new jobs away, and failover moves the
running ones).  When the cell config changes (:meth:`NodeTracker.follow`),
a node that left is forgotten, a new one counts as healthy until a change
says otherwise, and those still there keep what was reported of them.

For a member described by its Nodes' labels, :meth:`NodeTracker.observed`
is the list of the Nodes its topology counts (:func:`fleet.manifests.topology.counted`),
each as :func:`~fleet.clusters.kube.objects.observed_node` reads it, by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fleet.clusters.base import ObservedNode
from fleet.clusters.kube import objects
from fleet.core import resources
from fleet.core.resources import QuantityError, Resources
from fleet.manifests import topology

JSON = dict[str, Any]


class NodeTracker:
    """Nodes of a member and the health reported for the cell config's nodes."""

    def __init__(self, config_nodes: Sequence[str]) -> None:
        self.config_nodes = tuple(config_nodes)
        self._nodes: dict[str, JSON] = {}
        self._listed = False
        self._reported: dict[str, bool] = dict.fromkeys(self.config_nodes, True)

    @property
    def listed(self) -> bool:
        """Whether the Nodes were listed (what :meth:`observed` says is then known)."""
        return self._listed

    def replace(self, items: Iterable[JSON]) -> None:
        self._nodes = {str(objects.meta(o).get("name")): o for o in items}
        self._listed = True

    def put(self, obj: JSON) -> None:
        self._nodes[str(objects.meta(obj).get("name"))] = obj

    def remove(self, obj: JSON) -> None:
        self._nodes.pop(str(objects.meta(obj).get("name")), None)

    def exists(self, node: str) -> bool:
        """Whether Node ``node`` is there (True until the Nodes are listed)."""
        return not self._listed or node in self._nodes

    def follow(self, config_nodes: Sequence[str]) -> list[str]:
        """The cell config's nodes are now ``config_nodes``; those last reported bad."""
        self.config_nodes = tuple(config_nodes)
        self._reported = {n: self._reported.get(n, True) for n in self.config_nodes}
        return [n for n in self.config_nodes if not self._reported[n]]

    def changes(self, ready: bool) -> list[tuple[str, bool]]:
        """``(node, healthy)`` for every node of the config whose health changed
        (nothing while the member is not ``ready``)."""
        if not ready or not self._listed:
            return []
        out: list[tuple[str, bool]] = []
        for node in self.config_nodes:
            obj = self._nodes.get(node)
            ok = obj is not None and objects.node_health(obj)[0]
            if self._reported.get(node) != ok:
                self._reported[node] = ok
                out.append((node, ok))
        return out

    def observed(self, reads: topology.Topology) -> tuple[ObservedNode, ...]:
        """The Nodes that ``reads`` counts, by name (see the module docstring)."""
        seen = [objects.observed_node(obj) for obj in self._nodes.values()]
        counted = topology.counted(reads, [_as_topology_node(n) for n in seen])
        names = {n.name for n in counted}
        return tuple(sorted((n for n in seen if n.name in names), key=lambda n: n.name))

    def healthy(self) -> int:
        """How many nodes of the config were last reported healthy."""
        return sum(1 for n in self.config_nodes if self._reported.get(n))

    def problems(self) -> dict[str, str]:
        """Nodes of the config that cannot take pods now, and why."""
        out: dict[str, str] = {}
        for node in self.config_nodes:
            obj = self._nodes.get(node)
            if obj is None:
                out[node] = "no such Node in the member"
            else:
                ok, why = objects.node_health(obj)
                if not ok:
                    out[node] = why
        return out


def _as_topology_node(node: ObservedNode) -> topology.Node:
    """``node`` as the topology counts it (an amount that does not parse counts as none)."""
    amounts: dict[str, int] = {}
    for name, text in node.capacity.items():
        try:
            amounts[name] = resources.parse_quantity(name, text)
        except QuantityError:
            continue
    return topology.Node(node.name, node.labels, Resources(amounts))
