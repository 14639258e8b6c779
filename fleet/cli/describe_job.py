"""``fleet describe job``: one job as a person reads it.

Theory of operation: :func:`render` turns the API's job detail
(``GET /api/v1/jobs/{namespace}/{name}``, camelCase JSON) and the time now
into text; it asks nothing of the server and reads no clock, so a test
gives it a fixed ``now``.  What it shows, top to bottom: who and where the
job is; its state with how long it has been in it; what it requests in all
and per pod set in GPUs, CPUs and GiB of memory
(:mod:`fleet.core.wording`); when it was submitted and started and how long
it has run (durations such as ``1h5m``; ages such as ``5m ago``, never an
absolute time with microseconds); the waiting reason as the server words it;
the estimated start; placement; preemptions; and the events, each with its
age.

The estimated start is worded from the API's ``estimatedStart``: from its
``earliest`` and ``latest`` when present (``in 10-25m (between 14:05 and
14:20 UTC; ...)``), else from its ``time``.  A start at or before now is
never shown as a future one: the job is then said to start "any moment now
(the estimate is overdue)", as it is when the estimate says ``overdue``.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Final

from fleet.core import wording
from fleet.core.resources import CPU, GPU, MAX_JOBS, MEMORY, QuantityError, parse_quantity
from fleet.service.columns import table

#: The width of the label column.
LABEL: Final = 16
#: Resources shown first, in this order; then the others by name.
_FIRST: Final = (GPU, CPU, MEMORY)
#: The job states in which a job waits.
_WAITING: Final = frozenset({"Queued", "Preempted"})


def _moment(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (None: absent or unreadable)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def ago(then: float | None, now: float) -> str:
    """``5m ago`` (``just now`` under a second, or for a time ahead of ``now``)."""
    if then is None:
        return "-"
    if now - then < 1:
        return "just now"
    return f"{wording.duration(now - then)} ago"


def clock_time(moment: float, now: float) -> str:
    """``14:05 UTC``; with the day when it is not ``now``'s (``Nov 29 14:05 UTC``)."""
    at = datetime.datetime.fromtimestamp(moment, tz=datetime.UTC)
    today = datetime.datetime.fromtimestamp(now, tz=datetime.UTC).date()
    return at.strftime("%H:%M UTC" if at.date() == today else "%b %d %H:%M UTC")


def amounts(values: Mapping[str, Any]) -> str:
    """A request in words: ``16 GPUs, 64 CPUs, 256 GiB memory`` (``-``: nothing)."""
    names = [r for r in _FIRST if r in values]
    names += sorted(r for r in values if r not in _FIRST and r != MAX_JOBS)
    out: list[str] = []
    for r in names:
        try:
            out.append(wording.amount(r, parse_quantity(r, values[r])))
        except QuantityError:
            out.append(f"{values[r]} {r}")
    return ", ".join(out) or "-"


def _span(lo: float, hi: float) -> str:
    """``10-25m``, ``45m-1h5m``, or one duration when both read the same."""
    a, b = wording.duration(lo), wording.duration(hi)
    if a == b:
        return a
    if a.endswith("m") and b.endswith("m") and a[:-1].isdigit() and b[:-1].isdigit():
        return f"{a[:-1]}-{b}"
    return f"{a}-{b}"


def estimate(found: Mapping[str, Any], now: float) -> str:
    """The estimated start in words; never a time at or before ``now`` as a future one."""
    assumes = str(found.get("assumes") or "")
    if found.get("declared"):
        assumes = "the jobs' declared run times" + (f"; {assumes}" if assumes else "")
    notes = [f"assumes {assumes}"] if assumes else []
    computed = _moment(found.get("computedAt"))
    if computed is not None:
        notes.append(f"computed {ago(computed, now)}")
    at = _moment(found.get("time"))
    earliest = _moment(found.get("earliest"))
    latest = _moment(found.get("latest"))
    if earliest is None or latest is None:
        earliest = latest = at
    if latest is None or earliest is None:
        return "not within the forecast's reach" + (f" ({'; '.join(notes)})" if notes else "")
    if found.get("overdue") or latest <= now:
        return "any moment now (the estimate is overdue" + "".join(f"; {n}" for n in notes) + ")"
    if earliest <= now:
        when = f"by {clock_time(latest, now)}"
        return f"within {wording.duration(latest - now)} ({'; '.join([when, *notes])})"
    if earliest == latest:
        when = f"at {clock_time(earliest, now)}"
        return f"in {wording.duration(earliest - now)} ({'; '.join([when, *notes])})"
    start, end = clock_time(earliest, now), clock_time(latest, now)
    between = f"between {start.removesuffix(' UTC')} and {end}"
    return f"in {_span(earliest - now, latest - now)} ({'; '.join([between, *notes])})"


def _state(job: Mapping[str, Any], now: float) -> str:
    state = str(job.get("state") or "-")
    if state == "Running":
        since = _moment(job.get("lastStartedAt"))
        return state if since is None else f"{state} for {wording.duration(now - since)}"
    return state


def _line(label: str, value: object) -> str:
    """``Label:`` padded to the label column (one space at least), then the value."""
    shown = "-" if value is None or value == "" else value
    return f"{label + ':':{max(LABEL, len(label) + 2)}}{shown}"


def _indented(text: str) -> str:
    return "  " + text.replace("\n", "\n  ")


def render(job: Mapping[str, Any], now: float) -> str:
    """``job`` (the API's job detail) as ``fleet describe job`` prints it at ``now``."""
    preemptible = "preemptible" if job.get("preemptible", True) else "not preemptible"
    gang = int(job.get("gangMinimum") or 0)
    lines = [
        _line("Name", job.get("name")),
        _line("Namespace", job.get("namespace")),
        _line("Kind", job.get("kind")),
        _line("API version", job.get("apiVersion")),
        _line("UID", job.get("uid")),
        _line("Queue", job.get("queue")),
        _line("User", job.get("user")),
        _line("State", _state(job, now)),
        _line("Priority class", job.get("priorityClass")),
        _line("Priority", f"{job.get('priority')} ({preemptible})"),
        _line("Requests", f"{amounts(job.get('request') or {})} in all"),
        _line(
            "Gang minimum",
            f"{wording.count(gang, 'pod')} must start together"
            if gang > 1
            else f"{wording.count(gang, 'pod')} (its pods may start one at a time)",
        ),
    ]
    types = job.get("gpuTypes") or []
    if types or job.get("gpuType"):
        asked = ", ".join(types) or "any"
        if job.get("gpuTerms"):
            asked += f" ({job['gpuTerms']})"
        used = f"; runs on {job['gpuType']}" if job.get("gpuType") else ""
        lines.append(_line("GPU types", asked + used))
    lines.append(_line("Submitted", ago(_moment(job.get("submittedAt")), now)))
    first = _moment(job.get("firstStartedAt"))
    last = _moment(job.get("lastStartedAt"))
    started = "never" if last is None else ago(last, now)
    if first is not None and last is not None and first != last:
        started += f" (first start {ago(first, now)})"
    lines.append(_line("Started", started))
    lines.append(_line("Run time", wording.duration(float(job.get("runTimeSeconds") or 0.0))))
    if job.get("policy"):
        policy = job["policy"]
        where = "stored" if policy.get("source") == "stored" else "in the submission"
        lines.append(_line("Policy", f"{policy.get('name')} ({where})"))
    if job.get("suspended"):
        lines.append(_line("Suspended", "paused by its PropagationPolicy (suspension.dispatching)"))
    if job.get("state") in _WAITING or job.get("reason"):
        label = "Waiting reason" if job.get("state") in _WAITING else "Reason"
        lines.append(_line(label, job.get("reason") or "not looked at yet"))
    if job.get("unschedulable"):
        lines.append(_line("Unschedulable", job["unschedulable"]))
    found = job.get("estimatedStart")
    if job.get("state") in _WAITING:
        lines.append(_line("Estimated start", estimate(found, now) if found else "no estimate yet"))
    if job.get("cluster"):
        mode = f" ({job['mode']})" if job.get("mode") else ""
        lines.append(_line("Cluster", f"{job['cluster']}{mode}"))
    lines.append("Pod sets:")
    sets = [
        (
            s.get("role"),
            s.get("count"),
            "-" if s.get("minimum") is None else s["minimum"],
            s.get("placed", 0),
            amounts(s.get("perPod") or {}),
            amounts(s.get("total") or {}),
        )
        for s in job.get("podSets", [])
    ]
    lines.append(_indented(table(("ROLE", "PODS", "MIN", "PLACED", "PER-POD", "IN-ALL"), sets)))
    placement = [
        (p["replica"], p["node"], ",".join(map(str, p["gpus"])) or "-")
        for p in job.get("placement", [])
    ]
    lines.append("Placement:")
    lines.append(_indented(table(("REPLICA", "NODE", "GPUS"), placement)))
    preemptions = [
        (
            ago(_moment(p.get("time")), now),
            p.get("reason"),
            p.get("preemptor") or "-",
            " > ".join(p.get("quotaPath") or []) or "-",
        )
        for p in job.get("preemptions", [])
    ]
    if preemptions:
        lines.append("Preemptions:")
        heads = ("AGE", "CAUSE", "PREEMPTOR", "QUOTA PATH")
        lines.append(_indented(table(heads, preemptions)))
    events = [
        (ago(_moment(e.get("time")), now), e.get("type"), e.get("reason"), e.get("message") or "-")
        for e in job.get("events", [])
    ]
    lines.append("Events:")
    lines.append(_indented(table(("AGE", "TYPE", "REASON", "MESSAGE"), events)))
    return "\n".join(lines)
