"""The hierarchical quota tree (ElasticQuotaTree semantics) and its usage.

Job: answer "may this request be admitted to this queue, and how is it charged?"
for the scheduling cycle, keep the usage of every node of the tree, and choose
which admitted jobs to preempt when a queue reclaims its ``min``.

Theory of operation:

* :meth:`QuotaTree.build` validates a :class:`QuotaNodeSpec` tree (unique names,
  namespaces only on leaves and in one leaf, children's ``min`` sum within the
  parent's ``min``, a child's ``max`` within its parent's, ``min <= max``, no
  negative quantity) and flattens it into parallel lists indexed by node
  number, in document order.  Every node keeps its path to the root as a tuple
  of indices, so every question walks one short path and never the tree.
* Usage lives in plain mutable ``dict[str, int]`` counters per node: ``used``
  (everything charged), ``guaranteed`` and ``borrowed``.  An admission adds the
  job's request on every node of its leaf→root path; a release subtracts it.
  Opportunistic jobs (negative priority) are charged ``kube-queue/max-jobs``
  only.  ``used == guaranteed + borrowed`` except for that opportunistic count.
* A job is GUARANTEED when it fits the leaf's ``min`` (on the resources the
  ``min`` names), BORROWED otherwise; either way ``used + request <= max`` must
  hold on every node of the path.  Non-preemptible jobs must be guaranteed.
* :meth:`QuotaTree.reclaim_victims` and :meth:`QuotaTree.queue_victims` are
  pure queries that pick preemption victims greedily in a documented order;
  the caller preempts them and releases them here.
* :meth:`QuotaTree.set_node` re-validates the whole tree and keeps usage even
  when it is now above a lowered ``max``: that excess is *grandfathered*: it
  is accepted by :meth:`QuotaTree.check_invariants` up to the usage at the
  time of the change, and :meth:`QuotaTree.classify` never adds to it.

The tree's rules live in :mod:`fleet.core.quota_rules`.  See
docs/decisions/0001-quota-semantics.md for the choices DESIGN.md left open.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from fleet.core.charges import Charge
from fleet.core.jobs import Mode

# QuotaNodeSpec and QuotaError are part of this module's API.
from fleet.core.quota_rules import QuotaError as QuotaError
from fleet.core.quota_rules import QuotaNodeSpec as QuotaNodeSpec
from fleet.core.quota_rules import fmt, validate
from fleet.core.resources import MAX_JOBS, Resources, format_quantity

#: QuotaBlock kinds.
MAX: Final = "max"
NON_PREEMPTIBLE_MIN: Final = "non-preemptible-min"


@dataclass(frozen=True, slots=True)
class QuotaBlock:
    """Why a request does not fit: ``node`` would exceed a limit on ``resource``.

    ``kind`` is ``"max"`` (``used + request`` above the node's ``max``) or
    ``"non-preemptible-min"`` (a non-preemptible job that does not fit the
    queue's ``min``; ``used`` is then the guaranteed usage).
    """

    node: str
    resource: str
    used: int
    request: int
    limit: int
    kind: str
    leaf: bool = True

    @property
    def reason(self) -> str:
        r = self.resource
        used = format_quantity(r, self.used)
        limit = format_quantity(r, self.limit)
        need = format_quantity(r, self.request)
        if self.kind == NON_PREEMPTIBLE_MIN:
            return (
                f"non-preemptible job needs to fit within min of queue {self.node}: "
                f"{r} {used}/{limit} guaranteed in use (needs {need} more)"
            )
        where = f"queue {self.node}" if self.leaf else f"node {self.node!r}"
        return f"{where} at {self.kind} {r} {used}/{limit} (needs {need} more)"


class _Admitted:
    """An admitted unit's charge record (shared with the state and the placer) and its leaf."""

    __slots__ = ("charge", "key", "leaf", "mode", "preemptible", "priority", "request", "seq")

    def __init__(self, charge: Charge, leaf: int) -> None:
        self.charge = charge
        self.leaf = leaf
        # Read-only views of the record, unpacked once for the reclaim search's hot loops.
        self.key = charge.key
        self.request = charge.request
        self.mode = charge.mode
        self.priority = charge.priority
        self.seq = charge.seq
        self.preemptible = charge.preemptible


def _reclaimable(rec: _Admitted) -> bool:
    """Whether a reclaim may ever take this job: borrowed, preemptible, not opportunistic."""
    return rec.mode is Mode.BORROWED and rec.preemptible and rec.priority >= 0


class _Unchanged:
    """Sentinel type: ``set_node`` leaves ``max`` as it is."""

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()


def _add(counter: dict[str, int], vec: Iterable[tuple[str, int]], sign: int) -> None:
    for r, v in vec:
        counter[r] = counter.get(r, 0) + sign * v


def _nonzero(counter: Mapping[str, int]) -> dict[str, int]:
    return {r: v for r, v in counter.items() if v}


class QuotaTree:
    """A validated quota tree with its usage; see the module docstring."""

    warnings: list[str]

    _names: list[str]
    _index: dict[str, int]
    _parent: list[int]
    _children: list[tuple[int, ...]]
    _spec_path: list[str]
    _paths: list[tuple[int, ...]]  # node -> root, node first
    _leaves_under: list[tuple[int, ...]]
    _min: list[Resources]
    _max: list[Resources | None]
    _min_d: list[dict[str, int]]
    _max_d: list[dict[str, int] | None]
    _namespaces: list[tuple[str, ...]]
    _ns_map: dict[str, int]
    _used: list[dict[str, int]]
    _guar: list[dict[str, int]]
    _borr: list[dict[str, int]]
    _count: list[int]
    _over: list[dict[str, int]]  # usage grandfathered above a max set_node lowered
    _jobs: dict[str, _Admitted]
    _leaf_jobs: list[dict[str, _Admitted]]
    _leaf_borrowed: list[dict[str, _Admitted]]  # reclaimable: borrowed, preemptible
    _borrowed_order: list[list[_Admitted] | None]  # the same, cheapest first; None = stale

    # Construction -------------------------------------------------------------
    @classmethod
    def build(cls, root: QuotaNodeSpec) -> QuotaTree:
        """Validate ``root`` and return an empty-usage tree; raise :class:`QuotaError`."""
        warnings = validate(root)
        self = cls.__new__(cls)
        self.warnings = warnings
        self._names = []
        self._index = {}
        self._parent = []
        self._children = []
        self._spec_path = []
        self._min = []
        self._max = []
        self._namespaces = []
        child_lists: list[list[int]] = []

        def flatten(node: QuotaNodeSpec, parent: int) -> None:
            i = len(self._names)
            self._names.append(node.name)
            self._index[node.name] = i
            self._parent.append(parent)
            self._spec_path.append(node.path)
            self._min.append(node.min)
            self._max.append(node.max)
            self._namespaces.append(tuple(node.namespaces))
            child_lists.append([])
            if parent >= 0:
                child_lists[parent].append(i)
            for child in node.children:
                flatten(child, i)

        flatten(root, -1)
        n = len(self._names)
        self._children = [tuple(c) for c in child_lists]
        self._paths = []
        for i in range(n):
            path = [i]
            while self._parent[path[-1]] >= 0:
                path.append(self._parent[path[-1]])
            self._paths.append(tuple(path))
        under: list[list[int]] = [[] for _ in range(n)]
        for i in range(n):
            if not self._children[i]:
                for a in self._paths[i]:
                    under[a].append(i)
        self._leaves_under = [tuple(u) for u in under]
        self._min_d = [dict(m) for m in self._min]
        self._max_d = [None if m is None else dict(m) for m in self._max]
        self._ns_map = {ns: i for i in range(n) for ns in self._namespaces[i]}
        self._used = [{} for _ in range(n)]
        self._guar = [{} for _ in range(n)]
        self._borr = [{} for _ in range(n)]
        self._count = [0] * n
        self._over = [{} for _ in range(n)]
        self._jobs = {}
        self._leaf_jobs = [{} for _ in range(n)]
        self._leaf_borrowed = [{} for _ in range(n)]
        self._borrowed_order = [None] * n
        return self

    def copy(self) -> QuotaTree:
        """An independent copy: changing its usage or quota leaves this tree alone."""
        other = QuotaTree.__new__(QuotaTree)
        other.warnings = list(self.warnings)
        # Immutable after build (set_node replaces entries, never mutates them).
        other._names = self._names
        other._index = self._index
        other._parent = self._parent
        other._children = self._children
        other._spec_path = self._spec_path
        other._paths = self._paths
        other._leaves_under = self._leaves_under
        # Replaced entry by entry by set_node: copy the lists.
        other._min = list(self._min)
        other._max = list(self._max)
        other._min_d = list(self._min_d)
        other._max_d = list(self._max_d)
        other._namespaces = list(self._namespaces)
        other._ns_map = dict(self._ns_map)
        # Mutable usage: copy deeply.
        other._used = [dict(d) for d in self._used]
        other._guar = [dict(d) for d in self._guar]
        other._borr = [dict(d) for d in self._borr]
        other._count = list(self._count)
        other._over = [dict(d) for d in self._over]
        other._jobs = dict(self._jobs)
        other._leaf_jobs = [dict(d) for d in self._leaf_jobs]
        other._leaf_borrowed = [dict(d) for d in self._leaf_borrowed]
        other._borrowed_order = [None] * len(self._leaf_borrowed)
        return other

    # Structure ----------------------------------------------------------------
    def _node(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no quota node named {name!r}") from None

    def _leaf(self, queue: str) -> int:
        i = self._node(queue)
        if self._children[i]:
            raise ValueError(f"quota node {queue!r} is not a leaf queue")
        return i

    def nodes(self) -> list[str]:
        """Every node name in document order (root first, depth-first)."""
        return list(self._names)

    def leaves(self) -> list[str]:
        """Leaf queue names in document order."""
        return [self._names[i] for i in self._leaves_under[0]]

    def is_leaf(self, name: str) -> bool:
        return not self._children[self._node(name)]

    def has_node(self, name: str) -> bool:
        return name in self._index

    def parent(self, name: str) -> str | None:
        p = self._parent[self._node(name)]
        return None if p < 0 else self._names[p]

    def children(self, name: str) -> list[str]:
        return [self._names[c] for c in self._children[self._node(name)]]

    def path_to_root(self, name: str) -> list[str]:
        """``[name, parent, ..., root]``."""
        return [self._names[i] for i in self._paths[self._node(name)]]

    def spec_path(self, name: str) -> str:
        """The node's field path in the document it was built from."""
        return self._spec_path[self._node(name)]

    def min_of(self, name: str) -> Resources:
        return self._min[self._node(name)]

    def max_of(self, name: str) -> Resources | None:
        """The node's own ``max``; None means it sets no limit."""
        return self._max[self._node(name)]

    def namespaces_of(self, name: str) -> tuple[str, ...]:
        return self._namespaces[self._node(name)]

    def queue_for_namespace(self, namespace: str) -> str | None:
        i = self._ns_map.get(namespace)
        return None if i is None else self._names[i]

    def to_spec(self) -> QuotaNodeSpec:
        """The tree as a :class:`QuotaNodeSpec` (with any ``set_node`` changes)."""
        return self._spec_with(-1, None, None, None)

    # Usage --------------------------------------------------------------------
    def used(self, name: str) -> Resources:
        """Everything charged at or below the node (all modes)."""
        return Resources(self._used[self._node(name)])

    def guaranteed_used(self, name: str) -> Resources:
        return Resources(self._guar[self._node(name)])

    def borrowed_used(self, name: str) -> Resources:
        return Resources(self._borr[self._node(name)])

    def admitted_count(self, name: str) -> int:
        """How many admitted jobs (any mode) are charged at or below the node."""
        return self._count[self._node(name)]

    def holds(self, key: str) -> bool:
        return key in self._jobs

    def mode_of(self, key: str) -> Mode:
        return self._jobs[key].mode

    def jobs_of(self, queue: str) -> list[str]:
        """Keys of the jobs admitted to a leaf queue, in admission order."""
        return list(self._leaf_jobs[self._leaf(queue)])

    def lowest_preemptible_priority(self, queue: str) -> int | None:
        """The lowest priority among the queue's preemptible, charged jobs (None if none).

        A job of this queue can preempt inside its queue only above it.
        """
        priorities = [
            rec.priority
            for rec in self._leaf_jobs[self._leaf(queue)].values()
            if rec.preemptible and rec.priority >= 0
        ]
        return min(priorities, default=None)

    # Admission ----------------------------------------------------------------
    def _fits_min(self, leaf: int, request: Resources) -> str | None:
        """None if ``request`` fits the leaf's min, else the first resource over it."""
        mn = self._min_d[leaf]
        if not mn:
            return ""
        guar = self._guar[leaf]
        for r, cap in mn.items():
            if guar.get(r, 0) + request.get(r, 0) > cap:
                return r
        return None

    def _max_block(self, path: tuple[int, ...], request: Resources) -> QuotaBlock | None:
        for n in path:
            mx = self._max_d[n]
            if mx is None:
                continue
            used = self._used[n]
            for r, amount in request.items():
                if amount <= 0:
                    continue
                cap = mx.get(r)
                if cap is not None and used.get(r, 0) + amount > cap:
                    return QuotaBlock(
                        node=self._names[n],
                        resource=r,
                        used=used.get(r, 0),
                        request=amount,
                        limit=cap,
                        kind=MAX,
                        leaf=not self._children[n],
                    )
        return None

    def classify(
        self, queue: str, request: Resources, *, priority: int, preemptible: bool
    ) -> Mode | QuotaBlock:
        """How ``request`` would be admitted to ``queue`` now, or why it cannot be."""
        leaf = self._leaf(queue)
        path = self._paths[leaf]
        if priority < 0:
            need = request.get(MAX_JOBS, 0)
            if need > 0:
                block = self._max_block(path, Resources({MAX_JOBS: need}))
                if block is not None:
                    return block
            return Mode.OPPORTUNISTIC
        over_min = self._fits_min(leaf, request)
        mode = Mode.GUARANTEED if over_min is None else Mode.BORROWED
        if over_min is not None and not preemptible:
            r = over_min or next(iter(request), MAX_JOBS)
            return QuotaBlock(
                node=self._names[leaf],
                resource=r,
                used=self._guar[leaf].get(r, 0),
                request=request.get(r, 0),
                limit=self._min_d[leaf].get(r, 0),
                kind=NON_PREEMPTIBLE_MIN,
            )
        block = self._max_block(path, request)
        return mode if block is None else block

    def admit(self, charge: Charge) -> None:
        """Charge an admitted unit to its queue; the caller has classified it first."""
        key = charge.key
        if key in self._jobs:
            raise ValueError(f"job {key!r} is already admitted")
        leaf = self._leaf(charge.queue)
        rec = _Admitted(charge, leaf)
        self._charge(rec, 1)
        self._jobs[key] = rec
        self._leaf_jobs[leaf][key] = rec
        if _reclaimable(rec):
            self._leaf_borrowed[leaf][key] = rec
            self._borrowed_order[leaf] = None

    def release(self, key: str) -> Charge:
        """Uncharge an admitted unit and return its charge; KeyError if not admitted."""
        rec = self._jobs.pop(key)
        del self._leaf_jobs[rec.leaf][key]
        if self._leaf_borrowed[rec.leaf].pop(key, None) is not None:
            self._borrowed_order[rec.leaf] = None
        self._charge(rec, -1)
        return rec.charge

    def _charge(self, rec: _Admitted, sign: int) -> None:
        path = self._paths[rec.leaf]
        if rec.mode is Mode.OPPORTUNISTIC:
            jobs = rec.request.get(MAX_JOBS, 0) * sign
            for n in path:
                used = self._used[n]
                used[MAX_JOBS] = used.get(MAX_JOBS, 0) + jobs
                self._count[n] += sign
            return
        items = list(rec.request.items())
        split = self._guar if rec.mode is Mode.GUARANTEED else self._borr
        for n in path:
            _add(self._used[n], items, sign)
            _add(split[n], items, sign)
            self._count[n] += sign

    # Preemption queries -------------------------------------------------------
    def _deficits(
        self, path: tuple[int, ...], request: Resources, removed: dict[int, dict[str, int]]
    ) -> list[tuple[int, str]]:
        """(node, resource) pairs on ``path`` where ``used - removed + request > max``."""
        out: list[tuple[int, str]] = []
        for n in path:
            mx = self._max_d[n]
            if mx is None:
                continue
            used = self._used[n]
            gone = removed.get(n, {})
            for r, amount in request.items():
                if amount <= 0:
                    continue
                cap = mx.get(r)
                if cap is not None and used.get(r, 0) - gone.get(r, 0) + amount > cap:
                    out.append((n, r))
        return out

    def _remove(self, removed: dict[int, dict[str, int]], rec: _Admitted, sign: int) -> None:
        for n in self._paths[rec.leaf]:
            _add(removed.setdefault(n, {}), rec.request.items(), sign)

    def _prune(
        self, path: tuple[int, ...], request: Resources, picked: list[_Admitted]
    ) -> list[str]:
        """Drop picks (latest first) that the others make unnecessary."""
        removed: dict[int, dict[str, int]] = {}
        for rec in picked:
            self._remove(removed, rec, 1)
        kept = list(picked)
        for rec in reversed(picked):
            if len(kept) == 1:
                break
            self._remove(removed, rec, -1)
            if self._deficits(path, request, removed):
                self._remove(removed, rec, 1)
            else:
                kept.remove(rec)
        return [rec.key for rec in kept]

    def reclaim_victims(self, queue: str, request: Resources) -> list[str] | None:
        """Borrowed jobs of other queues to preempt so a guaranteed ``request`` fits.

        ``[]`` when it fits already; None when the request is not within the
        queue's min or even every candidate would not make room.  Candidates
        are preemptible borrowed jobs of other queues under a blocking node,
        from queues (and subtrees) still above their own min.  Order: lowest
        priority, then the queue borrowing most of the blocking resource
        (recomputed after each pick), then newest.  A pure query.
        """
        leaf = self._leaf(queue)
        if self._fits_min(leaf, request) is not None:
            return None
        path = self._paths[leaf]
        removed: dict[int, dict[str, int]] = {}
        deficits = self._deficits(path, request, removed)
        if not deficits:
            return []
        if any(n == leaf for n, _ in deficits):
            return None  # only the queue's own jobs are charged there
        on_path = set(path)
        for n, r in deficits:
            # Cheap upper bound on what can go: borrowed usage in the subtrees
            # hanging off the path below ``n`` whose root is above its min
            # (a victim's whole chain off the path must be above its min).
            mx = self._max_d[n]
            assert mx is not None
            need = self._used[n].get(r, 0) + request.get(r, 0) - mx[r]
            bound = 0
            for m in path:
                for c in self._children[m]:
                    if c not in on_path and self._used[c].get(r, 0) > self._min_d[c].get(r, 0):
                        bound += self._borr[c].get(r, 0)
                if m == n:
                    break
            if bound < need:
                return None
        top = min((n for n, _ in deficits), key=lambda n: len(self._paths[n]))  # highest
        # Per leaf, its reclaimable jobs cheapest first (lowest priority, newest):
        # every job of one leaf borrows the same amount, so a leaf's first useful
        # job is its best.  Leaves sit in a heap keyed by a lower bound of their
        # best job's order (their first remaining job); a popped leaf whose
        # actual best is worse goes back with its actual key (lazy evaluation).
        # A leaf that cannot give anything now never can later in this query:
        # usage and deficits only shrink.
        chains: dict[int, tuple[int, ...]] = {}
        orders: dict[int, list[_Admitted]] = {}
        pos: dict[int, int] = {}
        for other in self._leaves_under[top]:
            if other == leaf or not self._leaf_borrowed[other]:
                continue
            ordered = self._borrowed_order[other]
            if ordered is None:
                ordered = sorted(
                    self._leaf_borrowed[other].values(), key=lambda r: (r.priority, -r.seq)
                )
                self._borrowed_order[other] = ordered
            # Nodes of the victim's subtree that must stay above their min:
            # from its leaf up to (not including) the common ancestor.
            chains[other] = tuple(n for n in self._paths[other] if n not in on_path)
            orders[other] = ordered
            pos[other] = 0

        def borrowed(other: int, r: str) -> int:
            return self._borr[other].get(r, 0) - removed.get(other, {}).get(r, 0)

        def lower_key(other: int, r: str) -> tuple[int, int, int]:
            head = orders[other][pos[other]]
            return (head.priority, -borrowed(other, r), -head.seq)

        blocking = deficits[0][1]
        heap = [(lower_key(o, blocking), o) for o in orders]
        heapq.heapify(heap)
        picked: list[_Admitted] = []
        while deficits:
            if deficits[0][1] != blocking:
                blocking = deficits[0][1]
                heap = [(lower_key(o, blocking), o) for o in orders if pos[o] < len(orders[o])]
                heapq.heapify(heap)
            if not heap:
                return None
            key, other = heapq.heappop(heap)
            givable = self._givable(other, chains[other], deficits, removed)
            recs = orders[other]
            i = pos[other]
            while i < len(recs) and not any(recs[i].request.get(r, 0) > 0 for r in givable):
                i += 1
            if not givable or i >= len(recs):
                pos[other] = len(recs)  # nothing more from this leaf
                continue
            rec = recs[i]
            actual = (rec.priority, -borrowed(other, blocking), -rec.seq)
            if actual > key:
                pos[other] = i
                heapq.heappush(heap, (actual, other))
                continue
            pos[other] = i + 1
            picked.append(rec)
            self._remove(removed, rec, 1)
            deficits = self._deficits(path, request, removed)
            if pos[other] < len(recs):
                heapq.heappush(heap, (lower_key(other, blocking), other))
        return self._prune(path, request, picked)

    def _givable(
        self,
        leaf: int,
        chain: tuple[int, ...],
        deficits: list[tuple[int, str]],
        removed: dict[int, dict[str, int]],
    ) -> list[str]:
        """Deficit resources a job of ``leaf`` may give up: the deficit's node is
        above the leaf and the leaf's chain off the reclaimer's path is still
        above its min in that resource."""
        rpath = self._paths[leaf]
        out: list[str] = []
        for n, r in deficits:
            if n in rpath and all(
                self._used[m].get(r, 0) - removed.get(m, {}).get(r, 0) > self._min_d[m].get(r, 0)
                for m in chain
            ):
                out.append(r)
        return out

    def queue_victims(self, queue: str, request: Resources, priority: int) -> list[str] | None:
        """Lower-priority jobs of the same queue to preempt so ``request`` fits every max.

        Candidates: the queue's own charged (non-negative priority), preemptible
        jobs with priority strictly below ``priority``, taken lowest priority
        then newest first, skipping those that free nothing still needed; then
        picks made unnecessary by later ones are dropped.  ``[]`` when it fits
        already, None when it cannot be made to fit.  A pure query.
        """
        leaf = self._leaf(queue)
        path = self._paths[leaf]
        removed: dict[int, dict[str, int]] = {}
        deficits = self._deficits(path, request, removed)
        if not deficits:
            return []
        candidates = sorted(
            (
                rec
                for rec in self._leaf_jobs[leaf].values()
                if rec.preemptible and 0 <= rec.priority < priority
            ),
            key=lambda rec: (rec.priority, -rec.seq),
        )
        picked: list[_Admitted] = []
        for rec in candidates:
            if not any(rec.request.get(r, 0) > 0 for _, r in deficits):
                continue
            picked.append(rec)
            self._remove(removed, rec, 1)
            deficits = self._deficits(path, request, removed)
            if not deficits:
                return self._prune(path, request, picked)
        return None

    # Quota changes ------------------------------------------------------------
    def _spec_with(
        self,
        target: int,
        new_min: Resources | None,
        new_max: Resources | _Unchanged | None,
        new_ns: tuple[str, ...] | None,
    ) -> QuotaNodeSpec:
        def make(i: int) -> QuotaNodeSpec:
            mn, mx, ns = self._min[i], self._max[i], self._namespaces[i]
            if i == target:
                mn = mn if new_min is None else new_min
                mx = mx if isinstance(new_max, _Unchanged) else new_max
                ns = ns if new_ns is None else new_ns
            return QuotaNodeSpec(
                name=self._names[i],
                min=mn,
                max=mx,
                namespaces=ns,
                children=tuple(make(c) for c in self._children[i]),
                path=self._spec_path[i],
            )

        return make(0)

    def set_node(
        self,
        name: str,
        *,
        min: Resources | None = None,
        max: Resources | _Unchanged | None = UNCHANGED,
        namespaces: tuple[str, ...] | None = None,
    ) -> None:
        """Change one node's min/max/namespaces; the whole tree is re-validated.

        On error raises :class:`QuotaError` and changes nothing.  Usage is kept,
        even above a lowered max: that usage is grandfathered (never forced out,
        never grown by an admission; ``check_invariants`` accepts up to it).
        """
        i = self._node(name)
        spec = self._spec_with(i, min, max, None if namespaces is None else tuple(namespaces))
        warnings = validate(spec)
        self.warnings = warnings
        if min is not None:
            self._min[i] = min
            self._min_d[i] = dict(min)
        if not isinstance(max, _Unchanged):
            self._max[i] = max
            self._max_d[i] = None if max is None else dict(max)
            used = self._used[i]
            self._over[i] = {r: used[r] for r, cap in (max or {}).items() if used.get(r, 0) > cap}
        if namespaces is not None:
            for ns in self._namespaces[i]:
                self._ns_map.pop(ns, None)
            self._namespaces[i] = tuple(namespaces)
            for ns in namespaces:
                self._ns_map[ns] = i

    def grandfather(self) -> None:
        """Accept the current usage above every ``max`` (after a tree change)."""
        for i, mx in enumerate(self._max_d):
            used = self._used[i]
            self._over[i] = {r: used[r] for r, cap in (mx or {}).items() if used.get(r, 0) > cap}

    # Invariants ---------------------------------------------------------------
    def check_invariants(self) -> None:
        """Recount usage from the admitted jobs and compare; usage never above max.

        Usage above a max that ``set_node`` lowered is accepted up to the usage
        at the time of that change.  Raises AssertionError on any mismatch.
        """
        n = len(self._names)
        used: list[dict[str, int]] = [{} for _ in range(n)]
        guar: list[dict[str, int]] = [{} for _ in range(n)]
        borr: list[dict[str, int]] = [{} for _ in range(n)]
        count = [0] * n
        for key, rec in self._jobs.items():
            assert self._leaf_jobs[rec.leaf].get(key) is rec, f"job {key} not indexed"
            for m in self._paths[rec.leaf]:
                count[m] += 1
                if rec.mode is Mode.OPPORTUNISTIC:
                    _add(used[m], [(MAX_JOBS, rec.request.get(MAX_JOBS, 0))], 1)
                    continue
                _add(used[m], rec.request.items(), 1)
                _add((guar if rec.mode is Mode.GUARANTEED else borr)[m], rec.request.items(), 1)
        assert sum(len(j) for j in self._leaf_jobs) == len(self._jobs), "stale job index"
        for leaf_index, recs in enumerate(self._leaf_borrowed):
            expected = {k for k, r in self._leaf_jobs[leaf_index].items() if _reclaimable(r)}
            assert set(recs) == expected, "stale reclaimable-job index"
        for m in range(n):
            name = self._names[m]
            assert _nonzero(self._used[m]) == _nonzero(used[m]), f"{name}: used drifted"
            assert _nonzero(self._guar[m]) == _nonzero(guar[m]), f"{name}: guaranteed drifted"
            assert _nonzero(self._borr[m]) == _nonzero(borr[m]), f"{name}: borrowed drifted"
            assert self._count[m] == count[m], f"{name}: admitted count drifted"
            mx = self._max_d[m]
            if mx is None:
                continue
            for r, cap in mx.items():
                allowed = max(cap, self._over[m].get(r, cap))
                assert used[m].get(r, 0) <= allowed, (
                    f"{name}: {fmt(r, used[m].get(r, 0))} used is above max "
                    f"{format_quantity(r, allowed)}"
                )
        for ns, i in self._ns_map.items():
            assert ns in self._namespaces[i], f"namespace {ns} indexed to the wrong node"
