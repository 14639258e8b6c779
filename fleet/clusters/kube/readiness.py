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

For a member described by its Nodes' labels (``topology`` given), the nodes
the topology counts are reported as :class:`~fleet.clusters.base.NodesObserved`
after the first list and then whenever they change in what the topology
reads (labels, GPUs, cpu, memory; a heartbeat changes none of these and is
not reported), at most once every :data:`OBSERVE_INTERVAL` seconds: a burst
of changes is looked at once, when the interval since the last look is up.
Nothing is reported while the member is not ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any, Final

from fleet.clock import Clock
from fleet.clusters.base import (
    ClusterError,
    ClusterHealth,
    MemberEvent,
    MemberReadiness,
    NodeHealth,
    NodesObserved,
    ObservedNode,
)
from fleet.clusters.kube.nodes import NodeTracker
from fleet.manifests.topology import Topology

log = logging.getLogger("fleet.clusters.kube")

JSON = dict[str, Any]

#: Seconds between two looks at the nodes a member's topology reads.
OBSERVE_INTERVAL: Final = 1.0


class Readiness:
    """A member's readiness and its nodes' health; see the module docstring."""

    def __init__(
        self,
        name: str,
        clock: Clock,
        nodes: NodeTracker,
        emit: Callable[[MemberEvent], None],
        topology: Topology | None = None,
        *,
        observe_interval: float = OBSERVE_INTERVAL,
    ) -> None:
        self.name = name
        self.clock = clock
        self.nodes = nodes
        self.emit = emit
        #: how the member's topology reads its Nodes (None: it reports no node list)
        self.topology = topology
        self.observe_interval = observe_interval
        self._observed: tuple[ObservedNode, ...] | None = None  # as last reported
        self._looked = -math.inf  # when the nodes were last looked at
        self._look: asyncio.Task[None] | None = None  # a look waiting for the interval
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

    def follow(self, config_nodes: list[str], topology: Topology | None) -> list[str]:
        """The cell config's nodes changed (see :meth:`NodeTracker.follow`); the bad ones."""
        bad = self.nodes.follow(config_nodes)
        self.topology = topology  # what it reads is looked at again below
        self._report_nodes()
        return bad

    async def close(self) -> None:
        look, self._look = self._look, None
        if look is not None:
            look.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await look

    def _report_nodes(self) -> None:
        now = self.clock.now()
        ready = not self.reason()
        for node, healthy in self.nodes.changes(ready):
            self.emit(NodeHealth(self.name, node, healthy, now))
        if self.topology is None or not ready or not self.nodes.listed or self._look is not None:
            return
        wait = self._looked + self.observe_interval - now
        if wait <= 0:
            self._observe()
        else:
            self._look = asyncio.get_running_loop().create_task(
                self._observe_after(wait), name=f"observe nodes {self.name}"
            )

    async def _observe_after(self, wait: float) -> None:
        await self.clock.sleep(wait)
        self._look = None
        if not self.reason() and self.topology is not None:
            self._observe()

    def _observe(self) -> None:
        """Look at the nodes the topology reads; report them when they changed."""
        assert self.topology is not None
        self._looked = now = self.clock.now()
        found = self.nodes.observed(self.topology)
        if found != self._observed:
            self._observed = found
            log.info("%s: %d nodes for its topology", self.name, len(found))
            self.emit(NodesObserved(self.name, found, now))

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
