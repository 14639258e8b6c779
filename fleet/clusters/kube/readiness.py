"""Whether a real member is ready, and its nodes' health, as member events.

Theory of operation: :class:`Readiness` is what a
:class:`~fleet.clusters.kube.cluster.KubeCluster` knows of its member's
health: the last probe's error (``calls.probe``: the member answers, takes
Fleet's credentials and serves every kind; "not contacted yet" until the
first), the watches that are failing, and the Nodes (a
:class:`~fleet.clusters.kube.nodes.NodeTracker`).  The member is ready when
the probe passed and no watch fails; each change of readiness is emitted as
:class:`~fleet.clusters.base.MemberReadiness` (and logged), and each change
of a cell-config node's health as :class:`~fleet.clusters.base.NodeHealth`
(nothing while the member is not ready: the tracker says nothing then).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fleet.clock import Clock
from fleet.clusters.base import (
    ClusterError,
    ClusterHealth,
    MemberEvent,
    MemberReadiness,
    NodeHealth,
)
from fleet.clusters.kube.nodes import NodeTracker

log = logging.getLogger("fleet.clusters.kube")

JSON = dict[str, Any]


class Readiness:
    """A member's readiness and its nodes' health; see the module docstring."""

    def __init__(
        self, name: str, clock: Clock, nodes: NodeTracker, emit: Callable[[MemberEvent], None]
    ) -> None:
        self.name = name
        self.clock = clock
        self.nodes = nodes
        self.emit = emit
        #: the last probe's error (None: it passed)
        self.probe_error: str | None = "not contacted yet"
        #: watch -> its error, for the watches that are failing
        self.watch_errors: dict[str, str] = {}
        self.ready: bool | None = None

    def reason(self) -> str:
        """Why the member is not ready ("" when it is)."""
        if self.probe_error:
            return self.probe_error
        for what, error in sorted(self.watch_errors.items()):
            return f"watch of {what} failing (retrying with backoff): {error}"
        return ""

    def health(self) -> ClusterHealth:
        reason = self.reason()
        if reason:
            return ClusterHealth(False, reason)
        total = len(self.nodes.config_nodes)
        message = f"ready: {self.nodes.healthy()}/{total} nodes healthy"
        problems = self.nodes.problems()
        if problems:
            message += "; " + ", ".join(f"{n}: {why}" for n, why in sorted(problems.items()))
        return ClusterHealth(True, message)

    def probed(self, error: str | None) -> None:
        """The probe's answer (None: it passed)."""
        self.probe_error = error
        self._update()

    async def watch_failed(self, what: str, error: ClusterError) -> None:
        self.watch_errors[what] = error.message
        self._update()

    async def watch_recovered(self, what: str) -> None:
        self.watch_errors.pop(what, None)
        self._update()

    async def sync_nodes(self, items: list[JSON]) -> None:
        self.nodes.replace(items)
        self._report_nodes()

    async def node_event(self, kind: str, obj: JSON) -> None:
        if kind == "DELETED":
            self.nodes.remove(obj)
        else:
            self.nodes.put(obj)
        self._report_nodes()

    def _report_nodes(self) -> None:
        now = self.clock.now()
        for node, healthy in self.nodes.changes(not self.reason()):
            self.emit(NodeHealth(self.name, node, healthy, now))

    def _update(self) -> None:
        reason = self.reason()
        ready = not reason
        if ready != self.ready:
            self.ready = ready
            if ready:
                log.info("%s: ready", self.name)
            else:
                log.warning("%s: not ready: %s", self.name, reason)
            self.emit(MemberReadiness(self.name, ready, reason, self.clock.now()))
        self._report_nodes()
