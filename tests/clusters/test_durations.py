"""The simulated duration annotation: Go-style durations, positive, at most ten years."""

from __future__ import annotations

import pytest

from fleet.clusters.sim import MAX_DURATION, parse_duration
from fleet.manifests.models import parse_duration as check_duration

VALID = [
    ("90s", 90.0),
    ("5m", 300.0),
    ("2h", 7200.0),
    ("1h30m", 5400.0),
    ("1.5h", 5400.0),
    ("500ms", 0.5),
    ("0.25s", 0.25),
    ("1m30s", 90.0),
    ("1h1m1s1ms", 3661.001),
    ("30m1h", 5400.0),  # any order, as in Go
    ("1s1s", 2.0),  # a unit may repeat, as in Go
    ("007s", 7.0),
    ("0s1ms", 0.001),
    ("87600h", MAX_DURATION),  # ten years of 365 days: the longest
]

INVALID = [
    # (text, what the message says)
    ("", "is not a duration"),
    ("abc", "is not a duration"),
    ("90", "is not a duration"),  # a unit is required
    ("5 m", "is not a duration"),
    (" 5m", "is not a duration"),
    ("5m ", "is not a duration"),
    ("5M", "is not a duration"),
    ("5d", "is not a duration"),  # Go has no days
    ("1.h", "is not a duration"),
    (".5h", "is not a duration"),
    ("1e3s", "is not a duration"),
    ("+5m", "is not a duration"),
    ("1h-30m", "is not a duration"),
    ("inf", "is not a duration"),
    ("nan", "is not a duration"),
    ("٣s", "is not a duration"),  # an Arabic-Indic digit
    ("-5m", "is negative"),
    ("-1h30m", "is negative"),
    ("0s", "is zero"),
    ("0h0m0.0s", "is zero"),
    ("87600h1ms", "longer than ten years"),
    ("100000h", "longer than ten years"),
    ("9" * 400 + "h", "longer than ten years"),  # overflows a float to infinity
]


@pytest.mark.parametrize(("text", "seconds"), VALID)
def test_a_duration_is_its_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12)


@pytest.mark.parametrize(("text", "message"), INVALID, ids=[t[:20] for t, _ in INVALID])
def test_anything_else_is_refused_quoting_the_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        parse_duration(text)
    assert str(caught.value).startswith('"' + text[:60])


def test_a_long_text_is_quoted_cut_short() -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration("x" * 10_000)
    quoted = '"' + "x" * 60 + '…"'
    assert str(caught.value) == f"{quoted} is not a duration (examples: 90s, 5m, 1h30m, 1.5h)"


@pytest.mark.parametrize("text", [t for t, _ in VALID] + [t for t, _ in INVALID if t.isascii()])
def test_the_simulator_takes_what_fleet_check_takes(text: str) -> None:
    """What ``fleet check`` accepts as a positive duration runs, for as long, up to ten years.

    (``fleet check`` also reads digits of other scripts; Go and the simulator do not.)
    """
    try:
        checked = check_duration(text)
    except ValueError:
        with pytest.raises(ValueError):
            parse_duration(text)
        return
    if 0 < checked <= MAX_DURATION:
        assert parse_duration(text) == checked
    else:
        with pytest.raises(ValueError):
            parse_duration(text)
