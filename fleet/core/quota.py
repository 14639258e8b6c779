"""The hierarchical quota tree (ElasticQuotaTree semantics): the public entry point.

Job: answer "may this request be admitted to this queue, and how is it charged?"
for the scheduling cycle, keep the usage of every node of the tree, and choose
which admitted jobs to preempt when a queue reclaims its ``min``.
:class:`QuotaTree` is the one class the rest of Fleet uses; this module also
re-exports the names its callers need (:class:`QuotaBlock`, :class:`BlockKind`,
:class:`QuotaNodeSpec`, :class:`QuotaError`, ``UNCHANGED``).

Theory of operation: the tree is built in three layers, each in its own module
and each readable on its own:

* :mod:`fleet.core.quota_structure` (:class:`QuotaStructure`): the validated
  shape: names, parents, children, paths to the root, leaves under each
  node, ``min``/``max``, namespaces; :meth:`QuotaTree.set_node` re-validates
  the whole tree and changes nothing on error.
* :mod:`fleet.core.quota_usage` (:class:`QuotaUsage`, a
  :class:`QuotaStructure`): the used / guaranteed / borrowed counters per
  node, ``classify``, ``admit``, ``release``, grandfathered usage above a
  lowered ``max``, and ``check_invariants``.  It owns the admitted records
  and their indexes (:mod:`fleet.core.quota_admitted`) and the reclaim
  search's kept order of lending leaves (:mod:`fleet.core.quota_lending`).
* :mod:`fleet.core.quota_victims` (functions over a :class:`QuotaUsage`): the
  reclaim and in-queue victim searches, pure queries.

:class:`QuotaTree` is a :class:`QuotaUsage` that adds construction
(:meth:`QuotaTree.build`), copying, and the two victim searches as methods.
The rules a tree must keep live in :mod:`fleet.core.quota_rules`.  The tree as
it is now: docs/design/core-and-cycle.md, *The quota tree*; why its rules are
so: docs/decisions/0001-quota-semantics.md and 0012.
"""

from __future__ import annotations

# Part of this module's API: the names its callers import from here.
from fleet.core import checks
from fleet.core.quota_rules import MaxRuntimeAction as MaxRuntimeAction
from fleet.core.quota_rules import QuotaError as QuotaError
from fleet.core.quota_rules import QuotaNodeSpec as QuotaNodeSpec
from fleet.core.quota_structure import UNCHANGED as UNCHANGED
from fleet.core.quota_structure import _Unchanged as _Unchanged
from fleet.core.quota_usage import MAX as MAX
from fleet.core.quota_usage import NON_PREEMPTIBLE_MIN as NON_PREEMPTIBLE_MIN
from fleet.core.quota_usage import OVER_MAX as OVER_MAX
from fleet.core.quota_usage import OVER_MIN as OVER_MIN
from fleet.core.quota_usage import BlockKind as BlockKind
from fleet.core.quota_usage import QuotaBlock as QuotaBlock
from fleet.core.quota_usage import QuotaUsage
from fleet.core.quota_usage import min_block as min_block
from fleet.core.quota_victims import (
    over_limit_victims,
    protected_until,
    queue_victims,
    reclaim_victims,
)
from fleet.core.resources import Resources


class QuotaTree(QuotaUsage):
    """A validated quota tree with its usage; see the module docstring."""

    @classmethod
    def build(cls, root: QuotaNodeSpec) -> QuotaTree:
        """Validate ``root`` and return an empty-usage tree; raise :class:`QuotaError`."""
        return cls(root)

    def __init__(self, root: QuotaNodeSpec | None = None) -> None:
        """A tree validated from ``root`` (prefer :meth:`build`); without one, an empty
        shell for :meth:`copy` to fill."""
        if root is not None:
            self._init_structure(root)
            self._init_usage()
        checks.built(self)

    def copy(self) -> QuotaTree:
        """An independent copy: changing its usage or quota leaves this tree alone."""
        other = QuotaTree()
        self._copy_structure_to(other)
        self._copy_usage_to(other)
        return other

    def reclaim_victims(
        self, queue: str, request: Resources, now: float | None = None, *, bounded: bool = True
    ) -> list[str] | None:
        """Borrowed jobs of other queues to preempt so a guaranteed ``request`` fits.

        ``[]`` when it fits already; None when it cannot be made to fit; with
        ``now``, jobs within their ``reclaimMinRuntime`` are spared.  See
        :func:`fleet.core.quota_victims.reclaim_victims` (``bounded``: which
        leaves seed the search; the answer is the same).
        """
        return reclaim_victims(self, queue, request, now, bounded=bounded)

    def protection_ends(self, keys: list[str], which: int) -> float | None:
        """The latest time a minimum runtime (0: preempt, 1: reclaim) protects one of
        ``keys`` (None: none of them is protected by it)."""
        jobs = self._admitted.jobs
        ends = [
            protected_until(self, jobs[k], which)
            for k in keys
            if k in jobs and self._runtime[jobs[k].leaf][which] > 0
        ]
        return max(ends, default=None)

    def over_limit_victims(self, node: str) -> list[str]:
        """The newest jobs that keep ``node`` over its limits since a tree change.

        See :func:`fleet.core.quota_victims.over_limit_victims`.
        """
        return over_limit_victims(self, node)

    def queue_victims(
        self, queue: str, request: Resources, priority: int, now: float | None = None
    ) -> list[str] | None:
        """Lower-priority jobs of the same queue to preempt so ``request`` fits every max.

        ``[]`` when it fits already; None when it cannot be made to fit; with
        ``now``, jobs within their ``preemptMinRuntime`` are spared.  See
        :func:`fleet.core.quota_victims.queue_victims`.
        """
        return queue_victims(self, queue, request, priority, now)
