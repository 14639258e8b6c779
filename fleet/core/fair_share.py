"""Fair share with memory: each queue's decayed usage, and the key queues are served by.

Job: remember what each queue has held lately, so that a team that held the
whole fleet all night is not, in the morning, as entitled to borrow as one
that held nothing (Slurm's decayed usage, Kueue's Admission Fair Sharing).

Theory of operation:

* A tree node may say ``fairSharing: {halfLife: 24h, weight: 2}``; both are
  inherited by its subtree (:meth:`~fleet.core.quota_structure.QuotaStructure.fair_sharing`;
  the root's defaults: no memory, weight 1).
* For each leaf with a half-life ``h`` > 0, :class:`FairUsage` keeps the
  *decayed average* of what the queue held, per resource: the usage the
  quota tree charges it (guaranteed and borrowed; an opportunistic job only its
  ``kube-queue/max-jobs``), each past second weighted by ``2^(-age/h)``.  At
  every :meth:`FairUsage.advance` (each ``ClockAdvanced``) it moves as
  ``avg = avg * d + held * (1 - d)`` with ``d = 2^(-dt/h)``: exact for usage
  held constant since the last advance, which is what the loop's iterations
  give (usage changes between two of them are counted from the next).  The
  *decayed usage* shown to people is the same figure in resource-seconds
  (``avg * h / ln 2``, the integral of the weighted past usage).  A leaf seen
  for the first time (a new tree, a new leaf, memory switched on:
  :meth:`FairUsage.seed`) starts at what it holds now.
* **The key.**  :meth:`FairUsage.key` is :meth:`~fleet.core.quota_usage.QuotaUsage.share_of`
  with the decayed average in place of the instant usage, divided by the
  weight: the largest ratio, over the resources the leaf's ``min`` names
  (its ``max`` without a ``min``), of held-lately to guaranteed, over the
  weight.  Without memory (``halfLife`` 0 or unset) the instant usage is
  used, so a tree without ``fairSharing`` orders exactly as before, and a tree
  mixing both compares like with like (an average and an instant figure are
  both GPUs held).  The cycle serves queues by this key in every pass
  (:func:`fleet.core.cycle.share`), and the reclaim search takes borrowed
  jobs first from the leaves with the largest key
  (:mod:`fleet.core.quota_lending`): who borrows first and who gives back
  first both follow the memory.
* **Entry penalty.**  An admission adds its request to the queue's average as
  if it had been held for :data:`ENTRY_PENALTY_S` already
  (``request * (1 - 2^(-penalty/h))``): the key moves at once, so the other
  queues get their turn within one cycle, and a burst of submissions does
  not take everything before its usage shows.
* Guarantees are untouched: the key orders queues; what ``min`` guarantees and
  ``max`` limits is the quota tree's, unchanged.
* **Explained.**  :func:`explain` gives each leaf's weight, decayed usage,
  key, its rank among its parent's leaves and a sentence saying why
  ("team-b borrows before team-a: 12.0 GPU-h decayed usage over min 8 GPU
  against 90.0 GPU-h ..."), for the queues API and ``fleet describe queue``.
* The averages survive restarts: the service stores :meth:`FairUsage.records`
  and gives them back through ``events.FairUsageRestored``; the next advance
  decays them over the time the service was down, with the usage the
  restored running jobs hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fleet.core.quota_usage import QuotaUsage
from fleet.core.resources import GPU, TYPED_GPU_PREFIX, Resources, is_byte_resource

#: Seconds of holding an admission is charged at once (Kueue samples usage every 5 minutes).
ENTRY_PENALTY_S: Final = 300.0
_LN2: Final = math.log(2.0)


class FairUsage:
    """The decayed average held per leaf with memory; see the module docstring."""

    __slots__ = ("at", "averages")

    def __init__(self, at: float = 0.0) -> None:
        #: leaf -> resource -> the decayed average held (only leaves with memory)
        self.averages: dict[str, dict[str, float]] = {}
        #: the time the averages are at
        self.at = at

    def advance(self, tree: QuotaUsage, now: float) -> bool:
        """Decay every leaf with memory to ``now``, counting what it holds now as
        held since :attr:`at`; whether any average moved."""
        dt = now - self.at
        if dt <= 0.0:
            return False
        self.at = now
        if not tree.fair_any:
            if self.averages:
                self.averages.clear()
            return False
        moved = False
        factors: dict[float, float] = {}
        fair = tree._fair
        used = tree._used
        names = tree._names
        for leaf in tree._leaves_under[0]:
            half_life = fair[leaf][0]
            if half_life <= 0.0:
                continue
            name = names[leaf]
            held = used[leaf]
            avg = self.averages.get(name)
            if avg is None:
                self.averages[name] = {r: float(v) for r, v in held.items() if v}
                moved = True
                continue
            d = factors.get(half_life)
            if d is None:
                d = factors[half_life] = 2.0 ** (-dt / half_life)
            for r in sorted(avg.keys() | held.keys()):
                avg[r] = avg.get(r, 0.0) * d + held.get(r, 0) * (1.0 - d)
            moved = True
        return moved

    def seed(self, tree: QuotaUsage) -> None:
        """Every leaf with memory the averages do not know yet starts at what it holds
        now; averages of leaves without memory are dropped."""
        fair = tree._fair
        used = tree._used
        keep: dict[str, dict[str, float]] = {}
        for leaf in tree._leaves_under[0]:
            if fair[leaf][0] <= 0.0:
                continue
            name = tree._names[leaf]
            avg = self.averages.get(name)
            keep[name] = {r: float(v) for r, v in used[leaf].items() if v} if avg is None else avg
        self.averages = keep

    def entered(self, tree: QuotaUsage, queue: str, request: Resources) -> None:
        """An admission (or growth step) of ``request`` in ``queue``: the entry penalty."""
        leaf = tree._leaf(queue)
        half_life = tree._fair[leaf][0]
        if half_life <= 0.0:
            return
        avg = self.averages.setdefault(queue, {})  # every leaf with memory is seeded
        share = 1.0 - 2.0 ** (-ENTRY_PENALTY_S / half_life)
        for r, v in request.items():
            avg[r] = avg.get(r, 0.0) + v * share

    def held(self, tree: QuotaUsage, queue: str) -> dict[str, float]:
        """What the queue held lately (its decayed average; its instant usage
        without memory), per resource, in the resource's base unit."""
        leaf = tree._leaf(queue)
        avg = self.averages.get(queue) if tree._fair[leaf][0] > 0.0 else None
        if avg is None:
            return {r: float(v) for r, v in tree._used[leaf].items()}
        return dict(avg)

    def decayed(self, tree: QuotaUsage, queue: str) -> dict[str, float]:
        """The queue's decayed usage per resource, in resource-seconds (empty without memory)."""
        leaf = tree._leaf(queue)
        half_life = tree._fair[leaf][0]
        avg = self.averages.get(queue)
        if half_life <= 0.0 or avg is None:
            return {}
        scale = half_life / _LN2
        return {r: v * scale for r, v in sorted(avg.items())}

    def key(self, tree: QuotaUsage, queue: str) -> float | None:
        """The queue's fairness key (see the module docstring); None without
        ``min`` or ``max`` (such a queue is served last)."""
        leaf = tree._leaf(queue)
        basis = tree._min_d[leaf] or tree._max_d[leaf]
        if not basis:
            return None
        half_life, weight = tree._fair[leaf]
        avg = self.averages.get(queue) if half_life > 0.0 else None
        if avg is None:
            ratio = tree.share_of(queue) or 0.0  # the instant share
        else:
            ratio = 0.0
            for r, amount in basis.items():
                if amount > 0:
                    ratio = max(ratio, avg.get(r, 0.0) / amount)
        return ratio if weight == 1.0 else ratio / weight

    def records(self, tree: QuotaUsage) -> dict[str, dict[str, float]]:
        """What to store: the averages of the tree's leaves with memory, by leaf name."""
        leaves = set(tree.leaves())
        return {
            name: dict(sorted(avg.items()))
            for name, avg in sorted(self.averages.items())
            if name in leaves
        }

    def restore(self, records: Mapping[str, Mapping[str, float]], at: float) -> None:
        """Take stored averages back (as of ``at``); the next advance decays them to
        its time."""
        for name, avg in records.items():
            self.averages[name] = {r: float(v) for r, v in avg.items()}
        self.at = at


@dataclass(frozen=True, slots=True)
class FairShareView:
    """A leaf's fair share, as ``GET /api/v1/queues`` and ``fleet describe queue`` show it.

    ``decayed`` is the decayed usage per resource in resource-hours (cpu in
    cores, byte resources in GiB; empty without memory); ``held`` what the key
    is made of (the decayed average held, else the instant usage), in the same
    units without the hours; ``share`` the key (None: neither ``min`` nor
    ``max``); ``rank`` the leaf's place among the leaves of its parent (1:
    served first), of ``siblings``.
    """

    weight: float
    half_life: float
    decayed: Mapping[str, float]
    share: float | None
    rank: int
    siblings: int
    explanation: str


def _unit(resource: str) -> tuple[str, float]:
    """How a resource's figures are shown: (unit, base units per shown unit)."""
    if resource == GPU or resource.startswith(TYPED_GPU_PREFIX):
        return ("GPU", 1.0)
    if resource == "cpu":
        return ("CPU", 1000.0)
    if is_byte_resource(resource):
        return ("GiB", float(2**30))
    return (resource, 1.0)


def _dominant(tree: QuotaUsage, queue: str, held: Mapping[str, float]) -> str | None:
    """The resource that makes the queue's key (its largest ratio), if any."""
    leaf = tree._leaf(queue)
    basis = tree._min_d[leaf] or tree._max_d[leaf] or {}
    best: str | None = None
    ratio = -1.0
    # GPUs first, so that a tie (nothing held) is told in GPUs
    for r, amount in sorted(basis.items(), key=lambda kv: (_unit(kv[0])[0] != "GPU", kv[0])):
        if amount > 0 and held.get(r, 0.0) / amount > ratio:
            best, ratio = r, held.get(r, 0.0) / amount
    return best


def _usage_words(tree: QuotaUsage, fair: FairUsage, queue: str) -> str:
    """``120.0 GPU-h decayed usage`` (or ``3 GPU in use``), with the weight and min
    it is weighed against when they are not plain."""
    held = fair.held(tree, queue)
    r = _dominant(tree, queue, held)
    if r is None:
        return "no min or max"
    unit, per = _unit(r)
    half_life, weight = tree.fair_sharing(queue)
    if half_life > 0.0:
        amount = fair.decayed(tree, queue).get(r, 0.0) / per / 3600.0
        words = f"{amount:.1f} {unit}-h decayed usage"
    else:
        words = f"{held.get(r, 0.0) / per:g} {unit} in use"
    leaf = tree._leaf(queue)
    basis = tree._min_d[leaf] or tree._max_d[leaf] or {}
    against = "min" if tree._min_d[leaf] else "max"
    words += f" over {against} {basis[r] / per:g} {unit}"
    if weight != 1.0:
        words += f" and weight {weight:g}"
    return words


def explain(tree: QuotaUsage, fair: FairUsage) -> dict[str, FairShareView]:
    """Every leaf's fair share, its order among its parent's leaves and why (a pure
    query over the tree and the averages)."""
    by_parent: dict[int, list[int]] = {}
    for leaf in tree._leaves_under[0]:
        by_parent.setdefault(tree._parent[leaf], []).append(leaf)
    out: dict[str, FairShareView] = {}
    for parent, leaves in by_parent.items():
        keyed = []
        for leaf in leaves:
            key = fair.key(tree, tree._names[leaf])
            keyed.append((math.inf if key is None else key, leaf))
        keyed.sort()
        group = "the root" if parent < 0 else repr(tree._names[parent])
        for i, (key, leaf) in enumerate(keyed):
            name = tree._names[leaf]
            half_life, weight = tree._fair[leaf]
            if len(keyed) == 1:
                why = f"{name} is the only queue under {group}"
            elif key == math.inf:
                why = f"{name} has neither min nor max: it borrows after the others"
            elif i == 0:
                nxt = tree._names[keyed[1][1]]
                why = (
                    f"{name} borrows first under {group}: {_usage_words(tree, fair, name)} "
                    f"against {_usage_words(tree, fair, nxt)} for {nxt}"
                )
                if keyed[1][0] == key:
                    why += " (even: the tree's order decides)"
            else:
                before = tree._names[keyed[i - 1][1]]
                why = (
                    f"{before} borrows before {name}: "
                    f"{_usage_words(tree, fair, before)} against "
                    f"{_usage_words(tree, fair, name)}"
                )
                if keyed[i - 1][0] == key:
                    why += " (even: the tree's order decides)"
            decayed = {r: v / _unit(r)[1] / 3600.0 for r, v in fair.decayed(tree, name).items()}
            out[name] = FairShareView(
                weight=weight,
                half_life=half_life,
                decayed=decayed,
                share=None if key == math.inf else key,
                rank=i + 1,
                siblings=len(keyed),
                explanation=why,
            )
    return out
