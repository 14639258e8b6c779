"""Health of the nodes of a member's cell config, from its Node objects.

Theory of operation: :class:`NodeTracker` holds the Nodes the watch lists,
and remembers the health it last reported for every node of the cell config
(all healthy at first, as the allocator starts).  :meth:`NodeTracker.changes`
says which of those nodes changed: a node is healthy when its Node exists,
is Ready and is not cordoned.  While the member is not ready, and before
its first list, nothing is said: what Fleet does not see it does not change
(the member's readiness keeps new jobs away, and failover moves the
running ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fleet.clusters.kube import objects

JSON = dict[str, Any]


class NodeTracker:
    """Nodes of a member and the health reported for the cell config's nodes."""

    def __init__(self, config_nodes: Sequence[str]) -> None:
        self.config_nodes = tuple(config_nodes)
        self._nodes: dict[str, JSON] = {}
        self._listed = False
        self._reported: dict[str, bool] = dict.fromkeys(self.config_nodes, True)

    def replace(self, items: Iterable[JSON]) -> None:
        self._nodes = {str(objects.meta(o).get("name")): o for o in items}
        self._listed = True

    def put(self, obj: JSON) -> None:
        self._nodes[str(objects.meta(obj).get("name"))] = obj

    def remove(self, obj: JSON) -> None:
        self._nodes.pop(str(objects.meta(obj).get("name")), None)

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
