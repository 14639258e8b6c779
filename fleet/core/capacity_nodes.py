"""The capacity placer's nodes: what each has free, and the free-GPU buckets over them.

Theory of operation: :class:`FreeNodes` is the part of
:class:`~fleet.core.capacity.CapacityPlacer` that knows the nodes and nothing
of the jobs on them.

* Each node has a capacity vector; it constrains only the resources it names
  (a node that declares no ``cpu`` does not limit cpu).  GPUs are numbered
  ``0..n-1`` per node and handed out lowest index first (``free_gpus``).
* The healthy nodes are indexed by their number of free GPUs, one ordered
  bucket of node ranks per count (a canonical order: the choice among equally
  free nodes never depends on history, so a restored placer answers as the
  original did).  :meth:`FreeNodes.pick` looks at the fullest nodes that still
  have ``g`` free first (best fit); :meth:`FreeNodes.slots` and
  :meth:`FreeNodes.may_fit` read the buckets' sizes only.
* :meth:`FreeNodes.take` and :meth:`FreeNodes.give` are the only changes to
  free resources; each moves the node between buckets and bumps ``version``,
  as a change of health does (:meth:`FreeNodes.set_health`).
* Nodes without GPUs are *CPU-only* (a cell config's CPU-only node pools).
  When a cluster has any, a pod that asks for no GPU goes only to them, the
  nodes its gang already touched first, then in node order (first fit by cpu
  and memory), whatever GPU type the job names; without any, it goes to the
  first node with room, as every pod did before (:func:`may_use` is the rule,
  :attr:`FreeNodes.cpu_ranks` its index).  A node's GPU count always limits,
  even where its capacity names none.
* A question is answered on a scratch *overlay* (:data:`Overlay`): per node
  touched, a copy of its free resources and free GPU indices, made on first
  use (:func:`scratch`); asking never changes the nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleet.core import resources, sorted_ints
from fleet.core.checks import InvariantError
from fleet.core.jobs import Job, Pod
from fleet.core.resources import Resources

#: Node name -> its scratch (free resources, free GPU indices) in one question.
Overlay = dict[str, tuple[dict[str, int], list[int]]]


@dataclass(slots=True)
class Node:
    """One node: its capacity, what it has free, and its place in node order."""

    name: str
    capacity: Resources
    gpus: int
    free: dict[str, int]
    free_gpus: list[int]  # sorted free GPU indices
    sku: str | None
    rank: int  # its place in node order (the buckets hold ranks)


class FreeNodes:
    """The nodes of one cluster, their free resources and the free-GPU buckets;
    see the module docstring."""

    def __init__(self, nodes: Mapping[str, Resources], skus: Mapping[str, str] | None) -> None:
        self.nodes: dict[str, Node] = {}
        #: free GPU count -> the ranks of the healthy nodes with that many, in node
        #: order; ranks, not names, so that keeping a bucket sorted compares plain ints
        self.buckets: dict[int, list[int]] = {}
        self.by_rank: list[Node] = []
        #: the ranks of the CPU-only nodes (no GPUs), in node order
        self.cpu_ranks: list[int] = []
        self.bad: set[str] = set()
        self.capacity = Resources()
        self._allocated: dict[str, int] = {}
        #: ``allocated()`` as last built (None: ``_allocated`` changed since)
        self._allocated_view: Resources | None = None
        #: bumped by every change to a node's free resources or health
        self.version = 0
        for name, cap in nodes.items():
            gpus = cap[resources.GPU]
            rank = len(self.by_rank)
            sku = (skus or {}).get(name)
            free = dict(cap.amounts)
            # The GPU count limits even where the capacity names none (zero is dropped).
            free[resources.GPU] = gpus
            node = Node(name, cap, gpus, free, list(range(gpus)), sku, rank)
            self.nodes[name] = node
            if not gpus:
                self.cpu_ranks.append(rank)
            self.buckets.setdefault(gpus, []).append(rank)
            self.by_rank.append(node)
            self.capacity = self.capacity + cap
        self.max_gpus = max((n.gpus for n in self.nodes.values()), default=0)

    # Queries ----------------------------------------------------------------
    def slots(self, gpus: int) -> int:
        """How many pods of ``gpus`` GPUs the healthy nodes' free GPUs could take at
        most: the sum over nodes of ``free // gpus``, from the free-GPU buckets'
        sizes (a few lookups, not a walk over nodes)."""
        buckets = self.buckets
        total = 0
        for c in range(gpus, self.max_gpus + 1):
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
        largest = self.largest_free()
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

    def largest_free(self) -> int:
        """The most free GPUs on any one node (a look at the buckets, not the nodes)."""
        for count in range(self.max_gpus, 0, -1):
            if self.buckets.get(count):
                return count
        return 0

    def pick(self, job: Job, pod: Pod, overlay: Overlay) -> Node | None:
        """The node ``pod`` goes to: the nodes this question touched first, with their
        scratch state (packing a gang together), then the buckets from the fullest
        node up; None when none has room."""
        nodes = self.nodes
        bad = self.bad
        cpu_only = not pod.gpus and bool(self.cpu_ranks)
        for name, (free, _) in overlay.items():
            node = nodes[name]
            if name not in bad and may_use(job, pod, node, cpu_only) and fits(pod.request, free):
                return node
        by_rank = self.by_rank
        if cpu_only:
            for rank in self.cpu_ranks:
                node = by_rank[rank]
                name = node.name
                if name not in overlay and name not in bad and fits(pod.request, node.free):
                    return node
            return None
        buckets = self.buckets
        for count in range(pod.gpus, self.max_gpus + 1):
            bucket = buckets.get(count)
            if bucket is None:
                continue
            for rank in bucket:
                node = by_rank[rank]
                if node.name in overlay:
                    continue
                if sku_ok(job, node) and fits(pod.request, node.free):
                    return node
        return None

    def free_of(self, job: Job) -> int:
        """The free GPUs ``job`` could use (of its types, when it names some)."""
        if not job.gpu_types:
            return self.free_gpus()
        return sum(len(n.free_gpus) for n in self.nodes.values() if sku_ok(job, n))

    def allocated(self) -> Resources:
        view = self._allocated_view
        if view is None:
            # The zeros dropped here, not by the interpreted constructor (it is
            # rebuilt after every bind or release the cycle asks about).
            nonzero = {name: amount for name, amount in self._allocated.items() if amount}
            view = self._allocated_view = Resources._raw(nonzero)  # a dict of its own
        return view

    def free_gpus(self) -> int:
        return self.capacity.amounts.get(resources.GPU, 0) - self._allocated.get(resources.GPU, 0)

    # Changes ----------------------------------------------------------------
    def take(self, node: Node, req: Resources, gpus: tuple[int, ...]) -> None:
        """``req`` and the GPUs ``gpus`` of ``node`` are taken."""
        self.version += 1
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

    def give(self, node: Node, req: Resources, gpus: tuple[int, ...]) -> None:
        """``req`` and the GPUs ``gpus`` of ``node`` are free again."""
        self.version += 1
        before = len(node.free_gpus)
        for name, amount in req.amounts.items():
            if name in node.free:
                node.free[name] += amount
                self._allocated[name] -= amount
                self._allocated_view = None
        node.free_gpus.extend(gpus)
        node.free_gpus.sort()
        self._rebucket(node, before)

    def set_health(self, node: Node, healthy: bool) -> None:
        """Take a bad node out of the buckets and the capacity; put it back when healthy
        (the caller has checked that its health changes)."""
        self.version += 1
        free = len(node.free_gpus)
        if healthy:
            self.bad.discard(node.name)
            self._bucket_add(free, node)
            self.capacity = self.capacity + node.capacity
        else:
            self.bad.add(node.name)
            self._bucket_remove(free, node)
            self.capacity = self.capacity - node.capacity

    def _bucket_add(self, free: int, node: Node) -> None:
        bucket = self.buckets.get(free)
        if bucket is None:
            bucket = self.buckets[free] = []
        bucket.insert(sorted_ints.position(bucket, node.rank), node.rank)

    def _bucket_remove(self, free: int, node: Node) -> None:
        bucket = self.buckets[free]
        i = sorted_ints.position(bucket, node.rank)
        if i >= len(bucket) or bucket[i] != node.rank:
            raise InvariantError(f"{node.name}: not in the bucket of nodes with {free} free GPUs")
        del bucket[i]

    def _rebucket(self, node: Node, before: int) -> None:
        after = len(node.free_gpus)
        if after != before and node.name not in self.bad:
            self._bucket_remove(before, node)
            self._bucket_add(after, node)

    # Invariants -------------------------------------------------------------
    def check_invariants(
        self, used: Mapping[str, Mapping[str, int]], owners: Mapping[tuple[str, int], str]
    ) -> None:
        """Compare the free resources, GPU indices, buckets and totals with ``used``
        (node -> resource -> what the held pods take there) and ``owners`` ((node,
        GPU) -> the job holding it), recounted from the held pods."""
        for free, ranks in self.buckets.items():
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
        bucketed = sum(len(b) for b in self.buckets.values())
        healthy = len(self.nodes) - len(self.bad)
        if bucketed != healthy:
            raise InvariantError(f"buckets list {bucketed} nodes, {healthy} are healthy")
        for name, node in self.nodes.items():
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
            in_bucket = node.rank in self.buckets.get(len(node.free_gpus), ())
            if name in self.bad and in_bucket:
                raise InvariantError(f"{name}: a bad node is in a free-GPU bucket")
            if name not in self.bad and not in_bucket:
                raise InvariantError(
                    f"{name}: not in the bucket of nodes with {len(node.free_gpus)} free GPUs"
                )


def may_use(job: Job, pod: Pod, node: Node, cpu_only: bool) -> bool:
    """Whether ``pod`` of ``job`` may land on ``node``: with ``cpu_only`` (it asks for
    no GPU and the cluster has CPU-only nodes) a CPU-only node, else a node of the
    job's GPU type (:func:`sku_ok`)."""
    if cpu_only:
        return not node.gpus
    return sku_ok(job, node)


def pool_takes(pod_gpus: int, node_gpus: int, cpu_nodes: bool) -> bool:
    """The rule of :func:`may_use` by counts, for those who know no :class:`Node`
    (the submission's fit test): whether a node of ``node_gpus`` GPUs, in a cluster
    that has CPU-only nodes or not (``cpu_nodes``), is one a pod asking
    ``pod_gpus`` GPUs may use (its GPU type and room aside)."""
    if not pod_gpus and cpu_nodes:
        return not node_gpus
    return True


def sku_ok(job: Job, node: Node) -> bool:
    """Whether ``job`` may land on ``node``: it names no GPU type, or the node's is
    one of its types."""
    types = job.gpu_types
    return not types or node.sku in types


def scratch(node: Node, overlay: Overlay) -> tuple[dict[str, int], list[int]]:
    """The node's scratch (free resources, free GPU indices), created on first use."""
    if node.name not in overlay:
        overlay[node.name] = (dict(node.free), list(node.free_gpus))
    return overlay[node.name]


def fits(request: Resources, free: Mapping[str, int]) -> bool:
    """Whether ``request`` fits ``free`` on every resource the node limits."""
    for name, amount in request.amounts.items():
        have = free.get(name)
        if have is not None and have < amount:
            return False
    return True
