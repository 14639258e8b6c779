"""Numbers in requests: query parameters, ``continue`` tokens and cursors, read strictly.

Theory of operation: every number a handler reads from a request goes
through :func:`fleet.core.digits.parse_digits` (ASCII digits only, a bounded
length, within the parameter's bounds), so ``limit=²``, ``limit=١٢``, a
5,000-digit ``limit``, ``-1``, ``1e3``, `` 1`` and ``1\\n`` are all a 400
problem naming the parameter, never a 500.  A ``continue`` token the service
did not hand out is a 400 naming ``continue`` (:func:`bad_continue`).
"""

from __future__ import annotations

from aiohttp import web

from fleet.api.problems import ProblemError, bad_request
from fleet.core.digits import parse_digits


def number(raw: str, what: str, *, low: int, high: int) -> int:
    """``raw`` (the text of ``what``, e.g. ``query parameter limit``) as a number in bounds."""
    value = parse_digits(raw, low=low, high=high)
    if value is None:
        raise ProblemError(bad_request(f"{what} must be an integer from {low} to {high}"))
    return value


def int_query(request: web.Request, name: str, default: int, *, low: int, high: int) -> int:
    """Query parameter ``name`` as a number from ``low`` to ``high`` (``default`` if absent)."""
    raw = request.query.get(name)
    if raw is None:
        return default
    return number(raw, f"query parameter {name}", low=low, high=high)


def bad_continue() -> ProblemError:
    """The 400 for a ``continue`` token this service did not hand out."""
    detail = "query parameter continue is not a token this list handed out (start without it)"
    return ProblemError(bad_request(detail))
