"""The capacity placer's held units: where each unit's pods are, and the counts over them.

Theory of operation: :class:`HeldUnits` is the part of
:class:`~fleet.core.capacity.CapacityPlacer` that knows the jobs and what they
hold, kept so that the placer's questions about victims are a few lookups:

* every held unit (:class:`Held`: its charge, its pods and their requests,
  its GPUs counted), by key; the keys by mode, and the guaranteed ones by
  queue, in the order they were bound (:meth:`HeldUnits.candidates` reads
  them instead of every unit);
* the GPUs held per mode and, of guaranteed units, per queue: an upper bound
  on what a preemption could free, before any unit is looked at;
* per node, the GPUs its guaranteed units hold, and how many healthy nodes
  leave each number of GPUs not held by guaranteed units (``open``): a
  guaranteed job can free at most those, which :meth:`HeldUnits.may_free`
  counts in slots as :meth:`~fleet.core.capacity_nodes.FreeNodes.slots`
  counts free GPUs.

What the pods take of each node is the nodes' part
(:class:`~fleet.core.capacity_nodes.FreeNodes`); the placer moves both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from fleet.core import placement
from fleet.core.capacity_nodes import FreeNodes, Node
from fleet.core.charges import Charge
from fleet.core.checks import InvariantError
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import PodPlacement
from fleet.core.resources import Resources


@dataclass(slots=True)
class Held:
    """One held unit: its charge, its pods with their requests, and their GPUs counted."""

    info: Charge
    pods: list[PodPlacement] = field(default_factory=list)
    requests: list[Resources] = field(default_factory=list)
    gpus: int = 0  # GPUs of its pods, counted

    def __init__(
        self,
        info: Charge,
        pods: list[PodPlacement] | None = None,
        requests: list[Resources] | None = None,
        gpus: int = 0,
    ) -> None:
        self.info = info
        self.pods = [] if pods is None else pods
        self.requests = [] if requests is None else requests
        self.gpus = gpus


class HeldUnits:
    """The units held in one cluster and the indexes over them; see the module docstring."""

    def __init__(self, nodes: FreeNodes) -> None:
        self.nodes = nodes
        self.held: dict[str, Held] = {}
        self.by_mode: dict[Mode, dict[str, None]] = {m: {} for m in Mode}
        self.mode_gpus: dict[Mode, int] = dict.fromkeys(Mode, 0)  # GPUs held per mode
        self.queue_gpus: dict[str, int] = {}  # GPUs of guaranteed jobs per queue
        self.guaranteed_by_queue: dict[str, dict[str, None]] = {}
        #: node -> GPUs its guaranteed units hold (only other victims' GPUs can be freed)
        self.guarded: dict[str, int] = {}
        #: GPUs not held by guaranteed units -> how many healthy nodes have that many
        self.open: dict[int, int] = {}
        for node in nodes.by_rank:
            self.open[node.gpus] = self.open.get(node.gpus, 0) + 1

    # Changes ----------------------------------------------------------------
    def unit(self, charge: Charge) -> Held:
        """The record of unit ``charge``, made and indexed when it holds nothing yet."""
        held = self.held.get(charge.key)
        if held is None:
            key = charge.key
            held = self.held[key] = Held(charge)
            self.by_mode[charge.mode][key] = None
            if charge.mode is Mode.GUARANTEED:
                self.guaranteed_by_queue.setdefault(charge.queue, {})[key] = None
        return held

    def add_pod(self, held: Held, pp: PodPlacement, req: Resources, node: Node) -> None:
        """Pod ``pp`` of ``held``, asking ``req``, now holds its GPUs on ``node``."""
        held.pods.append(pp)
        held.requests.append(req)
        held.gpus += len(pp.gpus)
        self._count_gpus(held.info, len(pp.gpus), node)

    def remove(self, key: str) -> Held | None:
        """Forget unit ``key`` (its pods' GPUs uncounted); its record, or None if not held."""
        held = self.held.pop(key, None)
        if held is None:
            return None
        del self.by_mode[held.info.mode][key]
        if held.info.mode is Mode.GUARANTEED:
            del self.guaranteed_by_queue[held.info.queue][key]
        nodes = self.nodes.nodes
        for pp in held.pods:
            self._count_gpus(held.info, -len(pp.gpus), nodes[pp.node])
        return held

    def node_health(self, node: Node, healthy: bool) -> None:
        """``node`` turns healthy or bad: it counts in ``open`` only while healthy."""
        self._count_open(node.gpus - self.guarded.get(node.name, 0), 1 if healthy else -1)

    def _count_gpus(self, info: Charge, gpus: int, node: Node) -> None:
        self.mode_gpus[info.mode] += gpus
        if info.mode is Mode.GUARANTEED:
            self.queue_gpus[info.queue] = self.queue_gpus.get(info.queue, 0) + gpus
            before = self.guarded.get(node.name, 0)
            self.guarded[node.name] = before + gpus
            if node.name not in self.nodes.bad:
                self._count_open(node.gpus - before, -1)
                self._count_open(node.gpus - before - gpus, 1)

    def _count_open(self, gpus: int, nodes: int) -> None:
        left = self.open.get(gpus, 0) + nodes
        if left:
            self.open[gpus] = left
        else:
            del self.open[gpus]

    # Queries ----------------------------------------------------------------
    def candidates(self, job: Job, mode: Mode) -> list[Charge]:
        """Running units that ``job`` in ``mode`` may preempt (the indexes narrow
        the search; :func:`~fleet.core.placement.may_preempt` decides)."""
        if job.opportunistic or mode is Mode.OPPORTUNISTIC:
            return []
        held = self.held
        out = [held[k].info for k in self.by_mode[Mode.OPPORTUNISTIC]]
        if mode is Mode.GUARANTEED:
            out += [held[k].info for k in self.by_mode[Mode.BORROWED]]
            out += [
                held[k].info
                for k in self.guaranteed_by_queue.get(job.queue, ())
                if held[k].info.priority < job.priority
            ]
        return [info for info in out if placement.may_preempt(job, mode, info)]

    def freeable_bound(self, job: Job, mode: Mode) -> int:
        """The most GPUs preempting for ``job`` in ``mode`` could free, from the
        counters per mode (and the job's own queue) before any unit is looked at."""
        bound = self.mode_gpus[Mode.OPPORTUNISTIC]
        if mode is Mode.GUARANTEED:
            bound += self.mode_gpus[Mode.BORROWED] + self.queue_gpus.get(job.queue, 0)
        return bound

    def may_free(self, job: Job, pods: Sequence[Pod], freed: Sequence[str]) -> bool:
        """A necessary condition for a guaranteed ``job`` to fit ``pods`` by preempting
        (``freed`` already going): per node, only the GPUs that guaranteed units of
        other queues hold stay taken.

        Its victims are opportunistic and borrowed units and its own queue's lower
        priorities, so on a node it can have at most the GPUs not held by other
        queues' guaranteed units (and, of those, the freed ones): as with
        :meth:`~fleet.core.capacity_nodes.FreeNodes.may_fit`, the pods of ``g`` or
        more GPUs must not outnumber what those GPUs hold in pods of ``g``.
        Counted from the nodes' guaranteed GPUs (``open``, a few lookups),
        corrected on the few nodes where the job's own queue or a freed unit holds
        guaranteed GPUs.
        """
        sizes = sorted((p.gpus for p in pods if p.gpus), reverse=True)
        if not sizes:
            return True
        extra: dict[str, int] = {}  # node -> its guaranteed GPUs that may still go
        held = self.held
        for key in self.guaranteed_by_queue.get(job.queue, ()):
            for pp in held[key].pods:
                extra[pp.node] = extra.get(pp.node, 0) + len(pp.gpus)
        for key in freed:
            h = held[key]
            if h.info.mode is Mode.GUARANTEED and h.info.queue != job.queue:
                for pp in h.pods:
                    extra[pp.node] = extra.get(pp.node, 0) + len(pp.gpus)
        nodes = self.nodes
        for i, g in enumerate(sizes):
            if i + 1 < len(sizes) and sizes[i + 1] == g:
                continue  # count every pod of this size first
            slots = sum(n * (c // g) for c, n in self.open.items() if c >= g)
            for name, more in extra.items():
                if name not in nodes.bad:
                    base = nodes.nodes[name].gpus - self.guarded.get(name, 0)
                    slots += (base + more) // g - base // g
            if slots < i + 1:
                return False
        return True

    def on_node(self, node: str) -> list[str]:
        """The units with a pod on ``node`` (a scan)."""
        return [k for k, h in self.held.items() if any(pp.node == node for pp in h.pods)]

    def owner(self, node: str, gpu: int) -> str:
        """The unit holding GPU ``gpu`` of ``node`` (a scan: for error messages only)."""
        for key, held in self.held.items():
            if any(pp.node == node and gpu in pp.gpus for pp in held.pods):
                return key
        return "another job"

    # Invariants -------------------------------------------------------------
    def recount(self) -> tuple[dict[str, dict[str, int]], dict[tuple[str, int], str]]:
        """What the held pods take of each node (node -> resource -> amount, on the
        resources the node limits) and which unit holds each GPU ((node, GPU) ->
        key), recounted from the units; raises :class:`InvariantError` on a unit
        filed under another key, pods without their requests, an unknown node or a
        GPU held twice."""
        nodes = self.nodes.nodes
        used: dict[str, dict[str, int]] = {n: {} for n in nodes}
        owners: dict[tuple[str, int], str] = {}
        for key, held in self.held.items():
            if held.info.key != key:
                raise InvariantError(f"job {held.info.key} is held under the key {key}")
            if len(held.pods) != len(held.requests):
                raise InvariantError(
                    f"{key}: {len(held.pods)} pods held with {len(held.requests)} requests"
                )
            for pp, req in zip(held.pods, held.requests, strict=True):
                per_node = used.get(pp.node)
                if per_node is None:
                    raise InvariantError(f"{key}: pod {pp.pod} is on unknown node {pp.node}")
                node_free = nodes[pp.node].free
                for name, amount in req.amounts.items():
                    if name in node_free:  # as FreeNodes.take counts: what the node has at all
                        per_node[name] = per_node.get(name, 0) + amount
                for g in pp.gpus:
                    other = owners.get((pp.node, g))
                    if other is not None:
                        raise InvariantError(f"GPU {pp.node}/{g} is held by {other} and {key}")
                    owners[(pp.node, g)] = key
        return used, owners

    def check_invariants(self) -> None:
        """Recount every index and counter from the held units and compare."""
        by_mode: dict[Mode, int] = dict.fromkeys(Mode, 0)
        by_queue: dict[str, int] = {}
        guaranteed: set[tuple[str, str]] = set()
        for key, held in self.held.items():
            gpus = sum(len(pp.gpus) for pp in held.pods)
            if held.gpus != gpus:
                raise InvariantError(f"{key}: {held.gpus} GPUs counted, its pods hold {gpus}")
            by_mode[held.info.mode] += gpus
            if held.info.mode is Mode.GUARANTEED:
                by_queue[held.info.queue] = by_queue.get(held.info.queue, 0) + gpus
                guaranteed.add((held.info.queue, key))
        if by_mode != self.mode_gpus:
            kept_modes = {m.value: n for m, n in self.mode_gpus.items()}
            recount_modes = {m.value: n for m, n in by_mode.items()}
            raise InvariantError(
                f"GPUs per mode drifted: kept {kept_modes}, recount {recount_modes}"
            )
        kept = {q: n for q, n in self.queue_gpus.items() if n}
        recount = {q: n for q, n in by_queue.items() if n}
        if kept != recount:
            raise InvariantError(
                f"GPUs of guaranteed jobs per queue drifted: kept {kept}, recount {recount}"
            )
        indexed = {(q, k) for q, keys in self.guaranteed_by_queue.items() for k in keys}
        if indexed != guaranteed:
            raise InvariantError(
                f"guaranteed-job index drifted: stale {sorted(indexed - guaranteed)}, "
                f"missing {sorted(guaranteed - indexed)}"
            )
        for mode, keys in self.by_mode.items():
            for k in keys:
                held_k = self.held.get(k)
                if held_k is None or held_k.info.mode is not mode:
                    actual = "is not held" if held_k is None else f"runs {held_k.info.mode}"
                    raise InvariantError(f"mode index lists {k} as {mode}, but it {actual}")
        indexed_modes = sum(len(k) for k in self.by_mode.values())
        if indexed_modes != len(self.held):
            raise InvariantError(
                f"mode index lists {indexed_modes} jobs, {len(self.held)} are held"
            )
        guarded: dict[str, int] = {}
        for held in self.held.values():
            if held.info.mode is Mode.GUARANTEED:
                for pp in held.pods:
                    guarded[pp.node] = guarded.get(pp.node, 0) + len(pp.gpus)
        guarded = {n: g for n, g in guarded.items() if g}
        if {n: g for n, g in self.guarded.items() if g} != guarded:
            raise InvariantError(
                f"guaranteed GPUs per node drifted: kept "
                f"{ {n: g for n, g in self.guarded.items() if g} }, recount {guarded}"
            )
        opened: dict[int, int] = {}
        for name, node in self.nodes.nodes.items():
            if name not in self.nodes.bad:
                left = node.gpus - guarded.get(name, 0)
                opened[left] = opened.get(left, 0) + 1
        if opened != self.open:
            raise InvariantError(
                f"nodes by GPUs not held by guaranteed units drifted: kept {self.open}, "
                f"recount {opened}"
            )
