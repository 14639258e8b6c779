"""The order a reclaim search takes lending leaves in, kept as usage moves.

Theory of operation: a reclaim search blocked at a node on a resource takes
the leaves under that node that have reclaimable units
(:class:`~fleet.core.quota_admitted.AdmittedJobs`, ``lending``) in one order:
their cheapest unit's priority, most borrowed of the resource first (with
fair share's memory on, :mod:`fleet.core.fair_share`: the largest fairness
key first, :attr:`LendingOrder.figures`), that unit's newest submission, then
leaf (:func:`lend_key`).  :class:`LendingOrder`
builds that order when a search first asks for a (node, resource) and then
keeps it: an admission or release of a borrowed unit marks its leaf
(:meth:`LendingOrder.mark`), and the next search moves each marked leaf in the
orders above it (a bisection; a leaf charged and given back in between, as a
search's "what if" does, is moved once), so a search reads its leaves in
order instead of keying every lending leaf again.
"""

from __future__ import annotations

import bisect

from fleet.core.checks import InvariantError
from fleet.core.quota_admitted import Admitted, AdmittedJobs, cheapest_first

#: A lending leaf's place in a reclaim search: its cheapest job's priority, minus
#: its figure (what it borrows of the blocking resource, or its fairness key),
#: minus that job's submission number.
LendKey = tuple[int, float, int]


def lend_key(head: Admitted, figure: float) -> LendKey:
    """Where a leaf whose cheapest reclaimable job is ``head`` and whose figure
    (:func:`figure`) is ``figure`` comes in a reclaim search."""
    return (head.priority, -figure, -head.seq)


def figure(
    figures: dict[int, float] | None, borr: list[dict[str, int]], leaf: int, resource: str
) -> float:
    """A lending leaf's figure: what it borrows of ``resource`` or, with fair share's
    memory on (``figures`` given), its fairness key (the larger goes first)."""
    if figures is None:
        return borr[leaf].get(resource, 0)
    return figures.get(leaf, 0.0)


class LendingOrder:
    """The kept orders of lending leaves over ``admitted``; see the module docstring.

    The tree's shape (``paths``: each node's path to the root, by node number)
    and its borrowed usage (``borr``, per node) are passed in at each call: the
    tree may replace those lists.
    """

    def __init__(self, admitted: AdmittedJobs | None = None) -> None:
        # A default for unpickling (a compiled class is called without arguments
        # first); the tree's own AdmittedJobs is then set back.
        self.admitted = admitted if admitted is not None else AdmittedJobs()
        #: (node, resource) -> the lending leaves under the node in reclaim order (as asked)
        self.index: dict[tuple[int, str], list[tuple[LendKey, int]]] = {}
        #: (node, resource) -> leaf -> its key in that order
        self.keys: dict[tuple[int, str], dict[int, LendKey]] = {}
        #: leaves whose borrowed jobs changed since the orders were last brought up to date
        self.dirty: set[int] = set()
        #: leaf -> its fairness key, when some leaf has fair share's memory (None:
        #: leaves are ordered by what they borrow); set by :meth:`set_figures`
        self.figures: dict[int, float] | None = None

    def set_figures(self, figures: dict[int, float] | None) -> None:
        """The leaves' fairness keys changed (or memory went on or off): the kept
        orders are built again when next asked."""
        self.figures = figures
        self.index.clear()
        self.keys.clear()
        self.dirty.clear()

    def mark(self, leaf: int) -> None:
        """A borrowed unit of ``leaf`` was admitted or released: its place may move."""
        if self.index:
            self.dirty.add(leaf)

    def order(
        self,
        node: int,
        resource: str,
        paths: list[tuple[int, ...]],
        borr: list[dict[str, int]],
        names: list[str],
    ) -> list[tuple[LendKey, int]]:
        """The leaves under ``node`` with reclaimable jobs, in the order a reclaim
        search blocked on ``resource`` takes them: by :func:`lend_key`, then leaf.
        Not to be changed by the caller."""
        if self.dirty:
            for leaf in self.dirty:
                self._relend(leaf, paths, borr, names)
            self.dirty.clear()
        index = self.index.get((node, resource))
        if index is None:
            admitted = self.admitted
            keys = {
                leaf: lend_key(admitted.head(leaf), figure(self.figures, borr, leaf, resource))
                for leaf in admitted.lending
                if node in paths[leaf]
            }
            index = self.index[(node, resource)] = sorted((k, i) for i, k in keys.items())
            self.keys[(node, resource)] = keys
        return index

    def _relend(
        self, leaf: int, paths: list[tuple[int, ...]], borr: list[dict[str, int]], names: list[str]
    ) -> None:
        """The leaf's borrowed jobs changed: move it in every lending order above it."""
        path = paths[leaf]
        admitted = self.admitted
        head = admitted.head(leaf) if admitted.leaf_borrowed[leaf] else None
        for (node, r), index in self.index.items():
            if node not in path:
                continue
            keys = self.keys[(node, r)]
            old = keys.pop(leaf, None)
            if old is not None:
                i = bisect.bisect_left(index, (old, leaf))
                if i == len(index) or index[i] != (old, leaf):
                    raise InvariantError(
                        f"{names[leaf]} is not where its lending order at {names[node]} kept it"
                    )
                del index[i]
            if head is not None:
                new = keys[leaf] = lend_key(head, figure(self.figures, borr, leaf, r))
                bisect.insort(index, (new, leaf))

    def check_invariants(
        self, paths: list[tuple[int, ...]], borr: list[dict[str, int]], names: list[str]
    ) -> None:
        """Recount every kept order from the records and compare (the marked leaves
        are moved when a search next asks: they are left out)."""
        dirty = self.dirty
        leaf_borrowed = self.admitted.leaf_borrowed
        for (node, r), index in self.index.items():
            keys = {
                leaf: lend_key(
                    min(leaf_borrowed[leaf].values(), key=cheapest_first),
                    figure(self.figures, borr, leaf, r),
                )
                for leaf, recs in enumerate(leaf_borrowed)
                if recs and node in paths[leaf] and leaf not in dirty
            }
            in_order = sorted((k, i) for i, k in keys.items())
            kept_keys = {i: k for i, k in self.keys[(node, r)].items() if i not in dirty}
            if [e for e in index if e[1] not in dirty] != in_order or kept_keys != keys:
                raise InvariantError(
                    f"{names[node]}: stale lending order for {r}: kept "
                    f"{[(names[i], k) for k, i in index if i not in dirty]}, recount "
                    f"{[(names[i], k) for k, i in in_order]}"
                )
