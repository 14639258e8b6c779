"""Figures in plain words: amounts with their units, counts, durations.

Theory of operation: a waiting job's reason and a job's events are read by
the people whose jobs they are, so they say figures the way those people
count them: GPUs, CPUs and GiB of memory, not ``nvidia.com/gpu 45/48`` or
``cpu 4000m``.  Every text built in the core for a person takes its figures
from here, so one resource is worded one way everywhere:

* :func:`amount` words an amount of a resource with its unit (``8 GPUs``,
  ``1 GPU``, ``0.5 CPUs``, ``64 GiB memory``, ``3 jobs`` for
  ``kube-queue/max-jobs``, ``8 A100 GPUs`` for ``gpu.fleet.io/A100``; any
  other resource as ``<quantity> <name>``);
* :func:`figure` words the same amount as a bare figure, for a sentence that
  named the unit just before (``this job needs 8``; byte resources keep
  ``GiB``: ``this job needs 32 GiB``);
* :func:`used_of` words a usage against its limit (``45 of 48 GPUs``);
* :func:`count` words a count of things (``1 pod``, ``4 pods``);
* :func:`duration` words seconds as a person reads them (``45s``, ``5m``,
  ``1h5m``, ``2d3h``).

The words are a pure function of the figures (no clock, no locale), so the
core stays deterministic: the same figures give the same text, which is what
the kept texts of :mod:`fleet.core.reason_texts` rely on.
"""

from __future__ import annotations

from typing import Final

from fleet.core.resources import (
    CPU,
    GPU,
    MAX_JOBS,
    TYPED_GPU_PREFIX,
    format_quantity,
    is_byte_resource,
)

_GIB: Final = 2**30


def _decimal(numerator: int, denominator: int) -> str:
    """``numerator / denominator`` with at most two decimals, trailing zeros dropped."""
    if numerator % denominator == 0:
        return str(numerator // denominator)
    hundredths = (numerator * 100 + denominator // 2) // denominator
    whole, part = divmod(hundredths, 100)
    text = f"{whole}.{part:02d}".rstrip("0").rstrip(".")
    return text if text != "0" else "<0.01"


def _unit(resource: str, one: bool) -> str:
    """The noun of ``resource``'s amounts (singular when ``one``)."""
    if resource == GPU:
        return "GPU" if one else "GPUs"
    if resource == CPU:
        return "CPU" if one else "CPUs"
    if resource == MAX_JOBS:
        return "job" if one else "jobs"
    if resource.startswith(TYPED_GPU_PREFIX):
        sku = resource[len(TYPED_GPU_PREFIX) :]
        return sku + (" GPU" if one else " GPUs")
    if is_byte_resource(resource):
        return "GiB " + resource
    return resource


def figure(resource: str, amount: int) -> str:
    """``amount`` of ``resource`` as a bare figure (byte resources with ``GiB``)."""
    if resource == GPU:  # (the common case first: reasons are worded in the cycle)
        return str(amount)
    if resource == CPU:
        return _decimal(amount, 1000)
    if is_byte_resource(resource):
        return _decimal(amount, _GIB) + " GiB"
    if resource in (GPU, MAX_JOBS) or resource.startswith(TYPED_GPU_PREFIX):
        return str(amount)
    return format_quantity(resource, amount)


def amount(resource: str, value: int) -> str:
    """``value`` of ``resource`` with its unit: ``8 GPUs``, ``64 GiB memory``."""
    if is_byte_resource(resource):
        return _decimal(value, _GIB) + " " + _unit(resource, False)
    one = (value == 1000) if resource == CPU else (value == 1)
    return figure(resource, value) + " " + _unit(resource, one)


def used_of(resource: str, used: int, limit: int) -> str:
    """``used`` against ``limit`` of ``resource``: ``45 of 48 GPUs``."""
    if resource == GPU:
        return f"{used} of {limit} GPU" if limit == 1 else f"{used} of {limit} GPUs"
    if is_byte_resource(resource):
        return _decimal(used, _GIB) + " of " + amount(resource, limit)
    return figure(resource, used) + " of " + amount(resource, limit)


def count(n: int, noun: str) -> str:
    """``n`` things: ``1 pod``, ``4 pods``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def duration(seconds: float) -> str:
    """``seconds`` as a person reads a duration: ``45s``, ``5m``, ``1h5m``, ``2d3h``
    (rounded down to the unit shown; negative as 0s)."""
    s = int(seconds) if seconds > 0 else 0
    if s < 60:
        return f"{s}s"
    minutes, secs = divmod(s, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s" if secs and minutes < 10 else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"
