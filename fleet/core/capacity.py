"""The capacity-only placer: free GPUs, cpu and memory per node, no topology.

This is a real, documented policy and the honest baseline that the
topology-aware cell allocator (``fleet.core.cells``) is compared with.

Theory of operation:

* Each node has a capacity vector; it constrains only the resources it names
  (a node that declares no ``cpu`` does not limit cpu).  GPUs are numbered
  ``0..n-1`` per node and handed out lowest index first.
* Nodes are indexed by their number of free GPUs (one ordered bucket per
  count), so a pod asking for ``g`` GPUs looks at the fullest nodes that still
  have ``g`` free first (best fit), and only walks a bucket when cpu or memory
  rule a node out.  A pod without GPUs goes to the cluster's CPU-only nodes
  when it has any (first fit by cpu and memory, the gang's nodes first),
  otherwise to the first node with room
  (:func:`~fleet.core.capacity_nodes.may_use`).
  The nodes, what they have free and the buckets are
  :class:`~fleet.core.capacity_nodes.FreeNodes`; the held units and the
  counts over them that bound a preemption are
  :class:`~fleet.core.capacity_held.HeldUnits`.  The placer owns one of each
  and moves both together; it answers the questions (:meth:`CapacityPlacer.fit`,
  the victims) and checks the commands (bind, restore).
* A gang is placed pod by pod on a scratch overlay; if one pod does not fit,
  nothing is placed (``NoFit``).  Asking never changes the placer.  Before
  that, the buckets' sizes say how many pods of each GPU size the free GPUs
  could hold at most (:meth:`~fleet.core.capacity_nodes.FreeNodes.slots`); a
  gang of more is refused without placing it
  (:meth:`~fleet.core.capacity_nodes.FreeNodes.may_fit`).
* With ``preempt=True``, whenever a pod of the gang does not fit, the node
  that can take it by preempting the fewest, then cheapest, further jobs
  gives them up (cheapest in the order of :func:`victim_order`:
  opportunistic, then borrowed, then lower-priority guaranteed jobs of the
  same queue; newest first), until the gang fits or no node can.  For a
  guaranteed job the nodes are first counted by the GPUs their guaranteed
  units leave (only those of other queues stay taken), and a gang those
  slots cannot hold is refused before any victim is looked at
  (:meth:`~fleet.core.capacity_held.HeldUnits.may_free`).
* A job with GPU types (:attr:`~fleet.core.jobs.Job.gpu_types`: its one SKU,
  or its several) only lands on nodes of one of them (``skus`` maps node to
  SKU); a job without one lands anywhere.  The pods of a job that ask for no
  GPU go to the CPU-only nodes whatever the SKU, when the cluster has any.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from fleet.core import checks, placement, resources, wording
from fleet.core.capacity_held import HeldUnits
from fleet.core.capacity_nodes import FreeNodes, Overlay, fits, may_use, scratch
from fleet.core.charges import Charge
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import BindError, Fit, NoFit, Placer, PodPlacement, RestoreError
from fleet.core.resources import Resources, typed_gpu

_MODE_RANK = {Mode.OPPORTUNISTIC: 0, Mode.BORROWED: 1, Mode.GUARANTEED: 2}


def victim_order(victim: Charge) -> tuple[int, int, int]:
    """Cheapest victims first: opportunistic, borrowed, guaranteed; low priority; newest."""
    return (_MODE_RANK[victim.mode], victim.priority, -victim.seq)


def _victim_key(victim: Charge) -> tuple[tuple[int, int, int], str]:
    """:func:`victim_order`, then the job key: a total order, whatever order the jobs came in."""
    return victim_order(victim), victim.key


class CapacityPlacer(Placer):
    """Placer over free per-node capacity; see the module docstring."""

    def __init__(
        self,
        cluster: str,
        nodes: Mapping[str, Resources],
        skus: Mapping[str, str] | None = None,
    ) -> None:
        self._cluster = cluster
        #: the nodes, what they have free, the free-GPU buckets
        self._free = FreeNodes(nodes, skus)
        #: the held units and the counts over them
        self._units = HeldUnits(self._free)
        #: the last fit answered without victims or freed jobs, for which job, and
        #: the nodes' version it was answered at: bound unchanged, it needs no check
        self._fresh: tuple[Fit, Job, int] | None = None
        checks.built(self)

    def blind_to_queue(self, job: Job, mode: Mode) -> bool:
        """Always: no virtual clusters here, answers never depend on the job's queue."""
        return True

    @property
    def cluster(self) -> str:
        return self._cluster

    # Queries ----------------------------------------------------------------
    def fit(
        self,
        job: Job,
        pods: Sequence[Pod],
        mode: Mode,
        *,
        preempt: bool = False,
        released: frozenset[str] = frozenset(),
    ) -> Fit | NoFit:
        held = self._units.held
        free = self._free
        # Sorted: the order of a frozenset of keys changes with the hash seed, and the
        # order the freed jobs' nodes are tried in decides where the pods go.
        freed = sorted(k for k in released if k in held) if released else []
        if not freed and not preempt and not free.may_fit(pods):
            return NoFit(self._cluster, self._why(job, pods))
        if preempt:
            need = _gpus(pods)
            room = free.free_gpus() + sum(held[k].gpus for k in freed)
            # Upper bound from the per-mode counters before looking at any job
            # (it also bounds a placement without victims: free and freed GPUs).
            bound = room + self._units.freeable_bound(job, mode)
            if bound < need or (
                mode is Mode.GUARANTEED and not self._units.may_free(job, pods, freed)
            ):
                return NoFit(self._cluster, self._why(job, pods) + " even with preemption")
        # Without preemption the slot counts said yes above (asked once).
        placed = self._try(job, pods, freed) if freed or not preempt or free.may_fit(pods) else None
        if placed is not None:
            fit = self._fit(placed, ())
            if not freed:
                self._fresh = (fit, job, free.version)
            return fit
        if not preempt:
            return NoFit(self._cluster, self._why(job, pods))
        victims = self._victims(job, pods, mode, released, freed, room - need)
        if victims is None:
            return NoFit(self._cluster, self._why(job, pods) + " even with preemption")
        return self._fit(victims[0], victims[1])

    def _victims(
        self,
        job: Job,
        pods: Sequence[Pod],
        mode: Mode,
        released: frozenset[str],
        freed: list[str],
        spare: int,
    ) -> tuple[list[PodPlacement], tuple[str, ...]] | None:
        """Where ``pods`` go and whom they preempt, or None when no victims make room.

        Victims are chosen where they help: when a pod does not fit, the node that
        can take it by preempting the fewest, cheapest jobs gives them up
        (:meth:`_cheapest_room`), until the gang fits.  ``spare`` is the free and
        freed GPUs less the gang's: what the candidates' GPUs must make up.
        """
        held = self._units.held
        victims: list[str] = []
        on_node: dict[str, list[Charge]] = {}
        candidates = [
            info
            for info in self._units.candidates(job, mode)
            if info.key not in released and info.key != job.key
        ]
        if spare + sum(held[info.key].gpus for info in candidates) < 0:
            return None
        for info in sorted(candidates, key=_victim_key):
            for node_name in dict.fromkeys(pp.node for pp in held[info.key].pods):
                on_node.setdefault(node_name, []).append(info)
        while on_node:
            overlay = self._overlay(freed + victims)
            placed, failed = self._place(job, pods, overlay)
            if placed is not None:
                return placed, tuple(victims)
            assert failed is not None
            more = self._cheapest_room(job, failed, overlay, on_node, set(victims))
            if more is None:
                break
            victims += more
        return None

    def _cheapest_room(
        self,
        job: Job,
        pod: Pod,
        overlay: Overlay,
        on_node: Mapping[str, list[Charge]],
        taken: set[str],
    ) -> list[str] | None:
        """The fewest, cheapest further victims that make room for ``pod`` on one node."""
        best: tuple[tuple[int, tuple[int, int, int]], list[str]] | None = None
        nodes = self._free.nodes
        held_units = self._units.held
        cpu_only = not pod.gpus and bool(self._free.cpu_ranks)
        for node_name, infos in on_node.items():
            node = nodes[node_name]
            if not may_use(job, pod, node, cpu_only):
                continue
            free = dict(overlay[node_name][0] if node_name in overlay else node.free)
            add: list[Charge] = []
            for info in infos:
                if fits(pod.request, free):
                    break
                if info.key in taken:
                    continue
                add.append(info)
                held = held_units[info.key]
                for pp, req in zip(held.pods, held.requests, strict=True):
                    if pp.node == node_name:
                        for name, amount in req.amounts.items():
                            if name in free:
                                free[name] += amount
            if not add or not fits(pod.request, free):
                continue
            cost = (len(add), max(victim_order(i) for i in add))
            if best is None or cost < best[0]:
                best = (cost, [i.key for i in add])
        return best[1] if best else None

    def slots(self, gpus: int) -> int:
        """How many pods of ``gpus`` GPUs the free GPUs could take at most
        (:meth:`~fleet.core.capacity_nodes.FreeNodes.slots`)."""
        return self._free.slots(gpus)

    def may_fit(self, pods: Sequence[Pod]) -> bool:
        """A necessary condition for ``pods`` to fit now
        (:meth:`~fleet.core.capacity_nodes.FreeNodes.may_fit`)."""
        return self._free.may_fit(pods)

    def lowest_level(self, job: Job, pods: Sequence[Pod]) -> int:
        """0 when the pods could share one node (by GPU count), else 1."""
        return 0 if _gpus(pods) <= self._free.max_gpus else 1

    def _fit(self, placed: list[PodPlacement], victims: tuple[str, ...]) -> Fit:
        nodes = {p.node for p in placed}
        return Fit(self._cluster, tuple(placed), level=0 if len(nodes) <= 1 else 1, victims=victims)

    def _why(self, job: Job, pods: Sequence[Pod]) -> str:
        gpus = _gpus(pods)
        n = wording.count(len(pods), "pod")
        verb = "does" if len(pods) == 1 else "do"
        if not gpus and any(p.request.amounts for p in pods):
            total = sum((p.request for p in pods), Resources())
            asked = total.only((resources.CPU, resources.MEMORY))
            where = "the CPU-only nodes" if self._free.cpu_ranks else "the nodes"
            return (
                f"{n} asking no GPU ({_quantities(asked)} in all) {verb} not fit "
                f"the CPUs and memory free on {where}"
            )
        free = self._free.free_of(job)
        sku = f" of type {' or '.join(job.gpu_types)}" if job.gpu_types else ""
        asks = wording.amount(resources.GPU, gpus) + sku + (" in all" if len(pods) > 1 else "")
        return (
            f"{n} with {asks} {verb} not fit on its nodes "
            f"({wording.amount(resources.GPU, free)}{sku} free in all)"
        )

    def _try(
        self, job: Job, pods: Sequence[Pod], freed: Iterable[str]
    ) -> list[PodPlacement] | None:
        """Place ``pods`` on a scratch overlay; None if any pod does not fit."""
        return self._place(job, pods, self._overlay(freed))[0]

    def _overlay(self, freed: Iterable[str]) -> Overlay:
        """Scratch state of the nodes that jobs in ``freed`` would give back."""
        overlay: Overlay = {}
        nodes = self._free.nodes
        held_units = self._units.held
        for key in freed:
            held = held_units[key]
            for pp, req in zip(held.pods, held.requests, strict=True):
                free, idx = scratch(nodes[pp.node], overlay)
                for name, amount in req.amounts.items():
                    if name in free:
                        free[name] += amount
                idx.extend(pp.gpus)
                idx.sort()
        return overlay

    def _place(
        self, job: Job, pods: Sequence[Pod], overlay: Overlay
    ) -> tuple[list[PodPlacement] | None, Pod | None]:
        """Place ``pods`` one by one on ``overlay``: (placements, None) or (None, failed pod)."""
        placed: list[PodPlacement] = []
        nodes = self._free
        for pod in pods:
            node = nodes.pick(job, pod, overlay)
            if node is None:
                return None, pod
            free, idx = scratch(node, overlay)
            for name, amount in pod.request.amounts.items():
                if name in free:
                    free[name] -= amount
            gpus = tuple(idx[: pod.gpus])
            del idx[: pod.gpus]
            placed.append(PodPlacement(pod.name, node.name, gpus))
        return placed, None

    # Commands ---------------------------------------------------------------
    def bind(self, job: Job, charge: Charge, fit: Fit) -> None:
        self._hold(job, charge, fit)

    def _hold(self, job: Job, charge: Charge, fit: Fit) -> None:
        """Commit ``fit`` for unit ``charge`` after checking it all (BindError if not)."""
        if charge.key != job.key:
            raise BindError(f"{job.key}: bound as unit {charge.key} of another key")
        by_name = {p.name: p for p in job.pods}
        if not self._answered_now(fit, job):
            self._check_bind(job, fit, by_name)
        units = self._units
        free = self._free
        nodes = free.nodes
        held = units.unit(charge)
        for pp in fit.pods:
            node = nodes[pp.node]
            req = by_name[pp.pod].request
            free.take(node, req, pp.gpus)
            units.add_pod(held, pp, req, node)

    def _answered_now(self, fit: Fit, job: Job) -> bool:
        """Whether ``fit`` is the last fit :meth:`fit` answered, for ``job`` as it
        holds nothing here, with no victims and nothing freed, and no node changed
        since: it holds as it was checked then."""
        fresh = self._fresh
        self._fresh = None
        return (
            fresh is not None
            and fresh[0] is fit
            and fresh[1] is job
            and fresh[2] == self._free.version
            and job.key not in self._units.held
        )

    def _check_bind(self, job: Job, fit: Fit, by_name: dict[str, Pod]) -> None:
        """Raise BindError unless every pod of ``fit`` is one of ``job``'s not placed yet
        and all of them fit where ``fit`` puts them, together (a bind is all or nothing)."""
        held = self._units.held
        for victim in fit.victims:
            if victim in held:
                raise BindError(f"victim {victim} of {job.key} still holds {self._cluster}")
        placed = {pp.pod for pp in held[job.key].pods} if job.key in held else set()
        overlay: Overlay = {}
        for pp in fit.pods:
            pod = by_name.get(pp.pod)
            node = self._free.nodes.get(pp.node)
            if pod is None or node is None or pp.pod in placed:
                raise BindError(f"{job.key}: {pp.pod} on {pp.node} is not a pod it can place")
            free, idx = scratch(node, overlay)
            if not fits(pod.request, free) or not all(g in idx for g in pp.gpus):
                raise BindError(f"{job.key}: {pp.pod} no longer fits on {pp.node}; ask fit again")
            for name, amount in pod.request.amounts.items():
                if name in free:
                    free[name] -= amount
            for g in pp.gpus:
                idx.remove(g)
            placed.add(pp.pod)

    def set_node_health(self, node: str, healthy: bool) -> list[str]:
        """Take a bad node out of the buckets and the capacity; put it back when healthy."""
        target = self._free.nodes.get(node)
        if target is None:
            raise KeyError(f"{self._cluster} has no node {node!r}")
        if healthy == (node not in self._free.bad):
            return []
        self._free.set_health(target, healthy)
        self._units.node_health(target, healthy)
        return [] if healthy else self._units.on_node(node)

    def restore(self, job: Job, charge: Charge, pods: Sequence[PodPlacement]) -> None:
        """Hold ``pods`` of unit ``charge`` exactly where they were recorded (all or nothing)."""
        where = f"{self._cluster}: cannot restore {job.key}"
        if charge.key in self._units.held:
            raise RestoreError(f"{where}: it is already held here")
        records = placement.recorded_pods(self._cluster, job, pods)
        overlay: Overlay = {}
        recorded: dict[tuple[str, int], str] = {}
        for pp, pod in records:  # check everything first: a restore is all or nothing
            node = self._free.nodes.get(pp.node)
            if node is None:
                raise RestoreError(f"{where}: pod {pp.pod} is on node {pp.node}, which is unknown")
            if len(pp.gpus) != pod.gpus:
                raise RestoreError(
                    f"{where}: pod {pp.pod} asks {pod.gpus} GPU(s), the record gives {len(pp.gpus)}"
                )
            free, idx = scratch(node, overlay)
            for g in pp.gpus:
                if not 0 <= g < node.gpus:
                    raise RestoreError(
                        f"{where}: node {pp.node} has no GPU {g} (it has {node.gpus})"
                    )
                if (pp.node, g) in recorded:
                    raise RestoreError(
                        f"{where}: GPU {g} of node {pp.node} is recorded for pods "
                        f"{recorded[(pp.node, g)]} and {pp.pod}"
                    )
                recorded[(pp.node, g)] = pp.pod
                if g not in idx:
                    raise RestoreError(
                        f"{where}: GPU {g} of node {pp.node} is held by "
                        f"{self._units.owner(pp.node, g)}"
                    )
                idx.remove(g)
            if not fits(pod.request, free):
                raise RestoreError(f"{where}: pod {pp.pod} does not fit on node {pp.node}")
            for name, amount in pod.request.amounts.items():
                if name in free:
                    free[name] -= amount
        self._hold(job, charge, Fit(self._cluster, tuple(pp for pp, _ in records)))

    def release(self, key: str) -> None:
        held = self._units.remove(key)
        if held is None:
            return
        free = self._free
        for pp, req in zip(held.pods, held.requests, strict=True):
            free.give(free.nodes[pp.node], req, pp.gpus)

    # Introspection ----------------------------------------------------------
    def holds(self, key: str) -> bool:
        return key in self._units.held

    def may_have_victims(self, job: Job, mode: Mode) -> bool:
        return bool(self._units.held) and not job.opportunistic and mode is not Mode.OPPORTUNISTIC

    def running(self) -> list[Charge]:
        return [h.info for h in self._units.held.values()]

    def placement_of(self, key: str) -> tuple[PodPlacement, ...]:
        held = self._units.held.get(key)
        return tuple(held.pods) if held else ()

    def capacity(self) -> Resources:
        return self._free.capacity

    def allocated(self) -> Resources:
        return self._free.allocated()

    def node_capacities(self) -> dict[str, Resources]:
        out: dict[str, Resources] = {}
        for name, node in self._free.nodes.items():
            typed = Resources({typed_gpu(node.sku): node.gpus}) if node.sku and node.gpus else None
            out[name] = node.capacity if typed is None else node.capacity + typed
        return out

    def bad_nodes(self) -> frozenset[str]:
        return frozenset(self._free.bad)

    def free_gpus(self) -> int:
        return self._free.free_gpus()

    def check_invariants(self) -> None:
        """Recount from the held pods and compare every index and counter.

        Raises :class:`~fleet.core.checks.InvariantError` naming the node, GPU,
        job or queue that drifted, with the kept and the recounted value.
        """
        used, owners = self._units.recount()
        self._units.check_invariants()
        self._free.check_invariants(used, owners)


def _gpus(pods: Sequence[Pod]) -> int:
    """The GPUs ``pods`` ask for, together (a loop: no generator to build)."""
    total = 0
    for pod in pods:
        total += pod.request.amounts.get(resources.GPU, 0)
    return total


def _quantities(amounts: Resources) -> str:
    """``4 CPUs, 8 GiB memory``: a vector as a person reads it."""
    return ", ".join(wording.amount(k, v) for k, v in amounts.items()) or "nothing"
