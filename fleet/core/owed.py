"""Room that guaranteed work still queued in the borrowing pass is owed.

Job: answer, during the cycle's borrowing pass, "may this job borrow now, or
would the room it takes be claimed back in this very pass by a job that
fits within its queue's ``min``?"  (ADR 0030.)

Theory of operation:

* The borrowing pass serves every queue from its first job that had to
  borrow on, in the queue's own order, so it holds jobs of two kinds: jobs
  that must borrow and jobs behind them that fit within their queue's
  ``min`` (guaranteed).  A guaranteed job that finds a ``max`` full reclaims
  borrowed work of other queues, and work borrowed earlier in the same pass
  is the newest there: it is started, then withdrawn ("displaced").  Kueue
  admits a cycle's entries that fit without borrowing before the entries that
  borrow; Fleet keeps each queue's order and instead keeps, for the jobs
  still ahead in the pass, the room their guarantee needs.
* A queue's *owed demand* is what its jobs still ahead in the pass (from its
  cursor to the end of its span) would take within its ``min``, counted in
  the resources some ``max`` names (a question reads only those), in order: a
  job counts with its start size if that fits what is left of the ``min``,
  else with its gang minimum if that fits, else not at all (it would
  borrow).  A StrictFIFO queue counts only up to its first job that would
  borrow (what is behind may never be served).  Opportunistic jobs are not
  in the pass.
* A job that would borrow starts only if, on every node above its queue that
  has a ``max`` and where *other* queues under it are owed some room, the
  room left after it still holds their owed demand and its own queue's.  Its
  own queue's later jobs cannot reclaim it, but its guaranteed ones are never
  kept out: they would take that room first, and the other queues' jobs,
  finding the ``max`` full, would then reclaim the job just started.  Where
  no other queue is owed anything its own order puts it first.  Otherwise it
  waits, saying so.
* Demand is kept per queue and summed per node.  A queue is marked when its
  cursor moves or its usage changes, and its last count moves from the
  node's sum to the node's *stale* sum.  A question first reads the sums
  without the stale part (a count is never negative, so a "no" from them is
  final); only while they say yes is a marked queue counted again, one at a
  time in the order they were marked, and the question asked again.  A
  marked queue is counted cheaply when its guaranteed usage grew by exactly
  the counted jobs it passed (they started as counted): those are dropped;
  otherwise (one did not start, a release) its jobs ahead are counted
  afresh, stopping once less is left of the ``min`` than any of its jobs
  asks.
* The answer depends only on the queues' positions and the tree's usage, not
  on which of the cycle's shortcuts are on, so the parked cycle and the full
  scan stay equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from fleet.core.jobs import Job
from fleet.core.quota import QuotaTree
from fleet.core.resources import Resources
from fleet.core.state import QueueState
from fleet.core.waiting import Kept

#: Positions ``[start, end)`` of a queue's pending list that a pass goes through.
Span = tuple[int, int]

#: An empty count, read (never written) where a node has none.
_EMPTY: Final[dict[str, int]] = {}


@dataclass(slots=True)
class _Demand:
    """One queue's owed demand, counted from position ``at`` with ``base`` guaranteed."""

    at: int
    base: dict[str, int]
    picks: list[tuple[int, Resources]] = field(default_factory=list)
    total: dict[str, int] = field(default_factory=dict)

    def __init__(
        self,
        at: int,
        base: dict[str, int],
        picks: list[tuple[int, Resources]] | None = None,
        total: dict[str, int] | None = None,
    ) -> None:
        self.at = at
        self.base = base
        self.picks = [] if picks is None else picks
        self.total = {} if total is None else total


class Owed:
    """The owed demand of the queues of one borrowing pass; see the module docstring."""

    __slots__ = (
        "_capped",
        "_demand",
        "_dirty",
        "_ends",
        "_head",
        "_incremental",
        "_limits",
        "_marks",
        "_others_owed",
        "_paths",
        "_queues",
        "_serial",
        "_serials",
        "_stale",
        "_sums",
        "_texts",
        "_tree",
        "cursors",
    )

    def __init__(
        self,
        tree: QuotaTree,
        queues: Mapping[str, QueueState],
        work: dict[str, Span],
        *,
        incremental: bool = True,
    ):
        self._tree = tree
        #: off: every question counts every queue afresh (the reference the kept
        #: counts are checked against, ``Shortcuts.owed_counts``)
        self._incremental = incremental
        self._queues = queues
        #: queue -> its next position in the pass (moved by the pass as it serves)
        self.cursors = {name: span[0] for name, span in work.items()}
        self._ends = {name: span[1] for name, span in work.items()}
        self._demand: dict[str, _Demand] = {}
        #: the marked queues (counted at their next question): queue -> the number
        #: of its mark; the marks in the order they were made, with their numbers,
        #: from ``_head`` on (a queue counted since, or marked again, leaves a
        #: spent mark behind: skipped when read)
        self._dirty: dict[str, int] = {}
        self._marks: list[str] = []
        self._serials: list[int] = []
        self._head = 0
        self._serial = 0
        for name in work:  # every queue is counted at its first question
            self._mark_as_dirty(name)
        #: node -> the owed demand under it, as last counted
        self._sums: dict[str, dict[str, int]] = {}
        #: node -> the part of ``_sums`` counted for queues marked since (out of date)
        self._stale: dict[str, dict[str, int]] = {}
        self._paths: dict[str, list[str]] = {}
        self._limits: dict[str, list[tuple[str, Resources]]] = {}
        #: the resources some ``max`` names: a question reads a queue's demand only
        #: in those named above it, so only these are counted
        self._capped = tree.limited_resources()
        #: whether the last question found other queues owed room (:meth:`_over`)
        self._others_owed = False
        #: Kept's fields -> its reason (a tuple hashes faster than the dataclass)
        self._texts: dict[tuple[str, str, int, int, int, bool], str] = {}

    def moved(self, queue: str, cursor: int) -> None:
        """The pass moved on in ``queue``: its next job is at ``cursor``.

        A count that passed none of the jobs it counted stays right as it is
        (the jobs passed took nothing of the ``min``): only its start moves.
        """
        if queue not in self.cursors:
            return
        self.cursors[queue] = cursor
        known = self._demand.get(queue)
        if (
            self._incremental
            and known is not None
            and queue not in self._dirty
            and (not known.picks or known.picks[0][0] >= cursor)
        ):
            known.at = cursor
            return
        self._mark(queue)

    def finished(self, queue: str) -> None:
        """The pass will serve nothing more of ``queue`` (a StrictFIFO queue stopped)."""
        if queue in self.cursors:
            self.moved(queue, self._ends[queue])

    def touched(self, queue: str) -> None:
        """The usage of ``queue`` changed (an admission or a release)."""
        if queue in self.cursors:
            self._mark(queue)

    def _mark(self, queue: str) -> None:
        """``queue``'s count is out of date: it moves from the node sums to the stale sums."""
        if queue in self._dirty:
            return
        self._mark_as_dirty(queue)
        known = self._demand.get(queue)
        if known is not None and known.total:
            self._add(self._stale, queue, known.total, 1)

    def kept(self, job: Job, request: Resources) -> Kept | None:
        """Why ``request`` of ``job``, which would borrow, may not start now (None: it may).

        Every node above the job's queue with a ``max`` where other queues are
        owed room must still hold, after it, their owed demand and its own
        queue's (the module docstring).  The queues marked since their last
        count are counted again one at a time, in the order they were marked,
        only while the counts already up to date do not say no (a count is
        never negative, so they can only add to a no); its own queue last, and
        only if other queues are owed room where it would borrow.  The answer
        is read again only after a count that owes something (or its own): a
        queue that owes nothing changes no sum it reads (:meth:`_refresh`).
        """
        if not self._incremental:
            for queue in self.cursors:
                self._mark(queue)
            while (oldest := self._first_marked("", None)) is not None:
                self._refresh(oldest)
            return self._over(job, request)
        found = self._over(job, request)
        while found is None:
            stale = self._first_marked(job.queue, None)
            if stale is None:
                if job.queue not in self._dirty or not self._others_owed:
                    return None
                stale = job.queue  # its own count matters where others are owed room
            if self._refresh(stale) or stale == job.queue:
                found = self._over(job, request)
        return found

    def _over(
        self, job: Job, request: Resources, freed: dict[str, int] = _EMPTY, own: bool = True
    ) -> Kept | None:
        """The first node and resource where other queues whose counts are up to date
        are owed room and ``request`` does not fit with that and its own queue's demand,
        counted as nothing while out of date (None: it fits).  Notes whether other
        queues are owed room anywhere it looked (``_others_owed``).

        ``freed``: amounts taken off the usage of every node above the queue;
        ``own`` False: its own queue's demand counts as none (:meth:`kept_beyond`).
        """
        tree = self._tree
        known = self._demand.get(job.queue)
        mine = known.total if known is not None and job.queue not in self._dirty else _EMPTY
        self._others_owed = False
        for node, limit in self._limited(job.queue):
            sums = self._sums.get(node)
            if not sums:
                continue
            stale = self._stale.get(node, _EMPTY)
            caps = limit.amounts
            amounts = request.amounts
            # The max names few resources: those are looked at, and where some are
            # kept out the answer names the first in the request's order.
            found: dict[str, int] | None = None  # resource kept out -> the usage
            for r, cap in caps.items():
                amount = amounts.get(r, 0)
                if amount <= 0:
                    continue
                ours = mine.get(r, 0)
                others = sums.get(r, 0) - stale.get(r, 0) - ours
                if others <= 0:
                    continue
                self._others_owed = True
                used = tree.used_of(node, r) - freed.get(r, 0)
                if used + amount + others + (ours if own else 0) > cap:
                    if found is None:
                        found = {}
                    found[r] = used
            if found is not None:
                for r, amount in amounts.items():
                    if r in found:
                        return Kept(node, r, found[r], amount, caps[r], tree.is_leaf(node))
        return None

    def kept_beyond(self, job: Job, request: Resources, freed: dict[str, int]) -> bool:
        """Whether ``request`` of ``job``, which would borrow, is kept out at some node
        even with ``freed`` (resource -> amount) taken off the usage of every node
        above its queue.  Its own queue's demand counts as none; the other queues
        marked since their last count are counted again, in the order they were
        marked, only while the counts do not already say yes (a yes is final)."""
        if self._over(job, request, freed, own=False) is not None:
            return True
        while True:
            stale = self._first_marked(job.queue, None)
            if stale is None:
                return False
            if self._refresh(stale) and self._over(job, request, freed, own=False) is not None:
                return True

    def room_for(self, queue: str, node: str, resource: str, below: int) -> tuple[int, bool]:
        """At most how much of ``resource`` a job of ``queue`` that would borrow may
        take under ``node``'s ``max`` now, and whether that is exact: the room
        left there, less what the other queues under ``node`` are owed and, when
        they are owed some, its own queue's demand too.

        A job that asks more waits: the ``max`` says no, or :meth:`kept` does
        (at every such node).  The queues under ``node`` marked since their
        last count are counted again in the order they were marked, its own
        last, only while the answer is at least ``below`` (each count can only
        lower it): an answer under ``below`` may be above the exact one, which
        is all the caller asks then.  The counting depends only on the
        questions asked, which the parked cycle and the full scan ask alike.
        """
        tree = self._tree
        limit = tree.max_of(node)
        if limit is None or resource not in limit:
            raise ValueError(f"node {node!r} has no max of {resource}")
        room = limit.amounts.get(resource, 0) - tree.used_of(node, resource)
        if all(above != node for above, _ in self._limited(queue)):
            return room, True  # its own leaf: no other queue is owed room under it
        usable = self._usable(queue, node, resource, room)
        while True:
            if usable < below:
                return usable, False
            marked = self._first_marked(queue, node)
            if marked is None and queue in self._dirty:
                marked = queue
            if marked is None:
                return usable, True
            if self._refresh(marked) or marked == queue:
                usable = self._usable(queue, node, resource, room)

    def _mark_as_dirty(self, queue: str) -> None:
        self._serial += 1
        self._dirty[queue] = self._serial
        self._marks.append(queue)
        self._serials.append(self._serial)

    def _first_marked(self, queue: str, node: str | None) -> str | None:
        """The queue marked first, other than ``queue`` (under ``node`` if given).

        The marks are read from the oldest; the spent ones in front (also those
        right behind ``queue``'s own mark in front) are passed for good, and
        dropped once they are half the list, so the usual question, the oldest
        mark, costs a few lookups however many queues were counted before it
        (a dict would walk past every key it deleted since it last grew).
        """
        dirty = self._dirty
        marks = self._marks
        serials = self._serials
        i = self._head
        n = len(marks)
        while i < n and dirty.get(marks[i], 0) != serials[i]:
            i += 1
        if i < n and marks[i] == queue:
            # Its own mark in front: carried over the spent marks behind it, which
            # are then passed for good too (its mark stays before every other).
            j = i + 1
            while j < n and dirty.get(marks[j], 0) != serials[j]:
                j += 1
            if j - 1 > i:
                marks[j - 1] = queue
                serials[j - 1] = serials[i]
                i = j - 1
        if i > 64 and 2 * i > n:
            del marks[:i]
            del serials[:i]
            i = 0
            n = len(marks)
        self._head = i
        while i < n:
            marked = marks[i]
            if (
                marked != queue
                and dirty.get(marked, 0) == serials[i]
                and (node is None or node in self._above(marked))
            ):
                return marked
            i += 1
        return None

    def _usable(self, queue: str, node: str, resource: str, room: int) -> int:
        """:meth:`room_for` from the counts as they are (a queue marked since its
        last count counts as owed nothing)."""
        sums = self._sums.get(node)
        if not sums:
            return room
        own = self._demand.get(queue)
        mine = own.total.get(resource, 0) if own is not None and queue not in self._dirty else 0
        others = sums.get(resource, 0) - self._stale.get(node, _EMPTY).get(resource, 0) - mine
        return room - others - mine if others > 0 else room

    def text(self, kept: Kept) -> str:
        """``kept.reason``, worded once per distinct answer in the pass."""
        key = (kept.node, kept.resource, kept.used, kept.request, kept.limit, kept.leaf)
        known = self._texts.get(key)
        if known is None:
            known = self._texts[key] = kept.reason
        return known

    def _limited(self, queue: str) -> list[tuple[str, Resources]]:
        """The nodes above ``queue`` that have a ``max``, with it, from the parent up."""
        found = self._limits.get(queue)
        if found is None:
            found = self._limits[queue] = [
                (node, limit)
                for node in self._above(queue)
                if (limit := self._tree.max_of(node)) is not None
            ]
        return found

    def _add(
        self, sums: dict[str, dict[str, int]], queue: str, total: dict[str, int], sign: int
    ) -> None:
        """Add ``total`` (``sign`` 1) or take it away (-1) on every node above ``queue``."""
        for node in self._above(queue):
            counts = sums.get(node)
            if counts is None:
                counts = sums[node] = {}
            if sign > 0:
                for r, amount in total.items():
                    counts[r] = counts.get(r, 0) + amount
            else:
                for r, amount in total.items():
                    counts[r] = counts.get(r, 0) - amount

    def _above(self, queue: str) -> list[str]:
        """The nodes above ``queue``, from its parent up."""
        above = self._paths.get(queue)
        if above is None:
            above = self._paths[queue] = self._tree.path_to_root(queue)[1:]
        return above

    def _refresh(self, queue: str) -> bool:
        """Bring the marked ``queue``'s demand up to date; whether it owes any now.

        Counted again, the queue's demand adds what it owes now to the sums read
        as up to date on every node above it (its last count, taken out of them
        when it was marked, leaves the stale part): a queue that owes nothing
        changes no answer read from them.
        """
        del self._dirty[queue]
        old = self._demand.get(queue)
        new = self._update(queue, old if self._incremental else None)
        was = old.total if old is not None else _EMPTY
        if new is old:
            if was:
                self._add(self._stale, queue, was, -1)
            return bool(was)
        self._demand[queue] = new
        if was or new.total:
            self._move(queue, was, new.total)
        return bool(new.total)

    def _move(self, queue: str, was: dict[str, int], now: dict[str, int]) -> None:
        """On every node above ``queue``: its count ``was`` leaves the stale sums
        (where its mark put it) and the sums, and ``now`` joins the sums."""
        stale = self._stale
        sums = self._sums
        for node in self._above(queue):
            counts = sums.get(node)
            if counts is None:
                counts = sums[node] = {}
            if was:
                marked = stale.get(node)
                if marked is None:
                    marked = stale[node] = {}
                for r, amount in was.items():
                    marked[r] = marked.get(r, 0) - amount
                    counts[r] = counts.get(r, 0) - amount
            for r, amount in now.items():
                counts[r] = counts.get(r, 0) + amount

    def _update(self, queue: str, old: _Demand | None) -> _Demand:
        """The queue's demand from its cursor: ``old`` with the jobs passed dropped when
        they started as counted, else counted afresh."""
        at = self.cursors[queue]
        end = self._ends[queue]
        floor = self._tree.min_of(queue)
        if at >= end or not floor:
            return _Demand(at, {})
        now = {r: self._tree.guaranteed_of(queue, r) for r in floor}
        if old is not None and at >= old.at:
            expect = dict(old.base)
            passed = 0
            for pos, request in old.picks:
                if pos >= at:
                    break
                passed += 1
                for r in expect:
                    expect[r] += request.get(r, 0)
            if expect == now:
                if not passed:
                    old.at = at  # it passed only jobs it did not count: the same demand
                    return old
                total = dict(old.total)
                capped = self._capped
                for _, request in old.picks[:passed]:
                    for r in capped:
                        total[r] = total.get(r, 0) - request.amounts.get(r, 0)
                return _Demand(at, now, old.picks[passed:], {r: n for r, n in total.items() if n})
        return self._count(queue, at, end, floor, now)

    def _count(
        self, queue: str, at: int, end: int, floor: Resources, now: dict[str, int]
    ) -> _Demand:
        """Count the queue's jobs in ``[at, end)`` that would be guaranteed, in order."""
        state = self._queues[queue]
        jobs = state.pending
        left = {r: cap - now[r] for r, cap in floor.items()}
        # Every job asks at least ``least[r]`` of r (when all ask some): with less
        # left of r than that, no later job fits and the count can stop.
        least = _least_needs(state, floor)
        demand = _Demand(at, now)
        total = demand.total
        picks = demand.picks
        capped = self._capped
        strict = state.strict_fifo
        if _exhausted(left, least):
            return demand
        if len(left) == 1 and not strict:
            # The usual ``min`` names one resource: the same count, in one compare a job.
            r, room = next(iter(left.items()))
            bound = least.get(r, 0)
            for pos in range(at, end):
                job = jobs[pos]
                if job.priority < 0 or job.gang_request.amounts.get(r, 0) > room:
                    continue
                request = _counted(job, left)
                picks.append((pos, request))
                _take(total, capped, request)
                room = left[r] = room - request.amounts.get(r, 0)
                if room < bound:
                    break
            return demand
        for pos in range(at, end):
            job = jobs[pos]
            # The gang minimum is the least a job takes: most jobs of a tail that
            # must borrow are ruled out by that one check.
            if job.opportunistic or not _fits(job.gang_request.amounts, left):
                if strict:
                    break
                continue
            request = _counted(job, left)
            picks.append((pos, request))
            _take(total, capped, request)
            for r, amount in request.amounts.items():
                if r in left:
                    left[r] -= amount
            if _exhausted(left, least):
                break
        return demand


def _take(total: dict[str, int], capped: list[str], request: Resources) -> None:
    """Add the ``capped`` resources of ``request`` to ``total``."""
    for r in capped:
        amount = request.amounts.get(r, 0)
        if amount:
            total[r] = total.get(r, 0) + amount


def _exhausted(left: dict[str, int], least: dict[str, int]) -> bool:
    """Whether less is left of some resource than every job asks for."""
    return any(left[r] < need for r, need in least.items())


def _fits(amounts: dict[str, int], left: dict[str, int]) -> bool:
    return all(amounts.get(r, 0) <= room for r, room in left.items())


def _counted(job: Job, left: dict[str, int]) -> Resources:
    """What ``job``, whose gang minimum fits what is left of its queue's ``min``, would
    take within it: its start size if that fits too, else its gang minimum."""
    start = job.start_size
    if start == job.gang_size:
        return job.gang_request
    full = job.request if start == job.size else job.request_of(job.pods[:start])
    return full if _fits(full.amounts, left) else job.gang_request


def _least_needs(state: QueueState, floor: Resources) -> dict[str, int]:
    """Per resource of ``floor`` that every non-opportunistic pending job of the queue
    asks for, the smallest amount one asks (its gang minimum's)."""
    jobs = state.split()
    out: dict[str, int] = {}
    for r in floor:
        asking, least = state.least_need(r)
        if asking and asking == jobs:
            out[r] = least
    return out
