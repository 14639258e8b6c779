"""Where an int goes in a sorted list of ints.

Job: ``bisect_left`` for the core's sorted lists of ints (the capacity
placer's free-GPU buckets, the fair heap's ranks), written out so that the
compiled core compares the ints itself rather than calling into ``bisect``
through the generic protocol.
"""

from __future__ import annotations


def position(values: list[int], value: int) -> int:
    """The first index of ``values`` (sorted, ascending) whose item is not below ``value``."""
    lo = 0
    hi = len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo
