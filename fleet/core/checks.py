"""Invariant checks that hold under ``python -O``.

Theory of operation: ``assert`` statements vanish when Python runs with
``-O``, so the core's ``check_invariants()`` methods never use them.  They
call :func:`require`, which raises :class:`InvariantError` with a precise
message naming what drifted.  Tests call every ``check_invariants()`` in their
teardown; the service may call them after a restore.
"""

from __future__ import annotations


class InvariantError(Exception):
    """An internal index disagrees with a recount: a bug, never bad input."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`InvariantError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise InvariantError(message)
