"""The loop's published view: a pure projection of the core's state.

Theory of operation: :func:`project` turns the core's state into an
immutable :class:`LoopView` — queues as ``kubectl get queue`` would show
them (a leaf with ``limits.perUser`` with its limits and each user's
use), pending jobs with their reasons, GPUs per member and virtual cluster,
the members drained and not ready, the members' healthy capacity and what
the tree promises beyond it (:mod:`fleet.core.inventory`), and which jobs
changed since the view before.  The API, the dashboard and telemetry read only that view, never
the state; the service decides when a view is made
(:mod:`fleet.service.views`).  A pending job's view is reused from one
projection to the next while its record and reason stay the same (the
memo :func:`project` takes and returns); its reason's category
(:meth:`fleet.core.waiting.WaitBook.category_of`) is asked when its view is
made, and the view counts the pending jobs by category (``unadmitted``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from fleet.core import fair_share, inventory, user_limits, waiting
from fleet.core.fair_share import FairShareView
from fleet.core.inventory import Inventory, Shortfall
from fleet.core.jobs import Job
from fleet.core.resources import MAX_JOBS, Resources, format_quantity
from fleet.core.state import SchedulerState

#: Views whose changed jobs the published view remembers (LoopView.recent).
RECENT_VIEWS = 256


@dataclass(frozen=True, slots=True)
class QueueView:
    """One node of the quota tree as ``kubectl get queue`` would show it."""

    name: str
    parent: str | None
    leaf: bool
    namespaces: tuple[str, ...]
    min: Mapping[str, str]
    max: Mapping[str, str] | None
    used: Mapping[str, str]
    borrowed: Mapping[str, str]
    admitted: int
    pending: int
    #: a leaf's fair share, its order among its siblings and why (None: not a leaf)
    fair_share: FairShareView | None = None
    #: a leaf's ``limits.perUser`` and what each user holds there (None: no such limits)
    per_user: PerUserView | None = None


@dataclass(frozen=True, slots=True)
class UserUseView:
    """What one user's holding jobs hold in a leaf: jobs, and resources as quantities."""

    user: str
    running_jobs: int
    resources: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PerUserView:
    """A leaf's per-user limits (``runningJobs`` and quantities) and each user's use."""

    limits: Mapping[str, str]
    users: tuple[UserUseView, ...]


@dataclass(frozen=True, slots=True)
class PendingView:
    """A pending job's place in its queue and why it waits."""

    job: str
    priority: int
    priority_class: str
    request: Mapping[str, str]
    reason: str
    #: the reason's category (:data:`fleet.core.waiting.CATEGORIES`)
    category: str = waiting.NOT_TRIED


@dataclass(frozen=True, slots=True)
class ClusterGpus:
    """GPUs of one member cluster, and per virtual cluster: (total, used) each."""

    total: int
    used: int
    vcs: Mapping[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class LoopView:
    """What the loop knew after its last iteration (immutable; the API reads it)."""

    ready: bool = False
    time: float = 0.0
    queues: tuple[QueueView, ...] = ()
    pending: Mapping[str, tuple[PendingView, ...]] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    clusters: Mapping[str, ClusterGpus] = field(default_factory=dict)
    #: cluster -> virtual cluster -> its virtual cells that bad nodes leave no cell for
    doomed: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: 1 for the first view published, then one more per view (the change stream's ids)
    version: int = 0
    #: the last views' versions with the jobs (namespace/name) that changed in each:
    #: submitted, moved to another state, or given another waiting reason; oldest first
    recent: tuple[tuple[int, tuple[str, ...]], ...] = ()
    #: member clusters being drained (removed once their jobs are gone)
    draining: frozenset[str] = frozenset()
    #: member clusters that are not ready (nothing is dispatched to them)
    unready: frozenset[str] = frozenset()
    #: the healthy capacity of the members in service (:mod:`fleet.core.inventory`)
    inventory: Inventory = field(default_factory=Inventory)
    #: what the tree's guarantees promise beyond that capacity, by resource
    overpromised: tuple[Shortfall, ...] = ()
    #: the root's capacity is ``auto``: its min and max (in ``queues``) are the capacity
    auto: bool = False
    #: pending jobs by the category of why they wait (every category, 0 included)
    unadmitted: Mapping[str, int] = field(default_factory=dict)


def _quantities(values: Resources | Mapping[str, int]) -> dict[str, str]:
    return {r: format_quantity(r, v) for r, v in sorted(values.items()) if v}


def _limits(values: Resources | None) -> dict[str, str] | None:
    """A node's ``max`` as quantities, a limit of 0 included (None: no limit)."""
    if values is None:
        return None
    return {r: format_quantity(r, v) for r, v in sorted(values.items())}


def _per_user(state: SchedulerState, node: str) -> PerUserView | None:
    """The leaf's ``limits.perUser`` and every user's use there (None: no such limits)."""
    limits = state.tree.per_user(node)
    if limits is None:
        return None
    users = tuple(
        UserUseView(
            user,
            held.get(MAX_JOBS, 0),
            _quantities({r: v for r, v in held.items() if r != MAX_JOBS}),
        )
        for user, held in state.users.users(node).items()
    )
    return PerUserView(user_limits.shown(limits), users)


#: job key -> (its record, its view) in the last published view, to reuse
PendingMemo = dict[str, tuple[Job, PendingView]]


def project(
    state: SchedulerState,
    vc_sizes: Mapping[str, Mapping[str, int]],
    before: LoopView,
    changed: Collection[str],
    memo: PendingMemo,
) -> tuple[LoopView, PendingMemo]:
    """The view of ``state`` that follows ``before``, ``changed`` naming the jobs
    that changed since; with the memo of pending views for the next projection."""
    tree = state.tree
    pending_by_leaf = {name: q.pending for name, q in state.queues.items()}
    counts: dict[str, int] = {}
    for leaf, jobs in pending_by_leaf.items():
        for node in tree.path_to_root(leaf):
            counts[node] = counts.get(node, 0) + len(jobs)
    shares = fair_share.explain(tree, state.fair)
    queues = tuple(
        QueueView(
            name=node,
            parent=tree.parent(node),
            leaf=tree.is_leaf(node),
            namespaces=tree.namespaces_of(node),
            min=_quantities(tree.min_of(node)),
            max=_limits(tree.max_of(node)),
            used=_quantities(tree.used(node)),
            borrowed=_quantities(tree.borrowed_used(node)),
            admitted=tree.admitted_count(node),
            pending=counts.get(node, 0),
            fair_share=shares.get(node),
            per_user=_per_user(state, node),
        )
        for node in tree.nodes()
    )
    reasons: dict[str, str] = {}
    pending: dict[str, tuple[PendingView, ...]] = {}
    book = state.waiting
    fresh: PendingMemo = {}
    unadmitted = dict.fromkeys(waiting.CATEGORIES, 0)
    for leaf, jobs in pending_by_leaf.items():
        views = []
        for job in jobs:
            key = job.key
            reason = book.reason_of(job)
            if reason:
                reasons[key] = reason
            # A job's view is kept while the job (an immutable record) and its
            # reason stay the same: most of them, from one iteration to the next.
            known = memo.get(key)
            if known is not None and known[0] is job and known[1].reason == reason:
                view = known[1]
            else:
                view = PendingView(
                    key,
                    job.priority,
                    job.priority_class,
                    _quantities(job.request),
                    reason,
                    book.category_of(job, reason),
                )
            unadmitted[view.category] = unadmitted.get(view.category, 0) + 1
            fresh[key] = (job, view)
            views.append(view)
        pending[leaf] = tuple(views)
    vc_used = state.guaranteed_gpus
    clusters = {
        name: ClusterGpus(
            placer.capacity()["nvidia.com/gpu"],
            placer.allocated()["nvidia.com/gpu"],
            {vc: (size, vc_used.get((name, vc), 0)) for vc, size in vc_sizes.get(name, {}).items()},
        )
        for name, placer in state.placers.items()
    }
    doomed = {
        name: placer.doomed_cells()
        for name, placer in state.placers.items()
        if hasattr(placer, "doomed_cells")
    }
    # A waiting job whose reason changed changed too.
    moved = set(changed) | {k for k, r in reasons.items() if before.reasons.get(k) != r}
    version = before.version + 1
    recent = (*before.recent, (version, tuple(sorted(moved))))[-RECENT_VIEWS:]
    published = LoopView(
        True,
        state.now,
        queues,
        pending,
        reasons,
        clusters,
        doomed,
        version,
        recent,
        frozenset(state.draining),
        frozenset(state.unready),
        state.inventory,
        inventory.overpromised(inventory.tree_guarantees(tree), state.inventory),
        tree.auto,
        unadmitted,
    )
    return published, fresh
