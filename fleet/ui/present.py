"""What the dashboard's templates show, computed from the API's JSON: bars, colours, codes,
job shades, lent cells, the summary, charts over time, durations.

Theory of operation: pure functions of the answers of the public HTTP API.
Quantities arrive as Kubernetes quantity strings and are read here into
numbers only to draw bars (the API stays the authority on amounts; the text
beside every bar is the API's own string).  A virtual cluster (a leaf queue)
gets one of :data:`PALETTE_SIZE` colour classes from a stable digest of its
name, so a queue keeps its colour on every page, on every run and under any
``PYTHONHASHSEED`` (:func:`vc_classes` keeps the queues of one set apart,
the same set giving the same colours), and a short code read from its name
(:func:`vc_codes`, its words' initials) so colour is never the only signal.
On a cell map a queue's jobs take shades in turn (:func:`map_jobs`), and a
virtual cluster's guarantee that other queues' jobs hold is counted as lent
(:func:`lent`).  :func:`chart` turns one series of ``GET /api/v1/history``
into the geometry of an inline SVG line chart (paths, ticks, legend), so the
pages draw charts without script or library.  Table durations are written
as the shared column vocabulary writes them (:func:`compact`: ``1h5m``).
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from fleet.service import columns

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
_WORDS: Final = re.compile(r"[-_./]+")
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
    """A short code per queue for the cell map's text, read from its name: the initials of
    its words (``team-a`` TA, ``sandbox`` S, ``big-memory`` BM; at most three), so the
    code reminds of the queue.  Names with the same initials are told apart by a number
    in name order (``team-alpha`` TA, ``team-apple`` TA2)."""
    codes: dict[str, str] = {}
    seen: dict[str, int] = {}
    for name in sorted(set(names)):
        words = [w for w in _WORDS.split(name) if w][:3] or [name or "?"]
        initials = "".join(w[0] for w in words).upper()
        seen[initials] = seen.get(initials, 0) + 1
        codes[name] = initials if seen[initials] == 1 else f"{initials}{seen[initials]}"
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


def compact(seconds: float | None) -> str:
    """A duration as the tables write it (:func:`fleet.service.columns.duration`:
    ``1h5m``, ``12m``, ``40s``, ``2d3h``; "-": none)."""
    return "-" if seconds is None else columns.duration(seconds)


def start(estimate: Mapping[str, Any] | None, now: datetime.datetime) -> str:
    """The START cell of an API ``estimatedStart`` (:func:`fleet.service.columns.start_in`:
    ``in 10-25m``, ``now``, "-"), never a time in the past."""
    if not isinstance(estimate, Mapping):
        return "-"
    earliest = parse_time(estimate.get("earliest")) or parse_time(estimate.get("time"))
    latest = parse_time(estimate.get("latest"))
    return columns.start_in(
        None if earliest is None else earliest.timestamp(),
        None if latest is None else latest.timestamp(),
        now.timestamp(),
    )


def age(since: str | None, now: datetime.datetime) -> str:
    """How long ago RFC 3339 time ``since`` was, as a table writes it (``5m``; "-": unknown)."""
    start = parse_time(since)
    return "-" if start is None else compact((now - start).total_seconds())


# The cell map -----------------------------------------------------------------------------

#: Shades ``shade-0`` .. ``shade-5`` in fleet.css that tell a queue's jobs apart on a map.
SHADES: Final = 6


@dataclass(frozen=True, slots=True)
class MapJob:
    """A job on one page of a cell map: its queue, shade and GPUs there."""

    job: str
    queue: str
    shade: int
    gpus: int


def map_jobs(nodes: Sequence[Mapping[str, Any]]) -> dict[str, MapJob]:
    """Job -> :class:`MapJob`, in the order the jobs first appear on the map (node by node,
    GPU by GPU); each queue's jobs take the shades in turn, so the jobs of one queue that
    sit side by side never look alike (a seventh one repeats the first one's shade)."""
    found: dict[str, MapJob] = {}
    per_queue: dict[str, int] = {}
    for node in nodes:
        for cell in node.get("cells", ()):
            job, queue = cell.get("job"), cell.get("queue") or ""
            if not job:
                continue
            if job in found:
                known = found[job]
                found[job] = MapJob(job, known.queue, known.shade, known.gpus + 1)
                continue
            shade = per_queue.get(queue, 0)
            per_queue[queue] = shade + 1
            found[job] = MapJob(job, queue, shade % SHADES, 1)
    return found


@dataclass(frozen=True, slots=True)
class Lent:
    """A virtual cluster's guaranteed GPUs that other queues use now."""

    gpus: int
    #: the queues that use them (those holding borrowed or opportunistic cells there)
    to: tuple[str, ...]


def lent(summary: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> dict[str, Lent]:
    """Per virtual cluster of a member (``GET /api/v1/clusters`` item), its guaranteed GPUs
    that other queues' jobs hold: the GPUs its queue leaves free in its guarantee beyond
    the member's free GPUs, shared out in the member's order of virtual clusters.

    Without it a page says "0 free" of the member beside "8 free of 8 guaranteed"
    of a virtual cluster: both true, the eight being lent.
    """
    vcs = summary.get("virtualClusters") or []
    free = int((summary.get("gpus") or {}).get("free", 0))
    unused = sum(int(vc["gpus"]["free"]) for vc in vcs)
    left = max(0, unused - free)
    borrowers: dict[str, int] = {}
    for node in nodes:
        for cell in node.get("cells", ()):
            if cell.get("job") and cell.get("mode") in ("borrowed", "opportunistic"):
                queue = str(cell.get("queue") or "")
                borrowers[queue] = borrowers.get(queue, 0) + 1
    out: dict[str, Lent] = {}
    for vc in vcs:
        share = min(int(vc["gpus"]["free"]), left)
        left -= share
        if share:
            to = tuple(sorted(q for q in borrowers if q != vc["name"]))
            out[vc["name"]] = Lent(share, to)
    return out


# The summary header ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Summary:
    """The fleet in one line: GPUs, jobs and the recent p95 wait."""

    gpus_used: int
    gpus_free: int
    gpus_total: int
    running: int
    pending: int
    #: the p95 admission wait of the last hour, written as a duration ("-": none)
    wait_p95: str


def summary(
    clusters: Sequence[Mapping[str, Any]],
    queues: Sequence[Mapping[str, Any]],
    wait: Mapping[str, Any] | None,
) -> Summary:
    """From ``GET /api/v1/clusters``' items, ``GET /api/v1/queues``' items and the last
    point of ``GET /api/v1/history?series=wait`` (None: no sample yet)."""
    leaves = [q for q in queues if q.get("leaf")]
    p95 = None if wait is None else wait.get("fleet")
    return Summary(
        gpus_used=sum(int(c["gpus"]["used"]) for c in clusters),
        gpus_free=sum(int(c["gpus"]["free"]) for c in clusters),
        gpus_total=sum(int(c["gpus"]["total"]) for c in clusters),
        running=sum(int(q.get("admitted", 0)) for q in leaves),
        pending=sum(int(q.get("pending", 0)) for q in leaves),
        wait_p95=compact(p95) if isinstance(p95, int | float) else "-",
    )


# Charts over time ----------------------------------------------------------------------------

#: The charts' windows (``?window=`` of the overview) and their seconds.
WINDOWS: Final = {"1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600, "7d": 7 * 24 * 3600}
#: Samples drawn per line at most (more are merged, each merged point the largest).
MAX_POINTS: Final = 480
#: Lines a chart draws at most: the busiest queues, the others as one line.
MAX_LINES: Final = PALETTE_SIZE
#: Dash patterns ``dash-0`` .. ``dash-3`` in fleet.css: lines that lie on each other
#: still show both.
DASHES: Final = 4
_X_STEPS: Final = (300, 600, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400)
_WAIT_STEPS: Final = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 4 * 3600, 12 * 3600)


@dataclass(frozen=True, slots=True)
class Tick:
    """A tick of an axis: where it is (SVG units) and what it says."""

    at: float
    label: str


@dataclass(frozen=True, slots=True)
class Line:
    """One series of a chart: a queue's, or the whole fleet's (``fleet``)."""

    name: str
    #: colour class (a queue's ``vc-N``; ``fleet`` for the whole fleet)
    cls: str
    dash: int
    #: SVG path data, broken where samples are missing
    path: str
    #: the last value, written out
    last: str
    fleet: bool = False


@dataclass(frozen=True, slots=True)
class Chart:
    """A line chart drawn on the server as inline SVG (no script, no library)."""

    id: str
    title: str
    lines: tuple[Line, ...]
    xticks: tuple[Tick, ...]
    yticks: tuple[Tick, ...]
    empty: bool
    width: int = 960
    height: int = 210
    left: int = 56
    right: int = 948
    top: int = 10
    bottom: int = 182


def _nice_step(top: float, *, wait: bool) -> float:
    if wait:
        return next((s for s in _WAIT_STEPS if top / s <= 5), 86400.0)
    magnitude = 10 ** max(0, len(str(int(top))) - 1)
    for m in (1, 2, 5, 10):
        if top / (m * magnitude) <= 5:
            return float(m * magnitude)
    return float(10 * magnitude)


def _time_label(t: float, window: float) -> str:
    moment = datetime.datetime.fromtimestamp(t, datetime.UTC)
    if window > 86400:
        return (
            moment.strftime("%b %d %H:%M")
            if moment.hour or moment.minute
            else moment.strftime("%b %d")
        )
    return moment.strftime("%H:%M")


def chart(
    chart_id: str,
    title: str,
    history: Mapping[str, Any],
    colours: Mapping[str, str],
    *,
    now: datetime.datetime,
    window: float,
    fleet_line: bool = False,
) -> Chart:
    """The chart of one ``GET /api/v1/history`` answer over the ``window`` seconds before
    ``now``: a line per queue (coloured as the queue is everywhere, ``colours``) and, with
    ``fleet_line``, one for the whole fleet; time on the x axis (UTC), the series' unit on
    the y axis (a wait written as a duration).  Of more than :data:`MAX_LINES` queues the
    busiest (by their peak in the window) get a line and the others one between them
    (their sum; for a wait, their largest)."""
    geometry = Chart(chart_id, title, (), (), (), True)
    wait = history.get("series") == "wait"
    end = now.timestamp()
    start = end - window
    interval = float(history.get("interval") or 60.0) or 60.0
    points = [
        (t.timestamp(), p)
        for p in history.get("points", ())
        if (t := parse_time(p.get("time"))) is not None and start <= t.timestamp() <= end
    ]
    stride = max(1, -(-len(points) // MAX_POINTS))
    queues = list(history.get("queues", ()))
    series: dict[str, list[tuple[float, float | None]]] = {q: [] for q in queues}
    series[""] = []
    for i in range(0, len(points), stride):
        chunk = points[i : i + stride]
        at = chunk[-1][0]
        for q in queues:
            vals = [v for _, p in chunk if (v := p["queues"].get(q)) is not None]
            series[q].append((at, max(vals) if vals else None))
        vals = [v for _, p in chunk if (v := p.get("fleet")) is not None]
        series[""].append((at, max(vals) if vals else None))
    if len(queues) > MAX_LINES:  # the busiest get a line, the others one between them
        peak = {q: max((v or 0.0 for _, v in series[q]), default=0.0) for q in queues}
        busiest = sorted(queues, key=lambda q: (-peak[q], q))[: MAX_LINES - 1]
        rest = [q for q in queues if q not in busiest]
        fold = max if wait else sum
        other = f"{len(rest)} other queues"
        series[other] = [
            (
                at,
                fold(found)
                if (found := [v for q in rest if (v := series[q][i][1]) is not None])
                else None,
            )
            for i, (at, _) in enumerate(series[""])
        ]
        queues = [*sorted(busiest), other]
    shown = [*queues, *([""] if fleet_line else [])]
    top_value = max((v for q in shown for _, v in series[q] if v is not None), default=0.0)
    step = _nice_step(max(top_value, 1.0), wait=wait)
    y_max = step * max(1, -(-max(top_value, 1.0) // step))
    plot_w = geometry.right - geometry.left
    plot_h = geometry.bottom - geometry.top

    def x(t: float) -> float:
        return round(geometry.left + (t - start) / window * plot_w, 1)

    def y(v: float) -> float:
        return round(geometry.bottom - v / y_max * plot_h, 1)

    def text(v: float | None) -> str:
        if v is None:
            return "-"
        return compact(v) if wait else f"{v:g}"

    lines = []
    # A line breaks where samples are missing: a step over three times the usual one
    # (the median step drawn, as the interval may have changed over the window).
    times = [at for at, _ in series[""]]
    steps = sorted(b - a for a, b in itertools.pairwise(times))
    usual = steps[len(steps) // 2] if steps else interval * stride
    gap = 3 * max(usual, interval)
    for i, q in enumerate(shown):
        parts: list[str] = []
        before: float | None = None
        for at, v in series[q]:
            if v is None:
                before = None
                continue
            command = "L" if before is not None and at - before <= gap else "M"
            parts.append(f"{command}{x(at)} {y(v)}")
            before = at
        last = next((v for _, v in reversed(series[q]) if v is not None), None)
        lines.append(
            Line(
                name=q or "all queues",
                cls=colours.get(q, "vc-free") if q else "fleet",
                dash=i % DASHES,
                path=" ".join(parts),
                last=text(last),
                fleet=not q,
            )
        )
    x_step = next((s for s in _X_STEPS if window / s <= 8), 86400)
    first = (int(start) // x_step + 1) * x_step
    xticks = tuple(Tick(x(t), _time_label(t, window)) for t in range(first, int(end) + 1, x_step))
    count = int(y_max // step)
    yticks = tuple(Tick(y(k * step), text(k * step)) for k in range(count + 1))
    return Chart(chart_id, title, tuple(lines), xticks, yticks, not points)
