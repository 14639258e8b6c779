"""Invariant checks that hold under ``python -O``.

Theory of operation: ``assert`` statements vanish when Python runs with
``-O``, so the core's ``check_invariants()`` methods never use them.  They
call :func:`require`, which raises :class:`InvariantError` with a precise
message naming what drifted.  Tests call every ``check_invariants()`` in their
teardown; the service may call them after a restore.

The objects that have invariants (scheduler states, quota trees, placers)
report themselves to :func:`built` as they are made; whoever wants to check
every one of them later (the test suite does, at each test's teardown) adds a
callback to :data:`WATCHERS`.  A compiled class cannot be patched from
outside, so this hook is how they are found.
"""

from __future__ import annotations

from collections.abc import Callable

#: called with every object that has invariants as it is made (empty: nobody asks)
WATCHERS: list[Callable[[object], None]] = []


class InvariantError(Exception):
    """An internal index disagrees with a recount: a bug, never bad input."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`InvariantError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise InvariantError(message)


def built(obj: object) -> None:
    """``obj`` (something with ``check_invariants()``) was just made: tell the watchers."""
    for watcher in WATCHERS:
        watcher(obj)
