"""Whole numbers as clients write them: ASCII digits, a bounded length, within bounds.

Theory of operation: a number that arrives as text (a query parameter, a page
number, a ``continue`` token's or a cursor's count, a cell address) is read by
:func:`parse_digits` and nothing else.  ``str.isdigit()`` is true of every
Unicode digit (``²``, ``١٢``) that ``int()`` then refuses or reads as another
number, and ``int()`` accepts signs, spaces, underscores and a trailing
newline, and raises on more than 4,300 digits; so the text must be
:data:`MAX_DIGITS` ASCII digits at most, matched whole (``re.fullmatch``,
never ``$``), before ``int()`` sees it, and the value must lie within the
caller's bounds.  Anything else is None, for the caller to answer with an error
naming what it read (or, where that is the documented behaviour, a default).
Pure: the core, the YAML models, the store, the API and the dashboard all
use it.
"""

from __future__ import annotations

import re
from typing import Final

#: Digits a number may have: every value up to 10**18 - 1 fits a signed 64-bit column.
MAX_DIGITS: Final = 18
#: The largest value :func:`parse_digits` can return.
MAX_VALUE: Final = 10**MAX_DIGITS - 1

_DIGITS: Final = re.compile(f"[0-9]{{1,{MAX_DIGITS}}}")


def parse_digits(text: str, *, low: int = 0, high: int = MAX_VALUE) -> int | None:
    """The value of ``text`` if it is ASCII digits only, from ``low`` to ``high``; else None."""
    if len(text) > MAX_DIGITS or _DIGITS.fullmatch(text) is None:
        return None
    value = int(text)
    return value if low <= value <= high else None
