"""A trace's offered load against its clusters, and the trace rescaled to another load.

Theory of operation: the *offered load* of a trace on clusters of ``G`` GPUs
is the GPU-seconds its jobs ask for (each job's GPUs times its run time)
over the GPU-seconds the clusters offer while the jobs arrive::

    offered load = sum(gpus_j * duration_j) / (G * (last submission - first submission))

1.0 means the jobs, run back to back, would keep every GPU busy for exactly
the span over which they arrive; below it there is idle capacity on
average, above it the backlog grows however well the jobs are placed.  The
figure ignores what no placement can remove (a gang that fits no node, a
queue's ``max``) and the drain after the last submission, so a replay's GPU
utilisation is below it even when nothing waits.

:func:`scaled` replays the same jobs at another load ``F``: it keeps every
job's run time, gang and order, and multiplies each job's submission time,
counted from the first submission, by ``offered / F`` (so the span over
which the jobs arrive shrinks or grows and the offered load becomes ``F``).
Scaled times are rounded to the millisecond (times in a replay's files have
three decimals); rounding never reorders jobs, since it is monotonic and the
list keeps its order.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import NamedTuple

from fleet.sim.traces import TraceError, TraceJob


class Load(NamedTuple):
    """What :func:`scaled` did: the offered loads and arrival spans before and after."""

    before: float
    after: float
    span_before: float
    span_after: float


def gpu_seconds(jobs: Sequence[TraceJob]) -> float:
    """The GPU-seconds the jobs ask for (GPUs times run time, summed)."""
    return math.fsum(j.total_gpus * j.duration for j in jobs)


def span(jobs: Sequence[TraceJob]) -> float:
    """Seconds from the first submission to the last (jobs sorted by submission)."""
    return jobs[-1].submit - jobs[0].submit if jobs else 0.0


def ratio(demand: float, gpus: int, arrivals: float) -> float | None:
    """The offered load of ``demand`` GPU-seconds arriving over ``arrivals`` seconds on ``gpus``.

    None when it has no value (no GPUs, or no span).
    """
    return demand / (gpus * arrivals) if gpus > 0 and arrivals > 0 else None


def offered(jobs: Sequence[TraceJob], gpus: int) -> float:
    """The offered load of ``jobs`` on ``gpus`` GPUs (module docstring).

    Raises :class:`~fleet.sim.traces.TraceError` when it has no value: no
    GPUs, or no span (every job submitted at one moment, or no job).
    """
    if gpus <= 0:
        raise TraceError("the clusters have no GPUs: a trace's load on them has no value")
    arrivals = span(jobs)
    if arrivals <= 0:
        raise TraceError(
            "the trace's jobs are all submitted at one moment: its load (GPU-seconds over "
            "GPUs x submission span) has no value and cannot be scaled"
        )
    value = ratio(gpu_seconds(jobs), gpus, arrivals)
    assert value is not None
    return value


def scaled(jobs: Sequence[TraceJob], gpus: int, target: float) -> tuple[list[TraceJob], Load]:
    """``jobs`` with submission times stretched so their offered load is ``target``.

    Raises :class:`~fleet.sim.traces.TraceError` when the load has no value
    (:func:`offered`) or asks nothing (no job asks for GPU time).
    """
    if not (math.isfinite(target) and target > 0):
        raise TraceError(f"load {target!r} is not a positive number")
    before = offered(jobs, gpus)
    if before <= 0:
        raise TraceError("the trace's jobs ask for no GPU time: its load cannot be scaled")
    factor = before / target
    first = jobs[0].submit
    out = [
        dataclasses.replace(j, submit=first + round((j.submit - first) * factor, 3)) for j in jobs
    ]
    return out, Load(before, offered(out, gpus), span(jobs), span(out))
