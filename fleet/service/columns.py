"""The column vocabulary every table of queues and jobs uses: headers, order and cell text.

Theory of operation: ``fleet get``, ``fleet plan`` and the dashboard show
the same columns under the same words, so they are fixed
here once, as constants and small pure functions (no I/O, no clock: the
caller passes ``now``).

**Queues.**  The narrow table (:data:`QUEUE_COLUMNS`) fits 100 columns and is
GPU-first: ``GPUS`` is ``used/min/max`` (:func:`gpu_triple`: ``12/16/32``,
``-`` for a max that does not limit), ``BORROWED`` the GPUs used above min
(``-`` for none), ``RUNNING`` the holding jobs, ``PENDING`` the waiting ones
and ``WAIT P95`` where the figure is known.  The GPUs an opportunistic job
holds are not charged to its queue's quota, but they are in use: ``GPUS``
counts them in ``used``, and the wide table marks the part that is
opportunistic (``12/16/32 +4 opp``: :func:`gpu_triple`'s ``opportunistic``).
The wide table (``-o wide``) adds :data:`QUEUE_WIDE_COLUMNS`: ``CPU`` and
``MEMORY`` (``used/min/max`` too), ``OTHER`` (every other resource that is not
internal, ``name=used/min/max``), ``MAX JOBS``, ``WEIGHT``, ``SHARE`` and
``PARENT``.  Internal resources (:func:`internal`: ``kube-queue/max-jobs`` and
every other ``kube-queue/`` name) are never shown in a cell; ``-o json|yaml``
or ``--show-internal`` show them.

**Jobs.**  The narrow table is :data:`JOB_COLUMNS` (``NAME`` is
``namespace/name``, or the bare name when one namespace is asked for;
``START`` the estimated start, :func:`start_in`); the wide one adds
:data:`JOB_WIDE_COLUMNS`.

**Durations and ages** are written as :func:`duration` writes them (``1h5m``,
``12m``, ``40s``, ``2d3h``: two units at most, never fractions of a second);
an age is a duration in a table (``describe job`` writes ``5m ago`` in prose).  An
estimated start is relative to now and never in the past: ``in 10-25m``
from a range, ``in 12m`` from one time, ``now`` when it is at or before now.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

#: The queue table (fits 100 columns).
QUEUE_COLUMNS: Final = ("QUEUE", "GPUS", "BORROWED", "RUNNING", "PENDING", "WAIT P95")
#: What ``-o wide`` adds to :data:`QUEUE_COLUMNS`.
QUEUE_WIDE_COLUMNS: Final = ("CPU", "MEMORY", "OTHER", "MAX JOBS", "WEIGHT", "SHARE", "PARENT")
#: The job table.
JOB_COLUMNS: Final = ("NAME", "QUEUE", "STATE", "GPUS", "CLUSTER", "AGE", "START")
#: What ``-o wide`` adds to :data:`JOB_COLUMNS`.
JOB_WIDE_COLUMNS: Final = ("REASON", "RUN TIME", "PRIORITY", "USER", "KIND")

GPU: Final = "nvidia.com/gpu"
CPU: Final = "cpu"
MEMORY: Final = "memory"
#: The resource that counts a queue's holding jobs (its ``runningJobs`` limit).
MAX_JOBS: Final = "kube-queue/max-jobs"
#: The prefix of resources that are bookkeeping, not something a job asks for.
INTERNAL_PREFIX: Final = "kube-queue/"
#: A cell with nothing to show.
NONE: Final = "-"


def internal(resource: str) -> bool:
    """Whether a resource is bookkeeping (``kube-queue/max-jobs``), hidden from tables."""
    return resource.startswith(INTERNAL_PREFIX)


def gpu_triple(used: int, minimum: int, maximum: int | None, opportunistic: int = 0) -> str:
    """``used/min/max`` (``12/16/32``; ``-`` for no max); with ``opportunistic`` GPUs
    (already counted in ``used``) marked ``+N opp``."""
    text = f"{used}/{minimum}/{NONE if maximum is None else maximum}"
    return f"{text} +{opportunistic} opp" if opportunistic else text


def triple(used: str | None, minimum: str | None, maximum: str | None) -> str:
    """``used/min/max`` of quantities (``0`` for nothing used or guaranteed, ``-`` for
    no max); ``-`` when the queue neither uses, guarantees nor limits the resource."""
    if used is None and minimum is None and maximum is None:
        return NONE
    return f"{used or 0}/{minimum or 0}/{NONE if maximum is None else maximum}"


def borrowed(gpus: int) -> str:
    """The ``BORROWED`` cell: GPUs above min, ``-`` for none."""
    return str(gpus) if gpus > 0 else NONE


def duration(seconds: float) -> str:
    """``2d3h``, ``1h5m``, ``12m``, ``40s``: the two largest units, whole ones only."""
    total = max(0, int(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"


def age(seconds: float) -> str:
    """An age in a table: a :func:`duration` (``5m``)."""
    return duration(seconds)


def _span(low: float, high: float) -> str:
    """``10-25m`` when both ends are whole units of one kind, else ``50m-1h30m``."""
    a, b = duration(low), duration(high)
    if a == b:
        return a
    unit = b[-1]
    if a[-1] == unit and a[:-1].isdigit() and b[:-1].isdigit():
        return f"{a[:-1]}-{b}"
    return f"{a}-{b}"


def start_in(earliest: float | None, latest: float | None, now: float) -> str:
    """The ``START`` cell of an estimate (Unix seconds): ``in 10-25m`` from a range,
    ``in 12m`` from one time (``latest`` None or equal), ``now`` at or before now,
    ``-`` without an estimate.  Never a time in the past."""
    if earliest is None:
        return NONE
    low = earliest - now
    high = low if latest is None else max(latest - now, low)
    if high <= 0:
        return "now"
    return f"in {_span(max(0.0, low), high)}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """kubectl-like aligned columns (``-`` for None), three spaces apart."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
