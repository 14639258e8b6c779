"""The quota tree's admitted units: one record each, and the indexes over them.

Theory of operation: every unit charged to the tree has one :class:`Admitted`
record (its shared :class:`~fleet.core.charges.Charge`, unpacked for the hot
loops, and its leaf).  :class:`AdmittedJobs` keeps them by key and by leaf,
and the indexes the victim searches (:mod:`fleet.core.quota_victims`) read
instead of every record:

* per leaf, its *reclaimable* units (borrowed, preemptible, not
  opportunistic: what a reclaim may take), and those sorted cheapest first
  (``borrowed_order``, :func:`cheapest_first`), built by the search when it
  first needs it and marked stale (None) by an admission or release on the
  leaf;
* the leaves that have reclaimable units (``lending``);
* per leaf, its preemptible charged units counted by priority (``ranks``)
  and the lowest of those priorities (``lowest``), which bound a search among
  a queue's own lower priorities.

What the units use is counted by :class:`~fleet.core.quota_usage.QuotaUsage`,
which owns one of these and changes it with every ``admit`` and ``release``.
"""

from __future__ import annotations

from fleet.core.charges import Charge, step_of
from fleet.core.checks import InvariantError
from fleet.core.jobs import Mode


class Admitted:
    """An admitted unit's charge record (shared with the state and the placer) and its leaf."""

    __slots__ = (
        "charge",
        "key",
        "leaf",
        "mode",
        "preemptible",
        "priority",
        "request",
        "seq",
        "step",
    )

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
        self.step = step_of(charge.key)


def reclaimable(rec: Admitted) -> bool:
    """Whether a reclaim may ever take this job: borrowed, preemptible, not opportunistic."""
    return rec.mode is Mode.BORROWED and rec.preemptible and rec.priority >= 0


def cheapest_first(rec: Admitted) -> tuple[int, int, int]:
    """Sort key of a leaf's preemptible units: lowest priority, then newest job,
    then of one job its last growth step first (the first unit, which stops the
    whole job, last).  No two units compare equal, so the order never rests on
    the order the records were charged in (a planning query's "what if"
    release charges them again, at the end)."""
    return (rec.priority, -rec.seq, -rec.step)


class AdmittedJobs:
    """The admitted units of a tree of ``leaves`` nodes, by key and by leaf, with
    the indexes over them; see the module docstring.  (Every argument has a
    default: a compiled class is unpickled by calling it without any, as the
    quota tree sent to the API's worker processes is.)"""

    def __init__(self, leaves: int = 0) -> None:
        self.jobs: dict[str, Admitted] = {}
        self.leaf_jobs: list[dict[str, Admitted]] = [{} for _ in range(leaves)]
        #: per leaf, its reclaimable units (borrowed, preemptible)
        self.leaf_borrowed: list[dict[str, Admitted]] = [{} for _ in range(leaves)]
        #: the same, cheapest first; None = stale
        self.borrowed_order: list[list[Admitted] | None] = [None] * leaves
        #: the leaves with reclaimable units (order: none; sort to use)
        self.lending: dict[int, None] = {}
        #: per leaf: priority -> its preemptible, charged units
        self.ranks: list[dict[int, int]] = [{} for _ in range(leaves)]
        #: per leaf: the lowest priority of ``ranks`` (None: empty)
        self.lowest: list[int | None] = [None] * leaves

    def copy(self) -> AdmittedJobs:
        """An independent copy of the indexes (the records themselves are shared); the
        sorted orders are left to be built again."""
        other = AdmittedJobs(0)
        other.jobs = dict(self.jobs)
        other.leaf_jobs = [dict(d) for d in self.leaf_jobs]
        other.leaf_borrowed = [dict(d) for d in self.leaf_borrowed]
        other.borrowed_order = [None] * len(self.leaf_borrowed)
        other.lending = dict(self.lending)
        other.ranks = [dict(d) for d in self.ranks]
        other.lowest = list(self.lowest)
        return other

    def add(self, rec: Admitted) -> None:
        """Index a unit just charged (its key is not admitted yet)."""
        key = rec.key
        leaf = rec.leaf
        self.jobs[key] = rec
        self.leaf_jobs[leaf][key] = rec
        if rec.preemptible and rec.priority >= 0:
            ranks = self.ranks[leaf]
            ranks[rec.priority] = ranks.get(rec.priority, 0) + 1
            lowest = self.lowest[leaf]
            if lowest is None or rec.priority < lowest:
                self.lowest[leaf] = rec.priority
        if reclaimable(rec):
            self.leaf_borrowed[leaf][key] = rec
            self.borrowed_order[leaf] = None
            self.lending[leaf] = None

    def remove(self, key: str) -> Admitted:
        """Drop unit ``key`` from every index and return its record; KeyError if not admitted."""
        rec = self.jobs.pop(key)
        del self.leaf_jobs[rec.leaf][key]
        if rec.preemptible and rec.priority >= 0:
            ranks = self.ranks[rec.leaf]
            left = ranks[rec.priority] - 1
            if left:
                ranks[rec.priority] = left
            else:
                del ranks[rec.priority]
                if rec.priority == self.lowest[rec.leaf]:
                    self.lowest[rec.leaf] = min(ranks) if ranks else None
        lent = self.leaf_borrowed[rec.leaf]
        if lent.pop(key, None) is not None:
            self.borrowed_order[rec.leaf] = None
            if not lent:
                del self.lending[rec.leaf]
        return rec

    def head(self, leaf: int) -> Admitted:
        """The leaf's cheapest reclaimable unit (it has one)."""
        ordered = self.borrowed_order[leaf]
        if ordered is not None:
            return ordered[0]
        return min(self.leaf_borrowed[leaf].values(), key=cheapest_first)

    def check_invariants(self, names: list[str]) -> None:
        """Recount every index from the records and compare; ``names`` by node number."""
        for key, rec in self.jobs.items():
            if self.leaf_jobs[rec.leaf].get(key) is not rec:
                raise InvariantError(
                    f"job {key} is missing from the job index of {names[rec.leaf]}"
                )
        if sum(len(j) for j in self.leaf_jobs) != len(self.jobs):
            stale = sorted(k for jobs in self.leaf_jobs for k in jobs if k not in self.jobs)
            raise InvariantError(f"stale job index: {stale} indexed by leaf but not admitted")
        for leaf_index, recs in enumerate(self.leaf_borrowed):
            expected = {k for k, r in self.leaf_jobs[leaf_index].items() if reclaimable(r)}
            if set(recs) != expected:
                raise InvariantError(
                    f"{names[leaf_index]}: stale reclaimable-job index: "
                    f"kept {sorted(recs)}, recount {sorted(expected)}"
                )
            ordered = self.borrowed_order[leaf_index]
            if ordered is not None:
                kept_order = [r.key for r in ordered]
                order = [r.key for r in sorted(recs.values(), key=cheapest_first)]
                if kept_order != order:
                    raise InvariantError(
                        f"{names[leaf_index]}: stale reclaim order: "
                        f"kept {kept_order}, recount {order}"
                    )
        for leaf_index, recs in enumerate(self.leaf_jobs):
            ranks: dict[int, int] = {}
            for rec in recs.values():
                if rec.preemptible and rec.priority >= 0:
                    ranks[rec.priority] = ranks.get(rec.priority, 0) + 1
            if ranks != self.ranks[leaf_index]:
                raise InvariantError(
                    f"{names[leaf_index]}: stale count of preemptible jobs by "
                    f"priority: kept {self.ranks[leaf_index]}, recount {ranks}"
                )
            lowest = min(ranks) if ranks else None
            if lowest != self.lowest[leaf_index]:
                raise InvariantError(
                    f"{names[leaf_index]}: stale lowest preemptible priority: "
                    f"kept {self.lowest[leaf_index]}, recount {lowest}"
                )
        lending = [i for i, recs in enumerate(self.leaf_borrowed) if recs]
        if sorted(self.lending) != lending:
            raise InvariantError(
                f"stale index of leaves with reclaimable jobs: kept "
                f"{sorted(names[i] for i in self.lending)}, "
                f"recount {sorted(names[i] for i in lending)}"
            )
