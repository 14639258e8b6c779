"""What a quota tree has charged: per-node usage, admitted jobs, classification.

Job: answer "may this request be admitted to this queue now, and how is it
charged?" for the scheduling cycle, keep the usage of every node of the tree
as jobs are admitted and released, and prove on demand that the counters still
match the jobs.

Theory of operation:

* Usage lives in plain mutable ``dict[str, int]`` counters per node, in lists
  indexed like the structure's: ``used`` (everything charged), ``guaranteed``
  and ``borrowed``, plus a count of admitted jobs.  An admission adds the
  job's request on every node of its leaf→root path; a release subtracts it.
  Opportunistic jobs (negative priority) are charged ``kube-queue/max-jobs``
  only.  ``used == guaranteed + borrowed`` except for that opportunistic count.
* A job is GUARANTEED when it fits the leaf's ``min`` (on the resources the
  ``min`` names; see :class:`MinFit`), BORROWED otherwise; either way
  ``used + request <= max`` must hold on every node of the path, else
  :meth:`QuotaUsage.classify` returns a :class:`QuotaBlock` saying where.
  Non-preemptible jobs must be guaranteed.
* Every admitted unit has one :class:`~fleet.core.quota_admitted.Admitted`
  record (its shared :class:`~fleet.core.charges.Charge` and its leaf); the
  records and the indexes the victim searches read (by key, by leaf, each
  leaf's reclaimable units and their order, the lending leaves, preemptible
  units by priority) are :class:`~fleet.core.quota_admitted.AdmittedJobs`.
  For a (node, resource) a reclaim search has asked about, the lending
  leaves under the node are kept in the order the search takes them
  (:meth:`QuotaUsage.lending_order`, kept by
  :class:`~fleet.core.quota_lending.LendingOrder`), moved by every admission
  or release of a borrowed job of theirs.  This class owns one of each and
  changes them with every ``admit`` and ``release``; what is here is the
  counting and the questions asked of it (``classify``, the shares, the
  guarantees).
* :meth:`QuotaUsage.set_node` keeps usage even when it is now above a lowered
  ``max``: that excess is *grandfathered* (``_over``).  It is accepted by
  :meth:`QuotaUsage.check_invariants` up to the usage at the time of the
  change, and :meth:`QuotaUsage.classify` never adds to it.
* :meth:`QuotaUsage.check_invariants` recounts every counter and index from
  the admitted records and compares.

This class extends :class:`~fleet.core.quota_structure.QuotaStructure` (see
there why) and is extended by :class:`~fleet.core.quota.QuotaTree`, which adds
construction, copying and the victim searches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fleet.core import wording
from fleet.core.charges import Charge
from fleet.core.checks import InvariantError
from fleet.core.jobs import Mode
from fleet.core.quota_admitted import Admitted, AdmittedJobs
from fleet.core.quota_lending import LendingOrder, LendKey
from fleet.core.quota_rules import fmt
from fleet.core.quota_structure import UNCHANGED, QuotaStructure, _Unchanged
from fleet.core.resources import MAX_JOBS, Resources, format_quantity


class BlockKind(StrEnum):
    """Which limit a :class:`QuotaBlock` is about; the value is its text."""

    #: ``used + request`` would be above a node's ``max``.
    MAX = "max"
    #: A non-preemptible job does not fit its queue's ``min``.
    NON_PREEMPTIBLE_MIN = "non-preemptible-min"
    #: A tree change left a node of the path using more than its ``max``.
    OVER_MAX = "over-max"
    #: A tree change left a node of the path with more guaranteed usage than its ``min``.
    OVER_MIN = "over-min"


#: The members of :class:`BlockKind`, importable by name.
MAX: Final = BlockKind.MAX
NON_PREEMPTIBLE_MIN: Final = BlockKind.NON_PREEMPTIBLE_MIN
OVER_MAX: Final = BlockKind.OVER_MAX
OVER_MIN: Final = BlockKind.OVER_MIN


@dataclass(frozen=True, slots=True)
class QuotaBlock:
    """Why a request does not fit: ``node`` would exceed a limit on ``resource``.

    ``kind`` is :attr:`BlockKind.MAX` (``used + request`` above the node's
    ``max``) or :attr:`BlockKind.NON_PREEMPTIBLE_MIN` (a non-preemptible job
    that does not fit the queue's ``min``; ``used`` is then the guaranteed
    usage).
    """

    node: str
    resource: str
    used: int
    request: int
    limit: int
    kind: BlockKind
    leaf: bool = True

    def __init__(
        self,
        node: str,
        resource: str,
        used: int,
        request: int,
        limit: int,
        kind: BlockKind,
        leaf: bool = True,
    ) -> None:
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "resource", resource)
        object.__setattr__(self, "used", used)
        object.__setattr__(self, "request", request)
        object.__setattr__(self, "limit", limit)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "leaf", leaf)

    @property
    def reason(self) -> str:
        """The block in plain words (:mod:`fleet.core.wording`): what is full, its
        figures with their unit, and what the job asks."""
        r = self.resource
        usage = wording.used_of(r, self.used, self.limit)
        where = "queue " + self.node if self.leaf else "quota group " + self.node
        if self.kind == OVER_MAX:
            return (
                f"{where} is over its max since a quota change: {usage} used; "
                "it admits nothing new until it is back within its limits"
            )
        if self.kind == OVER_MIN:
            return (
                f"{where} is over its min (its guarantee) since a quota change: {usage} "
                "guaranteed in use; it admits nothing new until it is back within its limits"
            )
        need = wording.figure(r, self.request)
        if self.kind == NON_PREEMPTIBLE_MIN:
            return (
                f"the guarantee (min) of queue {self.node} is full: {usage} guaranteed in use; "
                f"this job needs {need} and, not preemptible, runs only within the guarantee"
            )
        if r == MAX_JOBS:
            return f"{where} is full: {usage} admitted, the most it runs at once"
        return f"{where} is full: {usage} used; this job needs {need}"


def min_block(
    queue: str, floor: dict[str, int], guaranteed: dict[str, int], request: Resources
) -> QuotaBlock:
    """Why a non-preemptible ``request`` does not fit ``queue``'s ``min`` (``floor``)
    with ``guaranteed`` in use: the first resource of the ``min`` it would exceed
    (the request's first resource if the queue has no ``min``).  The block
    :meth:`QuotaUsage.classify` returns for such a job."""
    amounts = request.amounts
    over: str | None = None
    for r, cap in floor.items():
        if guaranteed.get(r, 0) + amounts.get(r, 0) > cap:
            over = r
            break
    if over is None:
        over = next(iter(amounts), MAX_JOBS)
    return QuotaBlock(
        node=queue,
        resource=over,
        used=guaranteed.get(over, 0),
        request=amounts.get(over, 0),
        limit=floor.get(over, 0),
        kind=NON_PREEMPTIBLE_MIN,
    )


@dataclass(frozen=True, slots=True)
class MinFit:
    """How a request compares with its leaf queue's ``min``.

    ``fits``: the guaranteed usage plus the request stays within the ``min``
    on every resource the ``min`` names (the job would be guaranteed).
    Otherwise ``over`` names the first resource of the ``min`` the request
    would exceed, or is None when the leaf has no ``min`` at all.
    """

    fits: bool
    over: str | None = None


#: The request fits the leaf's ``min``.
WITHIN_MIN: Final = MinFit(fits=True)
#: The leaf has no ``min``: nothing is guaranteed there.
NO_MIN: Final = MinFit(fits=False)
#: "Over the min on r", one shared value per resource name (a tree names few),
#: so that classifying a borrowed job allocates no result.
_OVER_MIN: dict[str, MinFit] = {}


def add_to(counter: dict[str, int], amounts: dict[str, int], sign: int) -> None:
    """Add (``sign`` 1) or subtract (-1) ``amounts`` in ``counter``."""
    for r, v in amounts.items():
        counter[r] = counter.get(r, 0) + sign * v


def _nonzero(counter: Mapping[str, int]) -> dict[str, int]:
    return {r: v for r, v in counter.items() if v}


class QuotaUsage(QuotaStructure):
    """A quota tree's structure with its usage; see the module docstring."""

    _used: list[dict[str, int]]
    _guar: list[dict[str, int]]
    _borr: list[dict[str, int]]
    _count: list[int]
    _over: list[dict[str, int]]  # usage grandfathered above a max set_node lowered
    _cut: set[int]  # nodes a tree change left over a limit (a superset of those still over)
    #: the admitted units and the indexes over them
    _admitted: AdmittedJobs
    #: the reclaim search's kept orders of lending leaves
    _lend: LendingOrder

    # Construction -------------------------------------------------------------
    def _init_usage(self) -> None:
        """Start with no usage on any node (after the structure is set)."""
        n = len(self._names)
        self._used = [{} for _ in range(n)]
        self._guar = [{} for _ in range(n)]
        self._borr = [{} for _ in range(n)]
        self._count = [0] * n
        self._over = [{} for _ in range(n)]
        self._cut = set()
        self._admitted = AdmittedJobs(n)
        self._lend = LendingOrder(self._admitted)

    def _copy_usage_to(self, other: QuotaUsage) -> None:
        """Give ``other`` a deep copy of this usage (the records themselves are shared)."""
        other._used = [dict(d) for d in self._used]
        other._guar = [dict(d) for d in self._guar]
        other._borr = [dict(d) for d in self._borr]
        other._count = list(self._count)
        other._over = [dict(d) for d in self._over]
        other._cut = set(self._cut)
        other._admitted = self._admitted.copy()
        other._lend = LendingOrder(other._admitted)  # built again when a search asks
        other._lend.figures = None if self._lend.figures is None else dict(self._lend.figures)

    # Usage --------------------------------------------------------------------
    def used(self, name: str) -> Resources:
        """Everything charged at or below the node (all modes)."""
        return Resources(self._used[self._node(name)])

    def used_of(self, name: str, resource: str) -> int:
        """``used(name)[resource]`` without building the vector (hot paths)."""
        return self._used[self._node(name)].get(resource, 0)

    def share_of(self, name: str) -> float | None:
        """The largest ratio, over the resources the node's ``min`` names (its ``max``
        without a ``min``), of its usage to that amount; None with neither (hot path:
        the cycle's fair order asks it after every admission)."""
        n = self._node(name)
        basis = self._min_d[n] or self._max_d[n]
        if not basis:
            return None
        used = self._used[n]
        ratio = 0.0
        for r, amount in basis.items():
            if amount > 0:
                ratio = max(ratio, used.get(r, 0) / amount)
        return ratio

    def guaranteed_of(self, name: str, resource: str) -> int:
        """``guaranteed_used(name)[resource]`` without building the vector (hot paths)."""
        return self._guar[self._node(name)].get(resource, 0)

    def guaranteed_used(self, name: str) -> Resources:
        return Resources(self._guar[self._node(name)])

    def borrowed_used(self, name: str) -> Resources:
        return Resources(self._borr[self._node(name)])

    def guarantee_of(self, queue: str) -> tuple[dict[str, int], dict[str, int]]:
        """The leaf's ``min`` and its guaranteed usage, as the tree holds them (to
        be read now and not changed: the usage moves on; a caller that keeps it
        keeps a copy)."""
        leaf = self._leaf(queue)
        return self._min_d[leaf], self._guar[leaf]

    def admitted_count(self, name: str) -> int:
        """How many admitted jobs (any mode) are charged at or below the node."""
        return self._count[self._node(name)]

    def holds(self, key: str) -> bool:
        return key in self._admitted.jobs

    def mode_of(self, key: str) -> Mode:
        return self._admitted.jobs[key].mode

    def jobs_of(self, queue: str) -> list[str]:
        """Keys of the jobs admitted to a leaf queue, in admission order."""
        return list(self._admitted.leaf_jobs[self._leaf(queue)])

    def lowest_preemptible_priority(self, queue: str) -> int | None:
        """The lowest priority among the queue's preemptible, charged jobs (None if none).

        A job of this queue can preempt inside its queue only above it.  Read
        from the leaf's count of such jobs per priority (a few priorities, not
        every job).
        """
        return self._admitted.lowest[self._leaf(queue)]

    def lower_usage(self, queue: str, priority: int, resource: str) -> int:
        """How much of ``resource`` the queue's preemptible, charged jobs below
        ``priority`` hold: the most that preempting inside the queue could free
        for a job of that priority (:func:`~fleet.core.quota_victims.queue_victims`
        takes its victims among them)."""
        leaf = self._leaf(queue)
        lowest = self._admitted.lowest[leaf]
        if lowest is None or lowest >= priority:
            return 0
        total = 0
        for rec in self._admitted.leaf_jobs[leaf].values():
            if rec.preemptible and 0 <= rec.priority < priority:
                total += rec.request.amounts.get(resource, 0)
        return total

    # Admission ----------------------------------------------------------------
    def _fits_min(self, leaf: int, request: Resources) -> MinFit:
        """Whether ``request`` fits the leaf's min, else the first resource over it."""
        mn = self._min_d[leaf]
        if not mn:
            return NO_MIN
        guar = self._guar[leaf]
        amounts = request.amounts
        for r, cap in mn.items():
            if guar.get(r, 0) + amounts.get(r, 0) > cap:
                over = _OVER_MIN.get(r)
                if over is None:
                    over = _OVER_MIN[r] = MinFit(fits=False, over=r)
                return over
        return WITHIN_MIN

    def _max_block(self, leaf: int, request: Resources) -> QuotaBlock | None:
        amounts = request.amounts
        for n, caps, mx in self._maxes_along(leaf):
            used = self._used[n]
            # A max names few resources: those are looked at, and where some are
            # exceeded the block names the first in the request's order.
            over: list[str] | None = None
            for r, cap in caps:
                amount = amounts.get(r, 0)
                if amount > 0 and used.get(r, 0) + amount > cap:
                    if over is None:
                        over = []
                    over.append(r)
            if over is not None:
                for r, amount in amounts.items():
                    if r in over:
                        return QuotaBlock(
                            node=self._names[n],
                            resource=r,
                            used=used.get(r, 0),
                            request=amount,
                            limit=mx[r],
                            kind=MAX,
                            leaf=not self._children[n],
                        )
        return None

    def _cut_over(self, leaf: int) -> QuotaBlock | None:
        """The first node on ``leaf``'s path that a tree change left over a limit
        and that is still over it (what :meth:`classify` answers first), if any."""
        for n in self._paths[leaf]:
            if n in self._cut:
                over = self.over_limit(n)
                if over is not None:
                    return over
        return None

    def stops_rigid(self, queue: str, request: Resources) -> bool:
        """Whether :meth:`classify` says a non-preemptible, non-opportunistic
        ``request`` does not fit the queue's ``min`` (a ``NON_PREEMPTIBLE_MIN``
        block), without building the block."""
        leaf = self._leaf(queue)
        if self._cut and self._cut_over(leaf) is not None:
            return False
        return not self._fits_min(leaf, request).fits

    def stops_every_rigid(self, queue: str, least: dict[str, int]) -> bool:
        """Whether :meth:`stops_rigid` says so for every request that asks at least
        ``least`` of each resource (missing: 0): the guaranteed usage plus the
        least of some resource is over the queue's ``min`` already.  False says
        nothing (some request may still be stopped on another resource)."""
        leaf = self._leaf(queue)
        if self._cut and self._cut_over(leaf) is not None:
            return False
        mn = self._min_d[leaf]
        if not mn:
            return not NO_MIN.fits
        guar = self._guar[leaf]
        # A loop, not any() over a generator: the compiled core would build one per call.
        for r, cap in mn.items():  # noqa: SIM110
            if guar.get(r, 0) + least.get(r, 0) > cap:
                return True
        return False

    def classify(
        self, queue: str, request: Resources, *, priority: int, preemptible: bool
    ) -> Mode | QuotaBlock:
        """How ``request`` would be admitted to ``queue`` now, or why it cannot be."""
        leaf = self._leaf(queue)
        if priority < 0:
            need = request.get(MAX_JOBS, 0)
            if need > 0:
                block = self._max_block(leaf, Resources({MAX_JOBS: need}))
                if block is not None:
                    return block
            return Mode.OPPORTUNISTIC
        if self._cut:
            over = self._cut_over(leaf)
            if over is not None:
                return over
        fit = self._fits_min(leaf, request)
        if fit.fits:
            mode = Mode.GUARANTEED
        elif preemptible:
            mode = Mode.BORROWED
        else:
            return min_block(self._names[leaf], self._min_d[leaf], self._guar[leaf], request)
        block = self._max_block(leaf, request)
        return mode if block is None else block

    def admit(self, charge: Charge) -> None:
        """Charge an admitted unit to its queue; the caller has classified it first."""
        key = charge.key
        if key in self._admitted.jobs:
            raise ValueError(f"job {key!r} is already admitted")
        leaf = self._leaf(charge.queue)
        rec = Admitted(charge, leaf)
        self._charge(rec, 1)
        self._admitted.add(rec)
        if rec.mode is Mode.BORROWED:
            self._lend.mark(leaf)

    def release(self, key: str) -> Charge:
        """Uncharge an admitted unit and return its charge; KeyError if not admitted."""
        rec = self._admitted.remove(key)
        self._charge(rec, -1)
        if rec.mode is Mode.BORROWED:
            self._lend.mark(rec.leaf)
        return rec.charge

    def lending_order(self, node: int, resource: str) -> list[tuple[LendKey, int]]:
        """The leaves under ``node`` with reclaimable jobs, in the order a reclaim
        search blocked on ``resource`` takes them
        (:meth:`~fleet.core.quota_lending.LendingOrder.order`): built when first
        asked for a (node, resource), then kept as borrowed jobs come and go.  Not
        to be changed by the caller."""
        return self._lend.order(node, resource, self._paths, self._borr, self._names)

    def set_fair_keys(self, keys: dict[str, float] | None) -> None:
        """The leaves' fairness keys (:mod:`fleet.core.fair_share`), by which the reclaim
        search takes lending leaves when some leaf has fair share's memory; None: by
        what they borrow."""
        self._lend.set_figures(
            None if keys is None else {self._index[n]: k for n, k in keys.items()}
        )

    def fair_key_moved(self, queue: str, key: float) -> None:
        """One leaf's fairness key moved (an entry penalty): its place in the kept
        reclaim orders moves with it."""
        figures = self._lend.figures
        if figures is not None:
            leaf = self._index[queue]
            figures[leaf] = key
            self._lend.mark(leaf)

    def lend_figure(self, leaf: int, resource: str, gone: int) -> float:
        """A lending leaf's place in a reclaim search (larger goes first): what it
        borrows of ``resource`` less ``gone``, or its fairness key with memory on."""
        figures = self._lend.figures
        if figures is None:
            return self._borr[leaf].get(resource, 0) - gone
        return figures.get(leaf, 0.0)

    def _charge(self, rec: Admitted, sign: int) -> None:
        path = self._paths[rec.leaf]
        if rec.mode is Mode.OPPORTUNISTIC:
            jobs = rec.request.get(MAX_JOBS, 0) * sign
            for n in path:
                used = self._used[n]
                used[MAX_JOBS] = used.get(MAX_JOBS, 0) + jobs
                self._count[n] += sign
            return
        amounts = rec.request.amounts
        split = self._guar if rec.mode is Mode.GUARANTEED else self._borr
        for n in path:  # add_to on both counters, in one loop
            used = self._used[n]
            part = split[n]
            for r, v in amounts.items():
                delta = v if sign > 0 else -v
                used[r] = used.get(r, 0) + delta
                part[r] = part.get(r, 0) + delta
            self._count[n] += sign

    # Quota changes ------------------------------------------------------------
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
        super().set_node(name, min=min, max=max, namespaces=namespaces)
        if not isinstance(max, _Unchanged):
            i = self._index[name]
            used = self._used[i]
            self._over[i] = {r: used[r] for r, cap in (max or {}).items() if used.get(r, 0) > cap}
        self._cut |= {i for i in range(len(self._names)) if self.over_limit(i) is not None}

    def grandfather(self) -> None:
        """Accept the current usage above every ``max`` (after a tree change).

        The nodes left over a limit (usage above ``max``, or guaranteed usage
        above ``min``) are remembered: until they are back within their
        limits, :meth:`classify` admits nothing new under them.
        """
        for i, mx in enumerate(self._max_d):
            used = self._used[i]
            self._over[i] = {r: used[r] for r, cap in (mx or {}).items() if used.get(r, 0) > cap}
        self._cut = {i for i in range(len(self._names)) if self.over_limit(i) is not None}

    def over_limit(self, n: int) -> QuotaBlock | None:
        """The first limit node ``n`` is over now: usage above its max, or (a leaf)
        guaranteed usage above its min."""
        used = self._used[n]
        for r, cap in (self._max_d[n] or {}).items():
            if used.get(r, 0) > cap:
                return QuotaBlock(
                    self._names[n], r, used[r], 0, cap, OVER_MAX, leaf=not self._children[n]
                )
        if self._children[n]:
            return None  # a guarantee is decided by the leaf's min only
        guar = self._guar[n]
        for r, cap in self._min_d[n].items():
            if guar.get(r, 0) > cap:
                return QuotaBlock(
                    self._names[n], r, guar[r], 0, cap, OVER_MIN, leaf=not self._children[n]
                )
        return None

    def over_limits(self) -> list[QuotaBlock]:
        """Every node over a limit since a tree change, in tree order."""
        found = (self.over_limit(n) for n in sorted(self._cut))
        return [block for block in found if block is not None]

    # Invariants ---------------------------------------------------------------
    def check_invariants(self) -> None:
        """Recount usage from the admitted jobs and compare; usage never above max.

        Usage above a max that ``set_node`` lowered is accepted up to the usage
        at the time of that change.  Then the structure's own checks run.
        Raises :class:`InvariantError` on any mismatch, naming the node or job
        and the kept and recounted values.
        """
        n = len(self._names)
        used: list[dict[str, int]] = [{} for _ in range(n)]
        guar: list[dict[str, int]] = [{} for _ in range(n)]
        borr: list[dict[str, int]] = [{} for _ in range(n)]
        count = [0] * n
        self._admitted.check_invariants(self._names)
        self._lend.check_invariants(self._paths, self._borr, self._names)
        for rec in self._admitted.jobs.values():
            for m in self._paths[rec.leaf]:
                count[m] += 1
                if rec.mode is Mode.OPPORTUNISTIC:
                    add_to(used[m], {MAX_JOBS: rec.request.get(MAX_JOBS, 0)}, 1)
                    continue
                add_to(used[m], rec.request.amounts, 1)
                add_to((guar if rec.mode is Mode.GUARANTEED else borr)[m], rec.request.amounts, 1)
        for m in range(n):
            for what, kept, recount in (
                ("used", self._used[m], used[m]),
                ("guaranteed", self._guar[m], guar[m]),
                ("borrowed", self._borr[m], borr[m]),
            ):
                if _nonzero(kept) != _nonzero(recount):
                    raise InvariantError(
                        f"{self._names[m]}: {what} drifted: kept {_nonzero(kept)}, "
                        f"recount {_nonzero(recount)}"
                    )
            if self._count[m] != count[m]:
                raise InvariantError(
                    f"{self._names[m]}: admitted count drifted: kept {self._count[m]}, "
                    f"recount {count[m]}"
                )
            mx = self._max_d[m]
            if mx is None:
                continue
            for r, cap in mx.items():
                allowed = max(cap, self._over[m].get(r, cap))
                if used[m].get(r, 0) > allowed:
                    raise InvariantError(
                        f"{self._names[m]}: {fmt(r, used[m].get(r, 0))} used is above max "
                        f"{format_quantity(r, allowed)}"
                    )
        for m in range(n):
            if m not in self._cut and self.over_limit(m) is not None:
                raise InvariantError(f"{self._names[m]} is over a limit but not marked as cut")
        super().check_invariants()
