"""What the dashboard's templates show, computed from the API's JSON: bars, colours, durations.

Theory of operation: pure functions of the answers of the public HTTP API.
Quantities arrive as Kubernetes quantity strings and are read here into
numbers only to draw bars (the API stays the authority on amounts; the text
beside every bar is the API's own string).  A virtual cluster (a leaf queue)
gets one of :data:`PALETTE_SIZE` colour classes from a stable digest of its
name, so a queue keeps its colour on every page, on every run and under any
``PYTHONHASHSEED``, and a short letter code so colour is never the only signal.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

#: Colour classes ``vc-0`` .. ``vc-11`` in fleet.css.
PALETTE_SIZE: Final = 12
_SUFFIXES: Final[dict[str, int | Decimal]] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY: Final = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)$")
#: Resources shown first, in this order; others follow by name.
FIRST_RESOURCES: Final = ("nvidia.com/gpu", "cpu", "memory", "kube-queue/max-jobs")


def quantity(text: str | None) -> float | None:
    """A Kubernetes quantity string as a number (None when absent or unreadable)."""
    if text is None:
        return None
    match = _QUANTITY.match(str(text).strip())
    if match is None or match[2] not in ("", *_SUFFIXES):
        return None
    try:
        value = Decimal(match[1]) * _SUFFIXES.get(match[2], 1)
    except InvalidOperation:
        return None
    return float(value)


def vc_class(name: str | None) -> str:
    """The colour class of virtual cluster (leaf queue) ``name``; ``vc-free`` for none."""
    if not name:
        return "vc-free"
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return f"vc-{digest[0] % PALETTE_SIZE}"


def vc_classes(names: Iterable[str]) -> dict[str, str]:
    """A colour class per queue of one view, distinct while there are enough colours.

    Each queue keeps its own class (:func:`vc_class`) unless a queue before it
    (by name) has it already; it then takes the next class nobody on the view has.
    """
    taken: set[str] = set()
    out: dict[str, str] = {}
    for name in sorted(set(names)):
        cls = vc_class(name)
        if cls in taken and len(taken) < PALETTE_SIZE:
            start = int(cls.removeprefix("vc-"))
            cls = next(
                c
                for i in range(PALETTE_SIZE)
                if (c := f"vc-{(start + i) % PALETTE_SIZE}") not in taken
            )
        taken.add(cls)
        out[name] = cls
    return out


def vc_codes(names: Iterable[str]) -> dict[str, str]:
    """A short code per queue for the cell map's text: A, B, ... Z, then A1, B1, ..."""
    codes: dict[str, str] = {}
    for i, name in enumerate(sorted(set(names))):
        letter = chr(ord("A") + i % 26)
        codes[name] = letter if i < 26 else f"{letter}{i // 26}"
    return codes


def resources(*maps: Mapping[str, str] | None) -> list[str]:
    """Resource names of ``maps``, the common ones first."""
    names = {r for m in maps if m for r in m}
    first = [r for r in FIRST_RESOURCES if r in names]
    return first + sorted(names - set(first))


@dataclass(frozen=True, slots=True)
class Bar:
    """One resource of a quota node, scaled to 0..100 for an SVG bar."""

    resource: str
    used: str
    borrowed: str
    min: str
    max: str  # "unlimited" when absent
    guaranteed_pct: float
    borrowed_pct: float
    min_pct: float | None
    over_max: bool
    #: Whether the bar has a scale (a max); without one only the figures are shown.
    limited: bool = True

    @property
    def label(self) -> str:
        text = f"{self.resource}: used {self.used} of max {self.max}, min {self.min}"
        if self.borrowed != "0":
            text += f", {self.borrowed} borrowed"
        if self.over_max:
            text += " (over max)"
        return text


def bars(node: Mapping[str, Any]) -> list[Bar]:
    """The bars of a quota node (``GET /api/v1/queues`` item)."""
    mins: Mapping[str, str] = node.get("min") or {}
    maxs: Mapping[str, str] = node.get("max") or {}
    used: Mapping[str, str] = node.get("used") or {}
    borrowed: Mapping[str, str] = node.get("borrowed") or {}
    out = []
    for r in resources(mins, maxs, used):
        u = quantity(used.get(r, "0")) or 0.0
        b = quantity(borrowed.get(r, "0")) or 0.0
        lo = quantity(mins.get(r, "0")) or 0.0
        hi = quantity(maxs.get(r)) if r in maxs else None
        scale = max(hi if hi is not None else 0.0, lo, u if hi is not None else 0.0) or 1.0
        out.append(
            Bar(
                resource=r,
                used=used.get(r, "0"),
                borrowed=borrowed.get(r, "0"),
                min=mins.get(r, "0"),
                max=maxs.get(r, "unlimited"),
                guaranteed_pct=round(100 * max(0.0, u - b) / scale, 2),
                borrowed_pct=round(100 * b / scale, 2),
                min_pct=round(100 * lo / scale, 2) if lo else None,
                over_max=hi is not None and u > hi,
                limited=hi is not None,
            )
        )
    return out


def depths(nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Node name -> depth in the tree (root 0); parents come before their children."""
    found: dict[str, int] = {}
    for n in nodes:
        parent = n.get("parent")
        found[n["name"]] = 0 if parent is None else found.get(parent, 0) + 1
    return found


def parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def duration(seconds: float) -> str:
    """``3h 05m``, ``4m 10s``, ``12s``."""
    s = max(0, int(seconds))
    if s >= 86400:
        return f"{s // 86400}d {s % 86400 // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s}s"


def waited(since: str | None, now: datetime.datetime) -> str:
    """How long since RFC 3339 time ``since``; an empty string if unknown."""
    start = parse_time(since)
    return "" if start is None else duration((now - start).total_seconds())


def short_time(text: str | None) -> str:
    """An RFC 3339 time as ``YYYY-MM-DD HH:MM:SS`` UTC."""
    t = parse_time(text)
    return "" if t is None else t.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
