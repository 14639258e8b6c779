"""Per-user limits inside a leaf queue: what each user holds there, and the caps.

Theory of operation: a leaf of the quota tree may cap what one user's jobs
hold in it (``limits: {perUser: {runningJobs: 4, nvidia.com/gpu: 16}}``,
:attr:`~fleet.core.quota_rules.QuotaNodeSpec.per_user`; ``runningJobs`` is kept
as ``kube-queue/max-jobs``, of which every job's first unit charges one and a
growth step none).  The user is :attr:`~fleet.core.jobs.Job.user` (empty:
nobody named, and no per-user limit applies).

* :class:`UserUse` counts, per leaf and user, the requests of every unit of
  the holding jobs (Admitted, Dispatched, Running): growth steps included,
  opportunistic jobs with their whole request.  It is changed only through
  :meth:`~fleet.core.state.SchedulerState.count_unit`, the one place every
  unit of the state is counted in and out, so it follows admissions,
  growth, releases, preemptions, units put back and restores alike, and it
  is kept whether or not the leaf has a limit (a tree change that adds one
  finds the figures there).  :meth:`UserUse.check` recounts it from the
  running units.
* :func:`most_pods` is the cycle's question: the largest start of a job (a
  pod count between its gang minimum and its start size) that keeps its user
  within every cap, found by bisection; :func:`over_cap` names the first
  cap a request would break, and :func:`reason` words it with the figures
  (``user alice runs the most jobs queue team-a allows one user: 4 of 4 jobs
  running (limits.perUser.runningJobs)``).  How the cycle uses them (last,
  after quota and placement, so that a job stopped by its user's cap never
  stops or parks another user's job): :mod:`fleet.core.admission`; growth
  steps are held to the caps in :mod:`fleet.core.growth`.  A cap never preempts anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from fleet.core import wording
from fleet.core.checks import InvariantError
from fleet.core.jobs import Job
from fleet.core.quota_rules import per_user_field
from fleet.core.resources import MAX_JOBS, Resources, format_quantity

_NOTHING: Final[Mapping[str, int]] = {}


class UserUse:
    """Per leaf and user, what the user's holding jobs' units request, summed."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        #: leaf -> user -> resource -> amount (no zero amounts, no empty maps)
        self.held: dict[str, dict[str, dict[str, int]]] = {}

    def count(self, queue: str, user: str, request: Resources, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) one unit's ``request``."""
        users = self.held.get(queue)
        if users is None:
            users = self.held[queue] = {}
        mine = users.get(user)
        if mine is None:
            mine = users[user] = {}
        for r, amount in request.items():
            left = mine.get(r, 0) + sign * amount
            if left:
                mine[r] = left
            else:
                mine.pop(r, None)
        if not mine:
            del users[user]
            if not users:
                del self.held[queue]

    def of(self, queue: str, user: str) -> Mapping[str, int]:
        """What ``user`` holds in ``queue`` (empty: nothing)."""
        users = self.held.get(queue)
        if users is None:
            return _NOTHING
        return users.get(user, _NOTHING)

    def users(self, queue: str) -> dict[str, dict[str, int]]:
        """Every user holding something in ``queue``, sorted by name."""
        users = self.held.get(queue, {})
        return {user: dict(users[user]) for user in sorted(users)}

    def check(self, units: Iterable[tuple[str, str, Resources]]) -> None:
        """The counters equal a recount of ``units`` (leaf, user, request)."""
        recount = UserUse()
        for queue, user, request in units:
            if user:
                recount.count(queue, user, request, 1)
        if recount.held != self.held:
            raise InvariantError(
                f"per-user counters drifted: kept {self.held}, recount {recount.held}"
            )


def over_cap(held: Mapping[str, int], limits: Resources, request: Resources) -> str | None:
    """The first resource of ``limits`` that ``held`` plus ``request`` is over (None: none)."""
    for r, cap in limits.items():
        asked = request.get(r)
        if asked and held.get(r, 0) + asked > cap:
            return r
    return None


def most_pods(job: Job, held: Mapping[str, int], limits: Resources, least: int, most: int) -> int:
    """The largest pod count in ``[least, most]`` whose start keeps ``job``'s user within
    ``limits`` (its first ``n`` pods, :meth:`~fleet.core.jobs.Job.request_of`), or
    ``least - 1`` when even ``least`` pods would go over.  A larger start asks no
    less of any resource, so a bisection finds it."""
    pods = job.pods
    if over_cap(held, limits, job.request_of(pods[:most])) is None:
        return most
    lo, hi = least - 1, most - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if over_cap(held, limits, job.request_of(pods[:mid])) is None:
            lo = mid
        else:
            hi = mid - 1
    return lo


def reason(
    queue: str, user: str, held: Mapping[str, int], limits: Resources, request: Resources
) -> str:
    """Why ``request`` of ``user`` waits in ``queue``: the first cap it breaks, with the
    figures (``request`` must break one, :func:`over_cap`)."""
    r = over_cap(held, limits, request) or next(iter(limits), MAX_JOBS)
    field = per_user_field(r)
    usage = wording.used_of(r, held.get(r, 0), limits.get(r))
    if r == MAX_JOBS:
        return (
            f"user {user} runs the most jobs queue {queue} allows one user: {usage} "
            f"running (limits.perUser.runningJobs)"
        )
    return (
        f"user {user}'s share of queue {queue} is full: {usage} held "
        f"(limits.perUser.{field}); this job needs {wording.figure(r, request.get(r))}"
    )


def shown(values: Resources | Mapping[str, int]) -> dict[str, str]:
    """``values`` as the API shows them: quantities by resource, the count of jobs as
    ``runningJobs``."""
    return {per_user_field(r): format_quantity(r, v) for r, v in sorted(values.items())}
