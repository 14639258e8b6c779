"""The order in which a pass of the cycle serves its queues.

Job: hand out queues by their fairness key, the smallest *share* first and,
among equal shares, the queue that comes first in the state's order (its
*rank*), each queue at most once at a time (:func:`fleet.core.cycle.serve`).

Theory of operation: a heap of ``(share, rank, name)`` tuples would give the
same order, but the pass pops and pushes thousands of entries a cycle and a
heap of tuples compares them element by element through the generic protocol.
Here the distinct shares sit in a heap of floats, and each share's ranks,
negated, in a sorted list: the queues of a pass mostly share a few shares, so
the next (smallest) rank is popped from the end of its list, and a rank put
back is placed by a bisection over ints.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from fleet.core import sorted_ints


class FairHeap:
    """Entries ``(share, rank)``, popped in tuple order; see the module docstring."""

    __slots__ = ("_ranks", "_shares")

    def __init__(self, entries: list[tuple[float, int]]) -> None:
        #: share -> the ranks with that share, negated and sorted: the smallest rank
        #: last (never empty)
        self._ranks: dict[float, list[int]] = {}
        for share, rank in entries:
            bucket = self._ranks.get(share)
            if bucket is None:
                self._ranks[share] = [-rank]
            else:
                bucket.append(-rank)
        for bucket in self._ranks.values():
            bucket.sort()
        #: the distinct shares, a heap
        self._shares = list(self._ranks)
        heapify(self._shares)

    def __bool__(self) -> bool:
        return bool(self._shares)

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._ranks.values())

    def push(self, share: float, rank: int) -> None:
        bucket = self._ranks.get(share)
        if bucket is None:
            self._ranks[share] = [-rank]
            heappush(self._shares, share)
        else:
            bucket.insert(sorted_ints.position(bucket, -rank), -rank)

    def pop(self) -> tuple[float, int]:
        """The smallest entry, taken out (IndexError when empty)."""
        share = self._shares[0]
        bucket = self._ranks[share]
        rank = -bucket.pop()
        if not bucket:
            heappop(self._shares)
            del self._ranks[share]
        return share, rank

    def first_below(self, share: float, rank: int) -> bool:
        """Whether the smallest entry comes before ``(share, rank)``."""
        if not self._shares:
            return False
        top = self._shares[0]
        return top < share or (top == share and -self._ranks[top][-1] < rank)
