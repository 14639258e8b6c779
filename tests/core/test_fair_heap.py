"""The fair heap hands out queues in ``(share, rank)`` order, as a heap of tuples would."""

from __future__ import annotations

import heapq
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core.fair_heap import FairHeap

#: a few shares, so that ties (the ranks' order decides) are common
SHARES = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, math.inf])


@settings(max_examples=200, deadline=None)
@given(
    first=st.dictionaries(st.integers(0, 30), SHARES),
    steps=st.lists(st.tuples(st.booleans(), st.integers(0, 30), SHARES), max_size=60),
)
def test_pops_in_tuple_order_as_a_heap_of_tuples_does(
    first: dict[int, float], steps: list[tuple[bool, int, float]]
) -> None:
    fair = FairHeap([(share, rank) for rank, share in sorted(first.items())])
    tuples = [(share, rank) for rank, share in first.items()]
    heapq.heapify(tuples)
    inside = set(first)
    for pop, rank, share in steps:
        assert bool(fair) == bool(tuples)
        assert len(fair) == len(tuples)
        if pop and tuples:
            popped = fair.pop()
            assert popped == heapq.heappop(tuples)
            inside.discard(popped[1])
            continue
        if rank in inside:
            continue  # a queue has one entry at a time
        below = bool(tuples) and tuples[0] < (share, rank)
        assert fair.first_below(share, rank) == below
        fair.push(share, rank)
        heapq.heappush(tuples, (share, rank))
        inside.add(rank)
    drained = []
    while fair:
        drained.append(fair.pop())
    assert drained == sorted(tuples)


def test_an_empty_heap_has_nothing_below_and_pops_nothing() -> None:
    fair = FairHeap([])
    assert not fair
    assert not fair.first_below(0.0, 0)
    with pytest.raises(IndexError):
        fair.pop()
