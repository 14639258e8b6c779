"""Which admitted jobs to preempt so that a request fits its quota tree.

Job: two pure queries over a :class:`~fleet.core.quota_usage.QuotaUsage`:
:func:`reclaim_victims` picks borrowed jobs of *other* queues to preempt so
that a queue gets back its guaranteed ``min``; :func:`queue_victims` picks
lower-priority jobs of the *same* queue so that a request fits every ``max``.
The caller preempts the victims and releases them from the tree; neither
query changes usage.

Theory of operation:

* A *deficit* is a (node, resource) on the requesting leaf's path where
  ``used - removed + request > max``; ``removed`` is the usage of the jobs
  picked so far, per node (:func:`_deficits`).  A search picks jobs until no
  deficit is left, recomputing the deficits after each pick.
* A pick must free a resource that is still in deficit.  Picks made
  unnecessary by later ones are dropped afterwards, latest first
  (:func:`_prune`), so the answer is minimal in that order.
* Reclaim takes only reclaimable jobs (borrowed, preemptible, not
  opportunistic) of leaves under the highest blocking node, and only while the
  victim's chain of nodes off the requester's path stays above its own ``min``
  in the resource (:func:`_givable`).  Order: lowest priority, then the leaf
  borrowing most of the first still-blocking resource (recomputed after each
  pick; with fair share's memory on, the leaf with the largest fairness key,
  :meth:`~fleet.core.quota_usage.QuotaUsage.lend_figure`), then newest (of one
  job, its last growth step first: :func:`~fleet.core.quota_admitted.cheapest_first`).
  Every job of one leaf borrows from the same leaf, so each leaf's reclaimable jobs are kept
  sorted cheapest first (the *per-leaf borrowed order*, cached on the tree
  in ``_borrowed_order`` until the leaf's jobs change, built by
  :func:`_sorted_borrowed`) and leaves sit in a heap
  keyed lazily by their best remaining job.  Usually no heap is built over
  the leaves at all: the tree keeps the lending leaves under a node in the
  heap's starting order (:meth:`~fleet.core.quota_usage.QuotaUsage.lending_order`),
  and the search reads that order, with a small heap only for the leaves it
  put back (:func:`_search_in_order`).  After over-limit picks, the heap
  starts with only the leaves that could give something
  (:func:`_able_leaves`: from the tree's index of leaves with reclaimable
  jobs, those whose chain is above its ``min``), not every leaf under the
  blocking node.
* The queue search takes the queue's own preemptible jobs below the request's
  priority, lowest priority then newest, a job's last growth step first
  (none at once when the leaf's count of preemptible jobs by priority has
  none below it).

These are functions rather than methods so that the tree's classes hold only
its state and accounting; they read the tree's counters and indexes directly
(the same lists its own hot loops read) and write only the order cache.
"""

from __future__ import annotations

import heapq

from fleet.core.jobs import Mode
from fleet.core.quota_admitted import Admitted, cheapest_first
from fleet.core.quota_usage import QuotaUsage, add_to
from fleet.core.resources import MAX_JOBS, Resources


def protected(tree: QuotaUsage, rec: Admitted, now: float | None, which: int) -> bool:
    """Whether ``rec`` has run for less than its queue's minimum runtime ``which``
    (0: preemptMinRuntime, 1: reclaimMinRuntime) at ``now`` (None: never)."""
    if now is None:
        return False
    least = tree._runtime[rec.leaf][which]
    return least > 0 and now - rec.charge.since < least


def protected_until(tree: QuotaUsage, rec: Admitted, which: int) -> float:
    """When ``rec``'s minimum runtime ``which`` ends."""
    return rec.charge.since + tree._runtime[rec.leaf][which]


PREEMPT: int = 0
RECLAIM: int = 1


def _deficits(
    tree: QuotaUsage,
    path: tuple[int, ...],
    request: Resources,
    removed: dict[int, dict[str, int]],
) -> list[tuple[int, str]]:
    """(node, resource) pairs on ``path`` where ``used - removed + request > max``."""
    out: list[tuple[int, str]] = []
    for n in path:
        mx = tree._max_d[n]
        if mx is None:
            continue
        used = tree._used[n]
        gone = removed.get(n, {})
        for r, amount in request.amounts.items():
            if amount <= 0:
                continue
            cap = mx.get(r)
            if cap is not None and used.get(r, 0) - gone.get(r, 0) + amount > cap:
                out.append((n, r))
    return out


def _remove(tree: QuotaUsage, removed: dict[int, dict[str, int]], rec: Admitted, sign: int) -> None:
    """Count ``rec``'s request as removed (``sign`` 1) or back (-1) on its whole path."""
    for n in tree._paths[rec.leaf]:
        add_to(removed.setdefault(n, {}), rec.request.amounts, sign)


def _prune(
    tree: QuotaUsage, path: tuple[int, ...], request: Resources, picked: list[Admitted]
) -> list[str]:
    """Drop picks (latest first) that the others make unnecessary."""
    removed: dict[int, dict[str, int]] = {}
    for rec in picked:
        _remove(tree, removed, rec, 1)
    kept = list(picked)
    for rec in reversed(picked):
        if len(kept) == 1:
            break
        _remove(tree, removed, rec, -1)
        if _deficits(tree, path, request, removed):
            _remove(tree, removed, rec, 1)
        else:
            kept.remove(rec)
    return [rec.key for rec in kept]


def _sorted_borrowed(tree: QuotaUsage, leaf: int) -> list[Admitted]:
    """The leaf's reclaimable jobs cheapest first, cached on the tree until they change."""
    ordered = sorted(tree._admitted.leaf_borrowed[leaf].values(), key=cheapest_first)
    tree._admitted.borrowed_order[leaf] = ordered
    return ordered


def reclaim_victims(
    tree: QuotaUsage,
    queue: str,
    request: Resources,
    now: float | None = None,
    *,
    bounded: bool = True,
) -> list[str] | None:
    """Borrowed jobs of other queues to preempt so a guaranteed ``request`` fits.

    ``[]`` when it fits already; None when the request is not within the
    queue's min or even every candidate would not make room.  Candidates
    are preemptible borrowed jobs of other queues under a blocking node,
    from queues (and subtrees) still above their own min.  Order: lowest
    priority, then the queue borrowing most of the blocking resource
    (recomputed after each pick), then newest.  With ``now``, jobs that have
    run for less than their queue's ``reclaimMinRuntime`` are not taken.  A
    pure query.  ``bounded`` (the default) seeds the search only with the
    leaves that could give something (:func:`_able_leaves`); off, with every
    leaf under the blocking node that has reclaimable jobs (the same answer,
    the reference the bounded walk is checked against).
    """
    leaf = tree._leaf(queue)
    if not tree._fits_min(leaf, request).fits:
        return None
    path = tree._paths[leaf]
    removed: dict[int, dict[str, int]] = {}
    deficits = _deficits(tree, path, request, removed)
    if not deficits:
        return []
    if any(n == leaf for n, _ in deficits):
        return None  # only the queue's own jobs are charged there
    on_path = set(path)
    # First the jobs that keep a node over its limits since a tree change.
    picked = _over_limit_picks(tree, leaf, path, request, removed, now)
    deficits = _deficits(tree, path, request, removed)
    if not deficits:
        return _prune(tree, path, request, picked)
    taken = {rec.key for rec in picked}
    for n, r in deficits:
        # Cheap upper bound on what can go: borrowed usage in the subtrees
        # hanging off the path below ``n`` whose root is above its min
        # (a victim's whole chain off the path must be above its min).
        mx = tree._max_d[n]
        assert mx is not None
        need = tree._used[n].get(r, 0) - removed.get(n, {}).get(r, 0) + request.get(r, 0) - mx[r]
        bound = 0
        for m in path:
            for c in tree._children[m]:
                if c not in on_path and tree._used[c].get(r, 0) > tree._min_d[c].get(r, 0):
                    bound += tree._borr[c].get(r, 0)
            if m == n:
                break
        if bound < need:
            return None
    top = min((n for n, _ in deficits), key=lambda n: len(tree._paths[n]))  # highest
    # Per leaf, its reclaimable jobs cheapest first (lowest priority, newest):
    # every job of one leaf borrows the same amount, so a leaf's first useful
    # job is its best.  Leaves sit in a heap keyed by a lower bound of their
    # best job's order (their first remaining job); a popped leaf whose
    # actual best is worse goes back with its actual key (lazy evaluation).
    # A leaf that cannot give anything now never can later in this query:
    # usage and deficits only shrink.
    if bounded and not picked:
        return _search_in_order(tree, leaf, path, request, deficits, top, now)
    chains: dict[int, tuple[int, ...]] = {}
    orders: dict[int, list[Admitted]] = {}
    pos: dict[int, int] = {}
    if bounded:
        seeds = _able_leaves(tree, top, leaf, path, deficits, removed)
    else:
        seeds = [
            o for o in tree._leaves_under[top] if o != leaf and tree._admitted.leaf_borrowed[o]
        ]
    for other in seeds:
        ordered = tree._admitted.borrowed_order[other]
        if ordered is None:
            ordered = _sorted_borrowed(tree, other)
        orders[other] = ordered
        pos[other] = 0

    def borrowed(other: int, r: str) -> float:
        return tree.lend_figure(other, r, removed.get(other, {}).get(r, 0))

    def lower_key(other: int, r: str) -> tuple[int, float, int]:
        head = orders[other][pos[other]]
        return (head.priority, -borrowed(other, r), -head.seq)

    blocking = deficits[0][1]
    heap = [(lower_key(o, blocking), o) for o in orders]
    heapq.heapify(heap)
    while deficits:
        if deficits[0][1] != blocking:
            blocking = deficits[0][1]
            heap = [(lower_key(o, blocking), o) for o in orders if pos[o] < len(orders[o])]
            heapq.heapify(heap)
        if not heap:
            return None
        key, other = heapq.heappop(heap)
        chain = chains.get(other)
        if chain is None:
            # Nodes of the victim's subtree that must stay above their min:
            # from its leaf up to (not including) the common ancestor.  Only
            # for the leaves the search gets to, not every leaf under ``top``.
            chain = chains[other] = tuple(n for n in tree._paths[other] if n not in on_path)
        givable = _givable(tree, other, chain, deficits, removed)
        recs = orders[other]
        i = pos[other]
        while i < len(recs) and (
            recs[i].key in taken
            or not any(recs[i].request.get(r, 0) > 0 for r in givable)
            or protected(tree, recs[i], now, RECLAIM)
        ):
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
        _remove(tree, removed, rec, 1)
        deficits = _deficits(tree, path, request, removed)
        if pos[other] < len(recs):
            heapq.heappush(heap, (lower_key(other, blocking), other))
    return _prune(tree, path, request, picked)


def _search_in_order(
    tree: QuotaUsage,
    leaf: int,
    path: tuple[int, ...],
    request: Resources,
    deficits: list[tuple[int, str]],
    top: int,
    now: float | None,
) -> list[str] | None:
    """The reclaim search of :func:`reclaim_victims`, reading the lending leaves in
    the order the tree keeps (:meth:`~fleet.core.quota_usage.QuotaUsage.lending_order`)
    instead of keying each of them into a heap first.

    Nothing is picked yet, so a leaf's key in the kept order is the key the
    heap would start it with.  The next leaf is the smaller of the kept
    order's next entry and the top of a small heap of the leaves already
    looked at and put back (with a larger key after a pick, or their actual
    key): the heap's order, over every lending leaf under ``top``.  A leaf
    that cannot give (its chain at or below its ``min``: :func:`_givable`
    says so) is dropped when it comes up, as the search over every leaf
    drops it.  When the blocking resource changes, every leaf still in play
    is keyed again, as the heap does.
    """
    removed: dict[int, dict[str, int]] = {}
    on_path = set(path)
    blocking = deficits[0][1]
    index = tree.lending_order(top, blocking)
    cursor = 0
    again: list[tuple[tuple[int, float, int], int]] = []
    chains: dict[int, tuple[int, ...]] = {}
    orders: dict[int, list[Admitted]] = {}
    pos: dict[int, int] = {}
    picked: list[Admitted] = []
    borrowed_order = tree._admitted.borrowed_order

    def order_of(other: int) -> list[Admitted]:
        ordered = orders.get(other)
        if ordered is None:
            ordered = borrowed_order[other]
            if ordered is None:
                ordered = _sorted_borrowed(tree, other)
            orders[other] = ordered
        return ordered

    def lower_key(other: int, r: str) -> tuple[int, float, int]:
        head = order_of(other)[pos.get(other, 0)]
        gone = removed.get(other)
        borrowed = tree.lend_figure(other, r, gone.get(r, 0) if gone else 0)
        return (head.priority, -borrowed, -head.seq)

    while deficits:
        if deficits[0][1] != blocking:
            blocking = deficits[0][1]
            live = [o for _, o in index if o != leaf and pos.get(o, 0) < len(order_of(o))]
            again = [(lower_key(o, blocking), o) for o in live]
            heapq.heapify(again)
            cursor = len(index)
        while cursor < len(index) and index[cursor][1] == leaf:
            cursor += 1
        if cursor < len(index) and (not again or index[cursor] < again[0]):
            key, other = index[cursor]
            cursor += 1
        elif again:
            key, other = heapq.heappop(again)
        else:
            return None
        chain = chains.get(other)
        if chain is None:
            chain = chains[other] = tuple(n for n in tree._paths[other] if n not in on_path)
        givable = _givable(tree, other, chain, deficits, removed)
        if not givable:
            pos[other] = len(order_of(other))  # nothing more from this leaf
            continue
        recs = order_of(other)
        i = pos.get(other, 0)
        while i < len(recs) and (
            not any(recs[i].request.get(r, 0) > 0 for r in givable)
            or protected(tree, recs[i], now, RECLAIM)
        ):
            i += 1
        if i >= len(recs):
            pos[other] = len(recs)
            continue
        rec = recs[i]
        gone = removed.get(other)
        actual = (
            rec.priority,
            -tree.lend_figure(other, blocking, gone.get(blocking, 0) if gone else 0),
            -rec.seq,
        )
        if actual > key:
            pos[other] = i
            heapq.heappush(again, (actual, other))
            continue
        pos[other] = i + 1
        picked.append(rec)
        _remove(tree, removed, rec, 1)
        deficits = _deficits(tree, path, request, removed)
        if pos[other] < len(recs):
            heapq.heappush(again, (lower_key(other, blocking), other))
    return _prune(tree, path, request, picked)


def _able_leaves(
    tree: QuotaUsage,
    top: int,
    leaf: int,
    path: tuple[int, ...],
    deficits: list[tuple[int, str]],
    removed: dict[int, dict[str, int]],
) -> list[int]:
    """The leaves under ``top`` whose jobs :func:`_givable` may let go now, in tree order.

    Only leaves with reclaimable jobs are looked at (the tree's ``_lending``
    index, not every leaf under ``top``), and of those only the ones whose
    chain (from the leaf up to the reclaimer's ``path``) is above its own
    ``min`` in a resource of a deficit at or above where the chain meets the
    path: what :func:`_givable` asks when the search gets to the leaf.  A
    chain node's answer is worked out once per search, for all the leaves
    under it.  Usage and deficits only shrink during one search, so a leaf
    left out here could never give anything later in it: the answer is the
    one a search seeded with every leaf under ``top`` gives.
    """
    paths, used, mins = tree._paths, tree._used, tree._min_d
    # A path node (up to ``top``) -> the resources of the deficits at or above it.
    able: dict[int, tuple[str, ...]] = {}
    for m in path:
        able[m] = tuple(dict.fromkeys(r for n, r in deficits if n in paths[m]))
        if m == top:
            break
    # Off-path nodes get, once, the resources their chain is above min in;
    # the path nodes above ``top`` are left out (their subtrees are not under it).
    for m in path[path.index(top) + 1 :]:
        able[m] = ()

    def above(node: int, rs: tuple[str, ...]) -> tuple[str, ...]:
        """Those of ``rs`` that ``node`` uses more of than its ``min``."""
        here = used[node]
        gone = removed.get(node)
        floor = mins[node]
        return tuple(
            r for r in rs if here.get(r, 0) - (gone.get(r, 0) if gone else 0) > floor.get(r, 0)
        )

    out: list[int] = []
    for other in sorted(tree._admitted.lending):
        if other == leaf:
            continue
        chain = paths[other]
        rs = able.get(chain[1])  # the parent's, most often known already
        if rs is None:
            climb: list[int] = []
            for node in chain[1:]:
                if node in able:
                    break
                climb.append(node)
            rs = able[node]
            for node in reversed(climb):
                rs = able[node] = above(node, rs) if rs else ()
        if not rs:
            continue
        here = used[other]
        gone = removed.get(other)
        floor = mins[other]
        for r in rs:
            if here.get(r, 0) - (gone.get(r, 0) if gone else 0) > floor.get(r, 0):
                out.append(other)
                break
    return out


def _over_limit_picks(
    tree: QuotaUsage,
    leaf: int,
    path: tuple[int, ...],
    request: Resources,
    removed: dict[int, dict[str, int]],
    now: float | None,
) -> list[Admitted]:
    """Over-limit jobs of other queues (newest first per cut node, nodes in tree
    order) that reduce a deficit of ``path``; counted in ``removed``."""
    picked: list[Admitted] = []
    if not tree._cut:
        return picked
    for n in sorted(tree._cut):
        if tree.over_limit(n) is None or leaf in tree._leaves_under[n]:
            continue
        for key in over_limit_victims(tree, tree._names[n]):
            rec = tree._admitted.jobs[key]
            if not rec.preemptible or rec.mode is Mode.OPPORTUNISTIC:
                continue
            if protected(tree, rec, now, RECLAIM):
                continue
            deficits = _deficits(tree, path, request, removed)
            if not deficits:
                return picked
            rpath = tree._paths[rec.leaf]
            if any(m in rpath and rec.request.get(r, 0) > 0 for m, r in deficits):
                picked.append(rec)
                _remove(tree, removed, rec, 1)
    return picked


def _givable(
    tree: QuotaUsage,
    leaf: int,
    chain: tuple[int, ...],
    deficits: list[tuple[int, str]],
    removed: dict[int, dict[str, int]],
) -> list[str]:
    """Deficit resources a job of ``leaf`` may give up: the deficit's node is
    above the leaf and the leaf's chain off the reclaimer's path is still
    above its min in that resource."""
    rpath = tree._paths[leaf]
    out: list[str] = []
    for n, r in deficits:
        if n in rpath and all(
            tree._used[m].get(r, 0) - removed.get(m, {}).get(r, 0) > tree._min_d[m].get(r, 0)
            for m in chain
        ):
            out.append(r)
    return out


def queue_victims(
    tree: QuotaUsage, queue: str, request: Resources, priority: int, now: float | None = None
) -> list[str] | None:
    """Lower-priority jobs of the same queue to preempt so ``request`` fits every max.

    Candidates: the queue's own charged (non-negative priority), preemptible
    jobs with priority strictly below ``priority``, taken lowest priority
    then newest first, skipping those that free nothing still needed; then
    picks made unnecessary by later ones are dropped.  With ``now``, jobs that
    have run for less than the queue's ``preemptMinRuntime`` are not taken.
    ``[]`` when it fits already, None when it cannot be made to fit.  A pure
    query.
    """
    leaf = tree._leaf(queue)
    path = tree._paths[leaf]
    removed: dict[int, dict[str, int]] = {}
    deficits = _deficits(tree, path, request, removed)
    if not deficits:
        return []
    lowest = tree._admitted.lowest[leaf]
    if lowest is None or lowest >= priority:
        return None  # no preemptible job of the queue below ``priority`` (the leaf's count)
    candidates = [
        rec
        for rec in tree._admitted.leaf_jobs[leaf].values()
        if rec.preemptible
        and 0 <= rec.priority < priority
        and not protected(tree, rec, now, PREEMPT)
    ]
    if _short(tree, request, deficits, candidates):
        return None
    candidates.sort(key=cheapest_first)
    picked: list[Admitted] = []
    for rec in candidates:
        if not any(rec.request.get(r, 0) > 0 for _, r in deficits):
            continue
        picked.append(rec)
        _remove(tree, removed, rec, 1)
        deficits = _deficits(tree, path, request, removed)
        if not deficits:
            return _prune(tree, path, request, picked)
    return None


def _short(
    tree: QuotaUsage,
    request: Resources,
    deficits: list[tuple[int, str]],
    candidates: list[Admitted],
) -> bool:
    """Whether even all ``candidates`` (jobs of one leaf, so charged on its whole
    path) cannot free enough of some resource short at some node: then the
    search that takes them one by one fails too, and need not be run."""
    for n, r in deficits:
        cap = (tree._max_d[n] or {}).get(r)
        if cap is None:
            continue  # not a deficit (there is one only under a max)
        short = tree._used[n].get(r, 0) + request.get(r, 0) - cap
        for rec in candidates:
            short -= rec.request.get(r, 0)
            if short <= 0:
                break
        if short > 0:
            return True
    return False


def over_limit_victims(tree: QuotaUsage, node: str) -> list[str]:
    """The jobs that keep ``node`` over its limits since a tree change: newest first.

    Walks the jobs charged at or below ``node`` from the newest and takes each
    one that reduces a still positive excess (usage above ``max``; for a
    leaf, guaranteed usage above ``min``, which only guaranteed jobs reduce)
    until none is left.  ``[]`` when the node is within its limits.  A pure
    query: these are the jobs a reclaim takes first and the
    ``--quota-cut-grace`` preemption stops.
    """
    n = tree._index[node]
    excess: dict[str, int] = {}
    used = tree._used[n]
    for r, cap in (tree._max_d[n] or {}).items():
        if used.get(r, 0) > cap:
            excess[r] = used[r] - cap
    guar_excess: dict[str, int] = {}
    if not tree._children[n]:
        guar = tree._guar[n]
        for r, cap in tree._min_d[n].items():
            if guar.get(r, 0) > cap:
                guar_excess[r] = guar[r] - cap
    if not excess and not guar_excess:
        return []
    recs = sorted(
        (rec for leaf in tree._leaves_under[n] for rec in tree._admitted.leaf_jobs[leaf].values()),
        key=lambda rec: -rec.seq,
    )
    picked: list[str] = []
    for rec in recs:
        if not any(v > 0 for v in excess.values()) and not any(v > 0 for v in guar_excess.values()):
            break
        charged = rec.request if rec.mode is not Mode.OPPORTUNISTIC else _jobs_only(rec.request)
        helps = any(charged.get(r, 0) > 0 and v > 0 for r, v in excess.items())
        if rec.mode is Mode.GUARANTEED:
            helps = helps or any(charged.get(r, 0) > 0 and v > 0 for r, v in guar_excess.items())
        if not helps:
            continue
        picked.append(rec.key)
        for r in excess:
            excess[r] -= charged.get(r, 0)
        if rec.mode is Mode.GUARANTEED:
            for r in guar_excess:
                guar_excess[r] -= charged.get(r, 0)
    return picked


def _jobs_only(request: Resources) -> Resources:
    return Resources({MAX_JOBS: request.get(MAX_JOBS, 0)})
