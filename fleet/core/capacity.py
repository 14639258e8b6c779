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
  rule a node out.  A pod without GPUs goes to the first node with room.
* A gang is placed pod by pod on a scratch overlay; if one pod does not fit,
  nothing is placed (``NoFit``).  Asking never changes the placer.  Before
  that, the buckets' sizes say how many pods of each GPU size the free GPUs
  could hold at most (:meth:`CapacityPlacer.slots`); a gang of more is
  refused without placing it (:meth:`CapacityPlacer.may_fit`).
* With ``preempt=True``, whenever a pod of the gang does not fit, the node
  that can take it by preempting the fewest, then cheapest, further jobs
  gives them up (cheapest in the order of :func:`victim_order`:
  opportunistic, then borrowed, then lower-priority guaranteed jobs of the
  same queue; newest first), until the gang fits or no node can.  For a
  guaranteed job the nodes are first counted by the GPUs their guaranteed
  units leave (only those of other queues stay taken), and a gang those
  slots cannot hold is refused before any victim is looked at
  (:meth:`CapacityPlacer._may_free`).
* A job with a GPU SKU only lands on nodes of that SKU (``skus`` maps node to
  SKU); a job without one lands anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fleet.core import checks, placement, resources, sorted_ints
from fleet.core.charges import Charge
from fleet.core.checks import InvariantError
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import BindError, Fit, NoFit, Placer, PodPlacement, RestoreError
from fleet.core.resources import Resources


@dataclass(slots=True)
class _Node:
    name: str
    capacity: Resources
    gpus: int
    free: dict[str, int]
    free_gpus: list[int]  # sorted free GPU indices
    sku: str | None
    rank: int  # its place in node order (the buckets hold ranks)


@dataclass(slots=True)
class _Held:
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
        self._nodes: dict[str, _Node] = {}
        #: free GPU count -> the ranks of the healthy nodes with that many, in node
        #: order (a canonical order: the choice among equally free nodes never
        #: depends on history, so a restored placer answers as the original did);
        #: ranks, not names, so that keeping a bucket sorted compares plain ints
        self._buckets: dict[int, list[int]] = {}
        self._by_rank: list[_Node] = []
        self._held: dict[str, _Held] = {}
        self._capacity = Resources()
        self._allocated: dict[str, int] = {}
        #: ``allocated()`` as last built (None: ``_allocated`` changed since)
        self._allocated_view: Resources | None = None
        self._by_mode: dict[Mode, dict[str, None]] = {m: {} for m in Mode}
        self._mode_gpus: dict[Mode, int] = dict.fromkeys(Mode, 0)  # GPUs held per mode
        self._queue_gpus: dict[str, int] = {}  # GPUs of guaranteed jobs per queue
        self._guaranteed_by_queue: dict[str, dict[str, None]] = {}
        #: node -> GPUs its guaranteed units hold (only other victims' GPUs can be freed)
        self._guarded: dict[str, int] = {}
        #: GPUs not held by guaranteed units -> how many healthy nodes have that many
        self._open: dict[int, int] = {}
        self._bad: set[str] = set()
        #: bumped by every change to a node's free resources or health
        self._version = 0
        #: the last fit answered without victims or freed jobs, for which job, and
        #: the version it was answered at: bound unchanged, it needs no check
        self._fresh: tuple[Fit, Job, int] | None = None
        for name, cap in nodes.items():
            gpus = cap[resources.GPU]
            rank = len(self._by_rank)
            sku = (skus or {}).get(name)
            node = _Node(name, cap, gpus, dict(cap), list(range(gpus)), sku, rank)
            self._nodes[name] = node
            self._buckets.setdefault(gpus, []).append(len(self._by_rank))
            self._by_rank.append(node)
            self._open[gpus] = self._open.get(gpus, 0) + 1
            self._capacity = self._capacity + cap
        self._max_gpus = max((n.gpus for n in self._nodes.values()), default=0)
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
        # Sorted: the order of a frozenset of keys changes with the hash seed, and the
        # order the freed jobs' nodes are tried in decides where the pods go.
        freed = sorted(k for k in released if k in self._held) if released else []
        if not freed and not preempt and not self.may_fit(pods):
            return NoFit(self._cluster, self._why(job, pods))
        if preempt:
            need = _gpus(pods)
            room = self.free_gpus() + sum(self._gpus_of(k) for k in freed)
            # Upper bound from the per-mode counters before looking at any job
            # (it also bounds a placement without victims: free and freed GPUs).
            bound = room + self._mode_gpus[Mode.OPPORTUNISTIC]
            if mode is Mode.GUARANTEED:
                bound += self._mode_gpus[Mode.BORROWED] + self._queue_gpus.get(job.queue, 0)
            if bound < need or (mode is Mode.GUARANTEED and not self._may_free(job, pods, freed)):
                return NoFit(self._cluster, self._why(job, pods) + " even with preemption")
        # Without preemption the slot counts said yes above (asked once).
        placed = self._try(job, pods, freed) if freed or not preempt or self.may_fit(pods) else None
        if placed is not None:
            fit = self._fit(placed, ())
            if not freed:
                self._fresh = (fit, job, self._version)
            return fit
        if not preempt:
            return NoFit(self._cluster, self._why(job, pods))
        # Victims are chosen where they help: when a pod does not fit, the node
        # that can take it by preempting the fewest, cheapest jobs gives them up.
        victims: list[str] = []
        on_node: dict[str, list[Charge]] = {}
        candidates = [
            info
            for info in self._candidates(job, mode)
            if info.key not in released and info.key != job.key
        ]
        if room + sum(self._gpus_of(info.key) for info in candidates) < need:
            return NoFit(self._cluster, self._why(job, pods) + " even with preemption")
        for info in sorted(candidates, key=_victim_key):
            for node_name in dict.fromkeys(pp.node for pp in self._held[info.key].pods):
                on_node.setdefault(node_name, []).append(info)
        while on_node:
            overlay = self._overlay(freed + victims)
            placed, failed = self._place(job, pods, overlay)
            if placed is not None:
                return self._fit(placed, tuple(victims))
            assert failed is not None
            more = self._cheapest_room(job, failed, overlay, on_node, set(victims))
            if more is None:
                break
            victims += more
        return NoFit(self._cluster, self._why(job, pods) + " even with preemption")

    def _gpus_of(self, key: str) -> int:
        return self._held[key].gpus

    def _cheapest_room(
        self,
        job: Job,
        pod: Pod,
        overlay: Mapping[str, tuple[dict[str, int], list[int]]],
        on_node: Mapping[str, list[Charge]],
        taken: set[str],
    ) -> list[str] | None:
        """The fewest, cheapest further victims that make room for ``pod`` on one node."""
        best: tuple[tuple[int, tuple[int, int, int]], list[str]] | None = None
        for node_name, infos in on_node.items():
            node = self._nodes[node_name]
            if not self._sku_ok(job, node):
                continue
            free = dict(overlay[node_name][0] if node_name in overlay else node.free)
            add: list[Charge] = []
            for info in infos:
                if _fits(pod.request, free):
                    break
                if info.key in taken:
                    continue
                add.append(info)
                held = self._held[info.key]
                for pp, req in zip(held.pods, held.requests, strict=True):
                    if pp.node == node_name:
                        for name, amount in req.amounts.items():
                            if name in free:
                                free[name] += amount
            if not add or not _fits(pod.request, free):
                continue
            cost = (len(add), max(victim_order(i) for i in add))
            if best is None or cost < best[0]:
                best = (cost, [i.key for i in add])
        return best[1] if best else None

    def _candidates(self, job: Job, mode: Mode) -> list[Charge]:
        """Running jobs that ``job`` in ``mode`` may preempt (the indexes narrow
        the search; :func:`~fleet.core.placement.may_preempt` decides)."""
        if job.opportunistic or mode is Mode.OPPORTUNISTIC:
            return []
        held = self._held
        out = [held[k].info for k in self._by_mode[Mode.OPPORTUNISTIC]]
        if mode is Mode.GUARANTEED:
            out += [held[k].info for k in self._by_mode[Mode.BORROWED]]
            out += [
                held[k].info
                for k in self._guaranteed_by_queue.get(job.queue, ())
                if held[k].info.priority < job.priority
            ]
        return [info for info in out if placement.may_preempt(job, mode, info)]

    def slots(self, gpus: int) -> int:
        """How many pods of ``gpus`` GPUs the healthy nodes' free GPUs could take at
        most: the sum over nodes of ``free // gpus``, from the free-GPU buckets'
        sizes (a few lookups, not a walk over nodes)."""
        buckets = self._buckets
        total = 0
        for c in range(gpus, self._max_gpus + 1):
            bucket = buckets.get(c)
            if bucket:
                total += len(bucket) * (c // gpus)
        return total

    def may_fit(self, pods: Sequence[Pod]) -> bool:
        """A necessary condition, from the free-GPU buckets, for ``pods`` to fit now.

        A pod of at least ``g`` GPUs takes at least ``g`` of its node's free
        GPUs, so a node with ``f`` free holds at most ``f // g`` of them: for
        every GPU size ``g`` of the gang, the pods of ``g`` or more GPUs must
        not outnumber :meth:`slots` ``(g)``.  For pods that differ only in GPUs
        on nodes that limit only GPUs, and no GPU type asked, this is also
        sufficient (each pod placed takes one slot of its size); cpu, memory
        and GPU types can only make the real placement fail more often, so a
        False here is the answer the placement would give.
        """
        largest = self._largest_free()
        if len(pods) == 1:
            return pods[0].gpus <= largest
        sizes = [p.gpus for p in pods]
        top = max(sizes, default=0)
        if top > largest:
            return False
        if top == 0:
            return True
        if min(sizes) == top:  # one size (the usual gang)
            return self.slots(top) >= len(sizes)
        sizes.sort(reverse=True)
        for i, g in enumerate(sizes):
            if g == 0:
                break
            if i + 1 < len(sizes) and sizes[i + 1] == g:
                continue  # count every pod of this size first
            if self.slots(g) < i + 1:
                return False
        return True

    def _may_free(self, job: Job, pods: Sequence[Pod], freed: Sequence[str]) -> bool:
        """A necessary condition for a guaranteed ``job`` to fit ``pods`` by preempting
        (``freed`` already going): per node, only the GPUs that guaranteed units of
        other queues hold stay taken.

        Its victims are opportunistic and borrowed units and its own queue's lower
        priorities, so on a node it can have at most the GPUs not held by other
        queues' guaranteed units (and, of those, the freed ones): as with
        :meth:`may_fit`, the pods of ``g`` or more GPUs must not outnumber what
        those GPUs hold in pods of ``g``.  Counted from the nodes' guaranteed GPUs
        (:attr:`_open`, a few lookups), corrected on the few nodes where the job's
        own queue or a freed unit holds guaranteed GPUs.
        """
        sizes = sorted((p.gpus for p in pods if p.gpus), reverse=True)
        if not sizes:
            return True
        extra: dict[str, int] = {}  # node -> its guaranteed GPUs that may still go
        held = self._held
        for key in self._guaranteed_by_queue.get(job.queue, ()):
            for pp in held[key].pods:
                extra[pp.node] = extra.get(pp.node, 0) + len(pp.gpus)
        for key in freed:
            h = held[key]
            if h.info.mode is Mode.GUARANTEED and h.info.queue != job.queue:
                for pp in h.pods:
                    extra[pp.node] = extra.get(pp.node, 0) + len(pp.gpus)
        for i, g in enumerate(sizes):
            if i + 1 < len(sizes) and sizes[i + 1] == g:
                continue  # count every pod of this size first
            slots = sum(n * (c // g) for c, n in self._open.items() if c >= g)
            for name, more in extra.items():
                if name not in self._bad:
                    base = self._nodes[name].gpus - self._guarded.get(name, 0)
                    slots += (base + more) // g - base // g
            if slots < i + 1:
                return False
        return True

    def _largest_free(self) -> int:
        """The most free GPUs on any one node (a look at the buckets, not the nodes)."""
        for count in range(self._max_gpus, 0, -1):
            if self._buckets.get(count):
                return count
        return 0

    def lowest_level(self, job: Job, pods: Sequence[Pod]) -> int:
        """0 when the pods could share one node (by GPU count), else 1."""
        return 0 if _gpus(pods) <= self._max_gpus else 1

    def _fit(self, placed: list[PodPlacement], victims: tuple[str, ...]) -> Fit:
        nodes = {p.node for p in placed}
        return Fit(self._cluster, tuple(placed), level=0 if len(nodes) <= 1 else 1, victims=victims)

    def _why(self, job: Job, pods: Sequence[Pod]) -> str:
        gpus = _gpus(pods)
        if job.gpu_sku is None:
            free = self.free_gpus()
        else:
            free = sum(len(n.free_gpus) for n in self._nodes.values() if self._sku_ok(job, n))
        sku = f" of type {job.gpu_sku}" if job.gpu_sku else ""
        return f"{len(pods)} pod(s) with {gpus} GPU(s){sku} do not fit ({free} GPU(s) free)"

    @staticmethod
    def _sku_ok(job: Job, node: _Node) -> bool:
        return job.gpu_sku is None or node.sku == job.gpu_sku

    def _try(
        self, job: Job, pods: Sequence[Pod], freed: Iterable[str]
    ) -> list[PodPlacement] | None:
        """Place ``pods`` on a scratch overlay; None if any pod does not fit."""
        return self._place(job, pods, self._overlay(freed))[0]

    def _overlay(self, freed: Iterable[str]) -> dict[str, tuple[dict[str, int], list[int]]]:
        """Scratch state of the nodes that jobs in ``freed`` would give back."""
        overlay: dict[str, tuple[dict[str, int], list[int]]] = {}
        for key in freed:
            held = self._held[key]
            for pp, req in zip(held.pods, held.requests, strict=True):
                free, idx = _scratch(self._nodes[pp.node], overlay)
                for name, amount in req.amounts.items():
                    if name in free:
                        free[name] += amount
                idx.extend(pp.gpus)
                idx.sort()
        return overlay

    def _place(
        self,
        job: Job,
        pods: Sequence[Pod],
        overlay: dict[str, tuple[dict[str, int], list[int]]],
    ) -> tuple[list[PodPlacement] | None, Pod | None]:
        """Place ``pods`` one by one on ``overlay``: (placements, None) or (None, failed pod)."""
        placed: list[PodPlacement] = []
        for pod in pods:
            node = self._pick(job, pod, overlay)
            if node is None:
                return None, pod
            free, idx = _scratch(node, overlay)
            for name, amount in pod.request.amounts.items():
                if name in free:
                    free[name] -= amount
            gpus = tuple(idx[: pod.gpus])
            del idx[: pod.gpus]
            placed.append(PodPlacement(pod.name, node.name, gpus))
        return placed, None

    def _pick(
        self, job: Job, pod: Pod, overlay: dict[str, tuple[dict[str, int], list[int]]]
    ) -> _Node | None:
        # Nodes touched by this question are checked first with their scratch state
        # (packing a gang together), then the buckets from the fullest node up.
        for name, (free, _) in overlay.items():
            node = self._nodes[name]
            if name not in self._bad and self._sku_ok(job, node) and _fits(pod.request, free):
                return node
        by_rank = self._by_rank
        for count in range(pod.gpus, self._max_gpus + 1):
            bucket = self._buckets.get(count)
            if bucket is None:
                continue
            for rank in bucket:
                node = by_rank[rank]
                if node.name in overlay:
                    continue
                if self._sku_ok(job, node) and _fits(pod.request, node.free):
                    return node
        return None

    # Commands ---------------------------------------------------------------
    def bind(self, job: Job, charge: Charge, fit: Fit) -> None:
        self._hold(job, charge, fit)

    def _hold(self, job: Job, charge: Charge, fit: Fit) -> None:
        """Commit ``fit`` for unit ``charge`` after checking it all (BindError if not)."""
        if charge.key != job.key:
            raise BindError(f"{job.key}: bound as unit {charge.key} of another key")
        mode = charge.mode
        by_name = {p.name: p for p in job.pods}
        if not self._answered_now(fit, job):
            self._check_bind(job, fit, by_name)
        held = self._held.get(job.key)
        if held is None:
            held = self._held[job.key] = _Held(charge)
            self._by_mode[mode][job.key] = None
            if mode is Mode.GUARANTEED:
                self._guaranteed_by_queue.setdefault(job.queue, {})[job.key] = None
        for pp in fit.pods:
            node = self._nodes[pp.node]
            req = by_name[pp.pod].request
            self._take(node, req, pp.gpus)
            held.pods.append(pp)
            held.requests.append(req)
            held.gpus += len(pp.gpus)
            self._count_gpus(held.info, len(pp.gpus), node)

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
            and fresh[2] == self._version
            and job.key not in self._held
        )

    def _check_bind(self, job: Job, fit: Fit, by_name: dict[str, Pod]) -> None:
        """Raise BindError unless every pod of ``fit`` is one of ``job``'s not placed yet
        and all of them fit where ``fit`` puts them, together (a bind is all or nothing)."""
        for victim in fit.victims:
            if victim in self._held:
                raise BindError(f"victim {victim} of {job.key} still holds {self._cluster}")
        placed = {pp.pod for pp in self._held[job.key].pods} if job.key in self._held else set()
        overlay: dict[str, tuple[dict[str, int], list[int]]] = {}
        for pp in fit.pods:
            pod = by_name.get(pp.pod)
            node = self._nodes.get(pp.node)
            if pod is None or node is None or pp.pod in placed:
                raise BindError(f"{job.key}: {pp.pod} on {pp.node} is not a pod it can place")
            free, idx = _scratch(node, overlay)
            if not _fits(pod.request, free) or not all(g in idx for g in pp.gpus):
                raise BindError(f"{job.key}: {pp.pod} no longer fits on {pp.node}; ask fit again")
            for name, amount in pod.request.amounts.items():
                if name in free:
                    free[name] -= amount
            for g in pp.gpus:
                idx.remove(g)
            placed.add(pp.pod)

    def set_node_health(self, node: str, healthy: bool) -> list[str]:
        """Take a bad node out of the buckets and the capacity; put it back when healthy."""
        target = self._nodes.get(node)
        if target is None:
            raise KeyError(f"{self._cluster} has no node {node!r}")
        if healthy == (node not in self._bad):
            return []
        self._version += 1
        free = len(target.free_gpus)
        unguarded = target.gpus - self._guarded.get(node, 0)
        if healthy:
            self._bad.discard(node)
            self._bucket_add(free, target)
            self._count_open(unguarded, 1)
            self._capacity = self._capacity + target.capacity
            return []
        self._bad.add(node)
        self._bucket_remove(free, target)
        self._count_open(unguarded, -1)
        self._capacity = self._capacity - target.capacity
        return [k for k, h in self._held.items() if any(pp.node == node for pp in h.pods)]

    def restore(self, job: Job, charge: Charge, pods: Sequence[PodPlacement]) -> None:
        """Hold ``pods`` of unit ``charge`` exactly where they were recorded (all or nothing)."""
        where = f"{self._cluster}: cannot restore {job.key}"
        if charge.key in self._held:
            raise RestoreError(f"{where}: it is already held here")
        records = placement.recorded_pods(self._cluster, job, pods)
        overlay: dict[str, tuple[dict[str, int], list[int]]] = {}
        recorded: dict[tuple[str, int], str] = {}
        for pp, pod in records:  # check everything first: a restore is all or nothing
            node = self._nodes.get(pp.node)
            if node is None:
                raise RestoreError(f"{where}: pod {pp.pod} is on node {pp.node}, which is unknown")
            if len(pp.gpus) != pod.gpus:
                raise RestoreError(
                    f"{where}: pod {pp.pod} asks {pod.gpus} GPU(s), the record gives {len(pp.gpus)}"
                )
            free, idx = _scratch(node, overlay)
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
                        f"{where}: GPU {g} of node {pp.node} is held by {self._owner(pp.node, g)}"
                    )
                idx.remove(g)
            if not _fits(pod.request, free):
                raise RestoreError(f"{where}: pod {pp.pod} does not fit on node {pp.node}")
            for name, amount in pod.request.amounts.items():
                if name in free:
                    free[name] -= amount
        self._hold(job, charge, Fit(self._cluster, tuple(pp for pp, _ in records)))

    def _owner(self, node: str, gpu: int) -> str:
        """The job holding GPU ``gpu`` of ``node`` (a scan: for error messages only)."""
        for key, held in self._held.items():
            if any(pp.node == node and gpu in pp.gpus for pp in held.pods):
                return key
        return "another job"

    def release(self, key: str) -> None:
        held = self._held.pop(key, None)
        if held is None:
            return
        del self._by_mode[held.info.mode][key]
        if held.info.mode is Mode.GUARANTEED:
            del self._guaranteed_by_queue[held.info.queue][key]
        for pp, req in zip(held.pods, held.requests, strict=True):
            self._give(self._nodes[pp.node], req, pp.gpus)
            self._count_gpus(held.info, -len(pp.gpus), self._nodes[pp.node])

    def _count_gpus(self, info: Charge, gpus: int, node: _Node) -> None:
        self._mode_gpus[info.mode] += gpus
        if info.mode is Mode.GUARANTEED:
            self._queue_gpus[info.queue] = self._queue_gpus.get(info.queue, 0) + gpus
            before = self._guarded.get(node.name, 0)
            self._guarded[node.name] = before + gpus
            if node.name not in self._bad:
                self._count_open(node.gpus - before, -1)
                self._count_open(node.gpus - before - gpus, 1)

    def _count_open(self, gpus: int, nodes: int) -> None:
        left = self._open.get(gpus, 0) + nodes
        if left:
            self._open[gpus] = left
        else:
            del self._open[gpus]

    def _take(self, node: _Node, req: Resources, gpus: tuple[int, ...]) -> None:
        self._version += 1
        before = len(node.free_gpus)
        for name, amount in req.amounts.items():
            if name in node.free:
                node.free[name] -= amount
                self._allocated[name] = self._allocated.get(name, 0) + amount
                self._allocated_view = None
                if node.free[name] < 0:
                    raise ValueError(f"{node.name}: {name} over capacity")
        for g in gpus:
            node.free_gpus.remove(g)
        self._rebucket(node, before)

    def _give(self, node: _Node, req: Resources, gpus: tuple[int, ...]) -> None:
        self._version += 1
        before = len(node.free_gpus)
        for name, amount in req.amounts.items():
            if name in node.free:
                node.free[name] += amount
                self._allocated[name] -= amount
                self._allocated_view = None
        node.free_gpus.extend(gpus)
        node.free_gpus.sort()
        self._rebucket(node, before)

    def _bucket_add(self, free: int, node: _Node) -> None:
        bucket = self._buckets.get(free)
        if bucket is None:
            bucket = self._buckets[free] = []
        bucket.insert(sorted_ints.position(bucket, node.rank), node.rank)

    def _bucket_remove(self, free: int, node: _Node) -> None:
        bucket = self._buckets[free]
        i = sorted_ints.position(bucket, node.rank)
        if i >= len(bucket) or bucket[i] != node.rank:
            raise InvariantError(f"{node.name}: not in the bucket of nodes with {free} free GPUs")
        del bucket[i]

    def _rebucket(self, node: _Node, before: int) -> None:
        after = len(node.free_gpus)
        if after != before and node.name not in self._bad:
            self._bucket_remove(before, node)
            self._bucket_add(after, node)

    # Introspection ----------------------------------------------------------
    def holds(self, key: str) -> bool:
        return key in self._held

    def may_have_victims(self, job: Job, mode: Mode) -> bool:
        return bool(self._held) and not job.opportunistic and mode is not Mode.OPPORTUNISTIC

    def running(self) -> list[Charge]:
        return [h.info for h in self._held.values()]

    def placement_of(self, key: str) -> tuple[PodPlacement, ...]:
        held = self._held.get(key)
        return tuple(held.pods) if held else ()

    def capacity(self) -> Resources:
        return self._capacity

    def allocated(self) -> Resources:
        view = self._allocated_view
        if view is None:
            # The zeros dropped here, not by the interpreted constructor (it is
            # rebuilt after every bind or release the cycle asks about).
            nonzero = {name: amount for name, amount in self._allocated.items() if amount}
            view = self._allocated_view = Resources._raw(nonzero)  # a dict of its own
        return view

    def free_gpus(self) -> int:
        return self._capacity.amounts.get(resources.GPU, 0) - self._allocated.get(resources.GPU, 0)

    def check_invariants(self) -> None:
        """Recount from the held pods and compare every index and counter.

        Raises :class:`~fleet.core.checks.InvariantError` naming the node, GPU,
        job or queue that drifted, with the kept and the recounted value.
        """
        used: dict[str, dict[str, int]] = {n: {} for n in self._nodes}
        owners: dict[tuple[str, int], str] = {}
        for key, held in self._held.items():
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
                node_free = self._nodes[pp.node].free
                for name, amount in req.amounts.items():
                    if name in node_free:  # as _take counts: what the node has at all
                        per_node[name] = per_node.get(name, 0) + amount
                for g in pp.gpus:
                    other = owners.get((pp.node, g))
                    if other is not None:
                        raise InvariantError(f"GPU {pp.node}/{g} is held by {other} and {key}")
                    owners[(pp.node, g)] = key
        by_mode: dict[Mode, int] = dict.fromkeys(Mode, 0)
        by_queue: dict[str, int] = {}
        guaranteed: set[tuple[str, str]] = set()
        for key, held in self._held.items():
            gpus = sum(len(pp.gpus) for pp in held.pods)
            if held.gpus != gpus:
                raise InvariantError(f"{key}: {held.gpus} GPUs counted, its pods hold {gpus}")
            by_mode[held.info.mode] += gpus
            if held.info.mode is Mode.GUARANTEED:
                by_queue[held.info.queue] = by_queue.get(held.info.queue, 0) + gpus
                guaranteed.add((held.info.queue, key))
        if by_mode != self._mode_gpus:
            kept_modes = {m.value: n for m, n in self._mode_gpus.items()}
            recount_modes = {m.value: n for m, n in by_mode.items()}
            raise InvariantError(
                f"GPUs per mode drifted: kept {kept_modes}, recount {recount_modes}"
            )
        kept = {q: n for q, n in self._queue_gpus.items() if n}
        recount = {q: n for q, n in by_queue.items() if n}
        if kept != recount:
            raise InvariantError(
                f"GPUs of guaranteed jobs per queue drifted: kept {kept}, recount {recount}"
            )
        indexed = {(q, k) for q, keys in self._guaranteed_by_queue.items() for k in keys}
        if indexed != guaranteed:
            raise InvariantError(
                f"guaranteed-job index drifted: stale {sorted(indexed - guaranteed)}, "
                f"missing {sorted(guaranteed - indexed)}"
            )
        for mode, keys in self._by_mode.items():
            for k in keys:
                held_k = self._held.get(k)
                if held_k is None or held_k.info.mode is not mode:
                    actual = "is not held" if held_k is None else f"runs {held_k.info.mode}"
                    raise InvariantError(f"mode index lists {k} as {mode}, but it {actual}")
        indexed_modes = sum(len(k) for k in self._by_mode.values())
        if indexed_modes != len(self._held):
            raise InvariantError(
                f"mode index lists {indexed_modes} jobs, {len(self._held)} are held"
            )
        for free, ranks in self._buckets.items():
            if ranks != sorted(ranks):
                raise InvariantError(f"the bucket of nodes with {free} free GPUs is out of order")
        total: dict[str, int] = {}
        for per_node in used.values():
            for res, amount in per_node.items():
                total[res] = total.get(res, 0) + amount
        allocated = Resources(total)
        total_kept = Resources(self._allocated)
        if total_kept != allocated:
            raise InvariantError(f"allocated total drifted: kept {total_kept}, recount {allocated}")
        view = self._allocated_view
        if view is not None and view != total_kept:
            raise InvariantError(f"allocated view drifted: kept {view}, total {total_kept}")
        guarded: dict[str, int] = {}
        for held in self._held.values():
            if held.info.mode is Mode.GUARANTEED:
                for pp in held.pods:
                    guarded[pp.node] = guarded.get(pp.node, 0) + len(pp.gpus)
        guarded = {n: g for n, g in guarded.items() if g}
        if {n: g for n, g in self._guarded.items() if g} != guarded:
            raise InvariantError(
                f"guaranteed GPUs per node drifted: kept "
                f"{ {n: g for n, g in self._guarded.items() if g} }, recount {guarded}"
            )
        opened: dict[int, int] = {}
        for name, node in self._nodes.items():
            if name not in self._bad:
                left = node.gpus - guarded.get(name, 0)
                opened[left] = opened.get(left, 0) + 1
        if opened != self._open:
            raise InvariantError(
                f"nodes by GPUs not held by guaranteed units drifted: kept {self._open}, "
                f"recount {opened}"
            )
        bucketed = sum(len(b) for b in self._buckets.values())
        healthy = len(self._nodes) - len(self._bad)
        if bucketed != healthy:
            raise InvariantError(f"buckets list {bucketed} nodes, {healthy} are healthy")
        for name, node in self._nodes.items():
            for res, cap in node.capacity.items():
                taken = used[name].get(res, 0)
                if node.free[res] != cap - taken:
                    raise InvariantError(
                        f"{name}: free {res} drifted: kept {node.free[res]}, "
                        f"recount {cap - taken} ({cap} minus {taken} held)"
                    )
                if node.free[res] < 0:
                    raise InvariantError(f"{name}: {res} over capacity: {taken} held of {cap}")
            free_count = node.free.get(resources.GPU, len(node.free_gpus))
            if len(node.free_gpus) != free_count:
                raise InvariantError(
                    f"{name}: {len(node.free_gpus)} free GPU indices, but {free_count} "
                    "free GPUs counted"
                )
            expected = [g for g in range(node.gpus) if (name, g) not in owners]
            if node.free_gpus != expected:
                raise InvariantError(
                    f"{name}: free GPU indices drifted: kept {node.free_gpus}, recount {expected}"
                )
            in_bucket = node.rank in self._buckets.get(len(node.free_gpus), ())
            if name in self._bad and in_bucket:
                raise InvariantError(f"{name}: a bad node is in a free-GPU bucket")
            if name not in self._bad and not in_bucket:
                raise InvariantError(
                    f"{name}: not in the bucket of nodes with {len(node.free_gpus)} free GPUs"
                )


def _scratch(
    node: _Node, overlay: dict[str, tuple[dict[str, int], list[int]]]
) -> tuple[dict[str, int], list[int]]:
    """The node's scratch (free resources, free GPU indices), created on first use."""
    if node.name not in overlay:
        overlay[node.name] = (dict(node.free), list(node.free_gpus))
    return overlay[node.name]


def _gpus(pods: Sequence[Pod]) -> int:
    """The GPUs ``pods`` ask for, together (a loop: no generator to build)."""
    total = 0
    for pod in pods:
        total += pod.request.amounts.get(resources.GPU, 0)
    return total


def _fits(request: Resources, free: Mapping[str, int]) -> bool:
    for name, amount in request.amounts.items():
        have = free.get(name)
        if have is not None and have < amount:
            return False
    return True
