"""Numbers in requests: query parameters, ``continue`` tokens and cursors, read strictly.

Theory of operation: every number read from a request goes through
:func:`number`, that is :func:`fleet.core.digits.parse_digits` (ASCII digits
only, a bounded length, within the parameter's bounds): the declared query
parameters of every route (:mod:`fleet.api.routing` reads them, with the
bounds of their declaration), a ``Last-Event-ID`` header, and the numbers
inside ``continue`` tokens and cursors.  So ``limit=²``, ``limit=١٢``, a
5,000-digit ``limit``, ``-1``, ``1e3``, `` 1`` and ``1\\n`` are all a 400
problem naming the parameter, never a 500.  A ``continue`` token the service
did not hand out is a 400 naming ``continue`` (:func:`bad_continue`).
"""

from __future__ import annotations

from fleet.api.problems import ProblemError, bad_request
from fleet.core.digits import parse_digits


def number(raw: str, what: str, *, low: int, high: int) -> int:
    """``raw`` (the text of ``what``, e.g. ``query parameter limit``) as a number in bounds."""
    value = parse_digits(raw, low=low, high=high)
    if value is None:
        raise ProblemError(bad_request(f"{what} must be an integer from {low} to {high}"))
    return value


def bad_continue() -> ProblemError:
    """The 400 for a ``continue`` token this service did not hand out."""
    detail = "query parameter continue is not a token this list handed out (start without it)"
    return ProblemError(bad_request(detail))
