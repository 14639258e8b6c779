"""Seconds since the epoch as RFC 3339 UTC text, for the reasons the core writes.

Theory of operation: pure arithmetic (the days-to-civil-date conversion of
the proleptic Gregorian calendar), so the core needs no clock or date
library to say *when* something ends; it never reads the time itself.
"""

from __future__ import annotations


def utc(seconds: float) -> str:
    """``2026-11-23T01:05:00Z`` for a time in seconds since the epoch (whole seconds)."""
    total = int(seconds // 1)
    days, rest = divmod(total, 86_400)
    hour, rest = divmod(rest, 3_600)
    minute, second = divmod(rest, 60)
    # Civil date from days since 1970-01-01 (eras of 400 years, March-based years).
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    year = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    if month <= 2:
        year += 1
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"
