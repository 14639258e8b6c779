"""Why each pending job waits, kept per job or per parked group, not per job per cycle.

Theory of operation: a cycle writes a new :class:`WaitBook` into the state
(:attr:`fleet.core.state.SchedulerState.waiting`).  A job the cycle looked at
and left waiting gets its own entry.  A queue's tail that one full ``max``
provably stops (:func:`fleet.core.cycle.wait_all`) is *parked* as one
:class:`ParkedTail`: the jobs behind a given position (not opportunistic)
and the quota block that stops them; each job's text is rendered from the
block and its own request when somebody asks, so parking a tail of any
length costs the same.  A job queued after the book was written (a new
submission, a requeued job) has no reason until the next cycle, as before.

The cycle reports a :class:`~fleet.core.decisions.Wait` decision only for a
job whose reason changed since the previous book (with parking on); the book
answers for every pending job (:meth:`WaitBook.reason_of`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from fleet.core.jobs import Job, sort_key
from fleet.core.quota import QuotaBlock


@dataclass(frozen=True, slots=True)
class ParkedTail:
    """The non-opportunistic jobs of ``queue`` sorted after ``after`` wait on ``block``."""

    queue: str
    after: tuple[int, int]
    block: QuotaBlock

    def holds(self, job: Job) -> bool:
        return not job.opportunistic and sort_key(job) > self.after

    def reason_for(self, job: Job) -> str:
        return replace(self.block, request=job.gang_request[self.block.resource]).reason


@dataclass(slots=True)
class WaitBook:
    """The current reasons of the waiting jobs; see the module docstring."""

    #: job key -> reason, for jobs looked at one by one
    single: dict[str, str] = field(default_factory=dict)
    #: queue -> its parked tail
    tails: dict[str, ParkedTail] = field(default_factory=dict)
    #: jobs queued since the book was written (no reason yet)
    fresh: set[str] = field(default_factory=set)

    def reason_of(self, job: Job) -> str:
        """The reason ``job`` (pending) waits, or "" if no cycle looked at it yet."""
        key = job.key
        if key in self.fresh:
            return ""
        known = self.single.get(key)
        if known is not None:
            return known
        tail = self.tails.get(job.queue)
        if tail is not None and tail.holds(job):
            return tail.reason_for(job)
        return ""

    def queued(self, job: Job) -> None:
        """``job`` was (re)queued after this book was written: no reason yet."""
        self.single.pop(job.key, None)
        tail = self.tails.get(job.queue)
        if tail is not None and tail.holds(job):
            self.fresh.add(job.key)  # only where a parked tail would claim it
