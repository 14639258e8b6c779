"""The rules an ElasticQuotaTree must keep, checked before any tree is used.

Theory of operation: :func:`validate` walks a :class:`QuotaNodeSpec` tree once,
depth first in document order, collects every broken rule, and raises a
:class:`QuotaError` for the first one (``errors`` holds them all), naming the
node, the resource and the field path: unique node
names; namespaces only on leaves and in one leaf; the children's ``min`` sum
within the parent's ``min``; a child's ``max`` within its parent's (an absent
``max`` is never above anything); ``min <= max``; no negative quantity;
minimum runtimes finite, ``maxRuntime`` finite and above zero; a finite
``fairSharing.halfLife`` and a weight above 0; per-user limits
(``limits.perUser``, :attr:`QuotaNodeSpec.per_user`) on leaves only, none
negative.  A root whose ``min`` differs from its ``max`` is accepted with a
warning.

A root whose capacity is ``auto`` (:attr:`QuotaNodeSpec.auto`) has the
members' healthy capacity as its ``min`` and ``max``
(:func:`fleet.core.inventory.with_capacity`), a figure that moves with the
members: its children are not held to it (neither their ``min`` in sum nor
each one's ``max``), since a drained member must not make the tree in force
invalid; a tree that promises more than the members hold is reported
instead (:func:`fleet.core.inventory.overpromised`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fleet.core.resources import MAX_JOBS, ZERO, Resources, format_quantity

#: How ``limits.perUser`` names the count of a user's running jobs; the core keeps
#: it as ``kube-queue/max-jobs`` (every job's first unit charges one of it).
RUNNING_JOBS = "runningJobs"


def per_user_field(resource: str) -> str:
    """The ``limits.perUser`` field that caps ``resource`` (``runningJobs`` for jobs)."""
    return RUNNING_JOBS if resource == MAX_JOBS else resource


#: The largest ``fairSharing.weight`` (a typo guard: weights are relative).
MAX_WEIGHT = 1_000_000.0


class MaxRuntimeAction(StrEnum):
    """What ``maxRuntime`` does to a job that reaches it."""

    FAIL = "Fail"  # the job fails
    REQUEUE = "Requeue"  # the job is preempted and queued again, its run time counted afresh


@dataclass(frozen=True, slots=True)
class QuotaNodeSpec:
    """One node of an ElasticQuotaTree as written (already parsed to exact values).

    ``max`` of None means the node sets no limit of its own; a ``max`` that
    names some resources limits only those.  ``path`` is the field path of the
    node in its document (``spec.root.children[0]``) for error messages.
    ``preempt_min_runtime`` and ``reclaim_min_runtime`` (seconds; None:
    inherited from the parent, or none at the root) protect a job that has
    run for less than that from in-queue priority preemption and from
    reclaim respectively.  ``max_runtime`` (seconds; None: inherited, or none
    at the root) ends a job of the subtree whose run time reaches it, as
    ``max_runtime_action`` says (None: inherited, :attr:`MaxRuntimeAction.FAIL`
    at the root).
    """

    name: str
    min: Resources = ZERO
    max: Resources | None = None
    namespaces: tuple[str, ...] = ()
    children: tuple[QuotaNodeSpec, ...] = ()
    path: str = "spec.root"
    preempt_min_runtime: float | None = None
    reclaim_min_runtime: float | None = None
    #: ``capacity: auto`` (the root only): ``min`` and ``max`` are the members' healthy
    #: capacity, filled in by :func:`fleet.core.inventory.with_capacity`
    auto: bool = False
    #: ``fairSharing.halfLife`` (seconds; 0: no memory) and ``fairSharing.weight`` as
    #: written; None: inherited from the parent (at the root: no memory, weight 1).
    #: See :mod:`fleet.core.fair_share`.
    fair_half_life: float | None = None
    fair_weight: float | None = None
    #: ``limits.perUser`` (leaves only): what one user's holding jobs may hold at most
    #: in this queue, ``runningJobs`` kept as ``kube-queue/max-jobs``
    #: (:mod:`fleet.core.user_limits`); None: no per-user limit
    per_user: Resources | None = None
    max_runtime: float | None = None
    max_runtime_action: MaxRuntimeAction | None = None


def node_message(node: str, what: str) -> str:
    """``node 'NAME': WHAT``: how every error about one node of a quota tree reads."""
    return f"node {node!r}: {what}"


class QuotaError(ValueError):
    """An invalid quota tree or quota change at one node: ``node 'NAME': WHAT (PATH)``.

    The node is a required argument, so every error names the node it is about;
    ``message`` is ``node 'NAME': WHAT`` (without the path).
    """

    path: str
    node: str

    def __init__(self, node: str, what: str, *, path: str) -> None:
        self.message = node_message(node, what)
        super().__init__(f"{self.message} ({path})")
        self.path = path
        self.node = node
        #: Every rule the tree breaks, this one first (see :func:`validate`).
        self.errors: list[QuotaError] = [self]


def _show(values: Resources) -> str:
    """``cpu=9999, memory=40Gi`` (or ``{}``) for messages."""
    return ", ".join(f"{k}={v}" for k, v in values.to_quantities().items()) or "{}"


def fmt(resource: str, amount: int) -> str:
    return f"{resource} {format_quantity(resource, amount)}"


def validate(root: QuotaNodeSpec) -> list[str]:
    """Check every rule of the tree; returns the non-fatal warnings.

    Raises :class:`QuotaError` for the first broken rule in document order,
    whose ``errors`` list every broken rule, so a user sees them all at once.
    """
    seen: dict[str, str] = {}
    ns_owner: dict[str, str] = {}
    problems: list[QuotaError] = []

    def visit(node: QuotaNodeSpec, parent: QuotaNodeSpec | None) -> None:
        name = node.name
        if not name:
            problems.append(
                QuotaError(name, "a node name must not be empty", path=f"{node.path}.name")
            )
        if name in seen:
            problems.append(
                QuotaError(
                    name,
                    f"duplicate node name (first defined at {seen[name]})",
                    path=f"{node.path}.name",
                )
            )
        seen[name] = node.path
        if node.auto and parent is not None:
            problems.append(
                QuotaError(
                    name,
                    "capacity: auto is for the root node only",
                    path=f"{node.path}.capacity",
                )
            )
        for field, vec in (("min", node.min), ("max", node.max)):
            if vec is None:
                continue
            for r, v in vec.items():
                if v < 0:
                    problems.append(
                        QuotaError(
                            name,
                            f"{field} {fmt(r, v)} is negative",
                            path=f"{node.path}.{field}",
                        )
                    )
        for field, seconds in (
            ("preemptMinRuntime", node.preempt_min_runtime),
            ("reclaimMinRuntime", node.reclaim_min_runtime),
        ):
            if seconds is not None and not 0 <= seconds < float("inf"):
                problems.append(
                    QuotaError(
                        name, f"{field} must be a finite duration", path=f"{node.path}.{field}"
                    )
                )
        if node.fair_half_life is not None and not 0 <= node.fair_half_life < float("inf"):
            problems.append(
                QuotaError(
                    name,
                    "fairSharing.halfLife must be a finite duration (0: no memory)",
                    path=f"{node.path}.fairSharing.halfLife",
                )
            )
        if node.fair_weight is not None and not 0 < node.fair_weight <= MAX_WEIGHT:
            problems.append(
                QuotaError(
                    name,
                    f"fairSharing.weight must be above 0 and at most {MAX_WEIGHT:g}",
                    path=f"{node.path}.fairSharing.weight",
                )
            )
        if node.max_runtime is not None and not 0 < node.max_runtime < float("inf"):
            problems.append(
                QuotaError(
                    name,
                    "maxRuntime must be a finite duration above zero",
                    path=f"{node.path}.maxRuntime",
                )
            )
        if node.max is not None:
            for r, cap in node.max.items():
                if node.min[r] > cap:
                    problems.append(
                        QuotaError(
                            name,
                            f"min {fmt(r, node.min[r])} is above max {format_quantity(r, cap)}",
                            path=f"{node.path}.min",
                        )
                    )
        if (
            parent is not None
            and not parent.auto
            and parent.max is not None
            and node.max is not None
        ):
            for r, cap in node.max.items():
                if r in parent.max and cap > parent.max[r]:
                    problems.append(
                        QuotaError(
                            name,
                            f"max {fmt(r, cap)} is above the max "
                            f"{format_quantity(r, parent.max[r])} of its parent {parent.name!r}",
                            path=f"{node.path}.max",
                        )
                    )
        if node.per_user is not None:
            where = f"{node.path}.limits.perUser"
            if node.children:
                problems.append(
                    QuotaError(
                        name,
                        "limits.perUser is for leaves only, but it has children",
                        path=where,
                    )
                )
            for r, v in node.per_user.items():
                if v < 0:
                    field = per_user_field(r)
                    problems.append(
                        QuotaError(
                            name,
                            f"limits.perUser.{field} {format_quantity(r, v)} is negative",
                            path=f"{where}.{field}",
                        )
                    )
        if node.children and node.namespaces:
            problems.append(
                QuotaError(
                    name,
                    "only leaves own namespaces, but it has children",
                    path=f"{node.path}.namespaces",
                )
            )
        for i, ns in enumerate(node.namespaces):
            owner = ns_owner.get(ns)
            if owner is not None and owner != name:
                problems.append(
                    QuotaError(
                        name,
                        f"namespace {ns!r} already belongs to leaf {owner!r}",
                        path=f"{node.path}.namespaces[{i}]",
                    )
                )
            ns_owner[ns] = name
        for child in node.children:
            visit(child, node)
        if node.children and not node.auto:
            total: dict[str, int] = {}
            for child in node.children:
                for r, v in child.min.items():
                    total[r] = total.get(r, 0) + v
            for r, v in total.items():
                if v > node.min[r]:
                    problems.append(
                        QuotaError(
                            name,
                            f"children's min {fmt(r, v)} in sum is above its "
                            f"min {format_quantity(r, node.min[r])}",
                            path=f"{node.path}.min",
                        )
                    )

    visit(root, None)
    if problems:
        first = problems[0]
        first.errors = problems
        raise first
    warnings: list[str] = []
    differs = (root.max is None and root.min) or (
        root.max is not None and root.min != Resources(root.max)
    )
    if differs and not root.auto:
        shown_max = "unlimited" if root.max is None else _show(root.max)
        warnings.append(
            f"root node {root.name!r}: min {_show(root.min)} differs from max "
            f"{shown_max}; the root's max is the capacity being shared, usually min = max "
            f"({root.path})"
        )
    return warnings
