"""What a replay writes: per-job CSV, per-queue time series, ``summary.json``, tables and plots.

Theory of operation: everything here is computed from a
:class:`~fleet.sim.engine.Replay` alone, with explicit orders and fixed
formats, so the same replay always gives the same bytes (the wall-clock
fields ``wall_s`` and ``jobs_per_s`` of ``summary.json`` measure the run
itself and are the only exception).  The figures:

* Percentiles are nearest-rank (the smallest value with at least p% of the
  values at or below it).  Queueing delay is first start minus submission,
  in seconds of virtual time, over the jobs that started, overall, for the
  multi-GPU jobs (more than one GPU in all) and per queue; job completion
  time is end minus submission over the jobs that finished.
* Offered load is the GPU-seconds the jobs ask for over the GPUs of all
  clusters times the span of their submissions (:mod:`fleet.sim.load`); GPU
  utilisation is the GPU-seconds jobs ran over the GPUs times the replayed
  span (which includes the drain after the last submission).
  Fragmentation is the mean, over the samples, of the share of free GPUs
  that sit on partly busy nodes.
* Fairness is Jain's index of the queues' shares against their
  entitlements, measured where it means something, under contention
  (:func:`fairness`): a queue's entitlement is its ``min`` GPUs, or, for a
  queue without ``min``, its weight's share of the GPUs the ``min`` values leave
  (:func:`entitlements`); its share at a sample is the GPUs it holds over
  its entitlement.  Each sample stands for the window up to the next one
  (the last: up to the end).  In each window, over the queues with pending
  jobs (those that want more than they hold) and an entitlement, ``J =
  (sum x)^2 / (n * sum x^2)``; windows with fewer than two such queues
  (nobody to be unfair to) or where they all hold nothing (no share to
  compare) are left out, and the index is the mean of the others weighted
  by their length.  1 means every queue that waits got the same multiple of
  its entitlement; 1/n that one of n got everything.  Queues that wait for
  nothing are left out because they got what they asked for: counting them
  would measure how demand differs, not how the scheduler shares.
  ``queues.csv`` has each sample's shares and pending jobs, so the index
  can be worked out again from it.  A second index, over days
  (``jain_index_day``, :data:`FAIR_WINDOW`), takes each queue's GPU time
  over a day instead of the GPUs it holds at a sample: per day, over the
  queues that had pending jobs at some sample of it, x = GPU-seconds held
  over the entitlement times the day's length.  This is what fair share
  with memory aims at (each team's share over its half-life, not at each
  instant), so it is the figure that tells memory from none.
* Preemptions are counted by reason (:attr:`~fleet.sim.engine.JobResult.preempted_for`),
  and jobs past their deadline by the event that says so
  (:data:`fleet.sim.engine.PAST_DEADLINE`).

Files of a replay in ``DIR``: ``summary.json``, ``jobs.csv`` (one row per
job), ``queues.csv`` (one row per sample and queue: GPUs used and borrowed,
jobs pending, share of the entitlement), and ``jobs.parquet`` when pyarrow
is installed.  A comparison writes each policy's files in ``DIR/<policy>/``
and, when matplotlib is installed, the :data:`PLOTS` in ``DIR``; replays at
several loads add :data:`LOAD_PLOT` (:func:`plot_loads`) over them.  In
every plot each policy has its own colour, dash pattern and markers
(:func:`line_style`), drawn a little transparent, so one policy's line never
hides another's; the load plot also sets each policy's points a little to
the side of their load, and the bar charts hatch each policy's bars.
"""

from __future__ import annotations

import csv
import importlib
import io
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from fleet.sim import load
from fleet.sim.engine import PAST_DEADLINE, JobResult, Replay, Sample

PERCENTILES: Final = (50, 95, 99)
#: The period of the second Jain index (a day: the half-life gen-clusters gives).
FAIR_WINDOW: Final = 86400.0
PLOTS: Final = ("delay-cdf.png", "utilisation.png", "vc-p95.png", "vc-mean.png")
#: The plot of figures against offered load, over replays at several loads.
LOAD_PLOT: Final = "load.png"
_JOB_COLUMNS: Final = (
    "job",
    "queue",
    "gpus",
    "submit_s",
    "admit_s",
    "start_s",
    "end_s",
    "queueing_delay_s",
    "duration_s",
    "state",
    "cluster",
    "mode",
    "preemptions",
)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty sequence."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def _round(value: float) -> float:
    return round(value, 3)


def stats(values: Sequence[float]) -> dict[str, float | None]:
    """``{"mean", "p50", "p95", "p99"}`` of ``values`` (None each when empty)."""
    if not values:
        return {"mean": None, **{f"p{p}": None for p in PERCENTILES}}
    ordered = sorted(values)
    out: dict[str, float | None] = {"mean": _round(math.fsum(ordered) / len(ordered))}
    for p in PERCENTILES:
        out[f"p{p}"] = _round(percentile(ordered, p))
    return out


def _delays(jobs: Sequence[JobResult]) -> list[float]:
    return [d for j in jobs if (d := j.queueing_delay) is not None]


def _completions(jobs: Sequence[JobResult]) -> list[float]:
    return [j.end - j.submit for j in jobs if j.end is not None]


def _multi_gpu(jobs: Sequence[JobResult]) -> list[JobResult]:
    return [j for j in jobs if j.gpus > 1]


def entitlements(
    min_gpus: Mapping[str, int], weights: Mapping[str, float], gpus: int
) -> dict[str, float]:
    """Each queue's entitled GPUs: its ``min``, or its weight's share of what the mins leave.

    The GPUs the ``min`` values leave of ``gpus`` are shared among the queues
    without ``min`` in proportion to their weights (1 where none is given);
    when the ``min`` values take every GPU those queues are entitled to 0.
    """
    floors = {q: m for q, m in min_gpus.items() if m > 0}
    rest = max(0, gpus - sum(floors.values()))
    others = [q for q in min_gpus if q not in floors]
    total = math.fsum(weights.get(q, 1.0) for q in others)
    return {
        q: float(floors[q]) if q in floors else rest * weights.get(q, 1.0) / total if total else 0.0
        for q in min_gpus
    }


def jain(shares: Sequence[float]) -> float | None:
    """Jain's index ``(sum x)^2 / (n * sum x^2)`` of shares >= 0 (None: all zero, or none)."""
    squares = math.fsum(x * x for x in shares)
    if not shares or squares <= 0:
        return None
    return math.fsum(shares) ** 2 / (len(shares) * squares)


def _windows(replay: Replay) -> list[tuple[Sample, float]]:
    """Each sample and the length of its window (up to the next sample; the last: to the end)."""
    samples = replay.samples
    if not samples:
        return []
    ends = [s.time for s in samples[1:]] + [max(replay.horizon, samples[-1].time)]
    return [(s, end - s.time) for s, end in zip(samples, ends, strict=True)]


def _shares(sample: Sample, entitled: Mapping[str, float]) -> dict[str, float]:
    """The share of each entitled queue at ``sample``: GPUs held over GPUs entitled."""
    return {q: sample.used.get(q, 0) / e for q, e in entitled.items() if e > 0}


def fairness_over_days(replay: Replay, window: float = 0.0) -> float | None:
    """Jain's index of the waiting queues' GPU time over ``window``-long periods
    (:data:`FAIR_WINDOW` by default) against their entitlements, the mean over the
    periods weighted by length (module docstring); None: no period counts."""
    window = window or FAIR_WINDOW
    entitled = entitlements(replay.min_gpus, replay.weights, replay.gpus)
    periods: dict[int, tuple[dict[str, float], set[str], list[float]]] = {}
    for sample, length in _windows(replay):
        if length <= 0:
            continue
        held, waited, span = periods.setdefault(int(sample.time // window), ({}, set(), [0.0]))
        span[0] += length
        for q in entitled:
            held[q] = held.get(q, 0.0) + sample.used.get(q, 0) * length
            if sample.pending.get(q, 0) > 0:
                waited.add(q)
    weighted: list[float] = []
    lengths: list[float] = []
    for _, (held, waited, span) in sorted(periods.items()):
        shares = [held[q] / (entitled[q] * span[0]) for q in sorted(waited) if entitled[q] > 0]
        index = jain(shares) if len(shares) >= 2 else None
        if index is not None:
            weighted.append(index * span[0])
            lengths.append(span[0])
    total = math.fsum(lengths)
    return _round(math.fsum(weighted) / total) if total > 0 else None


def fairness(replay: Replay) -> dict[str, float | int | None]:
    """Jain's index under contention (module docstring) and how much of the replay it covers.

    ``{"jain_index", "jain_index_day", "windows", "contended_s"}``: the index at
    the samples (None: no window counts), the index over days
    (:func:`fairness_over_days`), the number of sample windows that count and
    their total length.
    """
    entitled = entitlements(replay.min_gpus, replay.weights, replay.gpus)
    weighted: list[float] = []
    lengths: list[float] = []
    for sample, length in _windows(replay):
        shares = _shares(sample, entitled)
        waiting = [x for q, x in shares.items() if sample.pending.get(q, 0) > 0]
        if len(waiting) < 2 or length <= 0:
            continue
        index = jain(waiting)
        if index is not None:
            weighted.append(index * length)
            lengths.append(length)
    total = math.fsum(lengths)
    return {
        "jain_index": _round(math.fsum(weighted) / total) if total > 0 else None,
        "jain_index_day": fairness_over_days(replay),
        "windows": len(lengths),
        "contended_s": _round(total),
    }


def _offered_load(replay: Replay) -> float | None:
    submits = [j.submit for j in replay.jobs]
    demand = math.fsum(j.gpus * j.duration for j in replay.jobs)
    value = load.ratio(demand, replay.gpus, max(submits) - min(submits)) if submits else None
    return None if value is None else _round(value)


def _by_reason(jobs: Sequence[JobResult]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for j in jobs:
        for reason in j.preempted_for:
            counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items()))


def summary(replay: Replay) -> dict[str, Any]:
    """The ``summary.json`` document of one replay."""
    jobs = replay.jobs
    by_queue: dict[str, list[JobResult]] = {q: [] for q in replay.queues}
    for job in jobs:
        by_queue.setdefault(job.queue, []).append(job)
    span = replay.horizon
    busy = math.fsum(j.gpu_seconds for j in jobs)
    samples = replay.samples
    entitled = entitlements(replay.min_gpus, replay.weights, replay.gpus)
    return {
        "policy": replay.policy,
        "jobs": len(jobs),
        "started": sum(1 for j in jobs if j.start is not None),
        "finished": sum(1 for j in jobs if j.end is not None),
        "offered_load": _offered_load(replay),
        "queueing_delay_s": stats(_delays(jobs)),
        "multi_gpu_jobs": len(_multi_gpu(jobs)),
        "multi_gpu_queueing_delay_s": stats(_delays(_multi_gpu(jobs))),
        "job_completion_time_s": stats(_completions(jobs)),
        "queues": {
            queue: {
                "jobs": len(members),
                "finished": sum(1 for j in members if j.end is not None),
                "entitled_gpus": _round(entitled.get(queue, 0.0)),
                "queueing_delay_s": stats(_delays(members)),
                "multi_gpu_queueing_delay_s": stats(_delays(_multi_gpu(members))),
                "job_completion_time_s": stats(_completions(members)),
                "preemptions": sum(j.preemptions for j in members),
            }
            for queue, members in by_queue.items()
            if members
        },
        "gpus": replay.gpus,
        "horizon_s": _round(span),
        "gpu_utilisation": _round(busy / (replay.gpus * span)) if replay.gpus and span else 0.0,
        "fragmentation": (
            _round(math.fsum(s.fragmentation for s in samples) / len(samples)) if samples else 0.0
        ),
        "fairness": fairness(replay),
        "preemptions": sum(j.preemptions for j in jobs),
        "preemptions_by_reason": _by_reason(jobs),
        "past_deadline": {
            "jobs": sum(1 for j in jobs if j.past_deadline),
            **{r: sum(1 for j in jobs if r in j.past_deadline) for r in PAST_DEADLINE},
        },
        "loop_iterations": replay.iterations,
        "wall_s": round(replay.wall_s, 3),
        "jobs_per_s": round(len(jobs) / replay.wall_s, 1) if replay.wall_s > 0 else None,
    }


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return str(value)


def jobs_csv(replay: Replay) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(_JOB_COLUMNS)
    for j in replay.jobs:
        writer.writerow(
            _cell(v)
            for v in (
                j.key,
                j.queue,
                j.gpus,
                j.submit,
                j.admit,
                j.start,
                j.end,
                j.queueing_delay,
                j.duration,
                j.state,
                j.cluster,
                j.mode,
                j.preemptions,
            )
        )
    return out.getvalue()


def queues_csv(replay: Replay) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("time_s", "queue", "used_gpus", "borrowed_gpus", "pending_jobs", "share"))
    entitled = entitlements(replay.min_gpus, replay.weights, replay.gpus)
    for s in replay.samples:
        shares = _shares(s, entitled)
        for q in replay.queues:
            writer.writerow(
                (
                    _cell(s.time),
                    q,
                    s.used.get(q, 0),
                    s.borrowed.get(q, 0),
                    s.pending.get(q, 0),
                    _cell(shares.get(q)),
                )
            )
    return out.getvalue()


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def write(replay: Replay, directory: Path) -> dict[str, Any]:
    """Write one replay's files in ``directory`` (created); its summary."""
    directory.mkdir(parents=True, exist_ok=True)
    doc = summary(replay)
    (directory / "summary.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    (directory / "jobs.csv").write_text(jobs_csv(replay), encoding="utf-8")
    (directory / "queues.csv").write_text(queues_csv(replay), encoding="utf-8")
    parquet = _optional("pyarrow.parquet")
    if parquet is not None:
        pa = importlib.import_module("pyarrow")
        rows = list(csv.DictReader(io.StringIO(jobs_csv(replay))))
        table = pa.table({c: [r[c] for r in rows] for c in _JOB_COLUMNS})
        parquet.write_table(table, directory / "jobs.parquet")
    return doc


# Comparison ---------------------------------------------------------------------------------


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _load_line(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    loads = {s.get("offered_load") for s in summaries.values()}
    shown = ", ".join(_ratio(v) for v in sorted(loads, key=lambda v: -1.0 if v is None else v))
    return f"Offered load {shown} (GPU-seconds asked over the GPUs x the submission span)"


def compare_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """The comparison of ``fleet simulate --compare`` as text (delays in seconds)."""
    head = ["POLICY", "JOBS", "FINISHED", "DELAY MEAN", "P50", "P95", "P99", "MULTI MEAN"]
    head += ["MULTI P95", "JCT MEAN", "JCT P95", "GPU UTIL", "FRAG", "JAIN", "JAIN-DAY"]
    head += ["PREEMPT"]
    head += ["PAST DEADLINE"]
    rows = [head]
    for policy, s in summaries.items():
        d, c = s["queueing_delay_s"], s["job_completion_time_s"]
        m = s["multi_gpu_queueing_delay_s"]
        rows.append(
            [
                policy,
                str(s["jobs"]),
                str(s["finished"]),
                _seconds(d["mean"]),
                _seconds(d["p50"]),
                _seconds(d["p95"]),
                _seconds(d["p99"]),
                _seconds(m["mean"]),
                _seconds(m["p95"]),
                _seconds(c["mean"]),
                _seconds(c["p95"]),
                f"{100 * s['gpu_utilisation']:.1f}%",
                f"{100 * s['fragmentation']:.1f}%",
                _ratio(s["fairness"]["jain_index"]),
                _ratio(s["fairness"]["jain_index_day"]),
                str(s["preemptions"]),
                str(s["past_deadline"]["jobs"]),
            ]
        )
    out = [
        _load_line(summaries),
        "Queueing delay (all jobs; MULTI: jobs of more than one GPU) and job completion time "
        "(JCT) in seconds of virtual time; JAIN: Jain's index of the waiting queues' shares "
        "of their entitlements at each sample, JAIN-DAY: of their GPU time over each day",
        _table(rows),
    ]
    reasons = sorted({r for s in summaries.values() for r in s["preemptions_by_reason"]})
    if reasons:
        rows = [["POLICY", *(r.upper() for r in reasons)]]
        for policy, s in summaries.items():
            rows.append([policy, *(str(s["preemptions_by_reason"].get(r, 0)) for r in reasons)])
        out += ["", "Preemptions by reason", _table(rows)]
    queues = sorted({q for s in summaries.values() for q in s["queues"]})
    rows = [["QUEUE", "POLICY", "JOBS", "ENTITLED", "DELAY MEAN", "P50", "P95", "P99"]]
    rows[0] += ["MULTI MEAN", "MULTI P95", "PREEMPT"]
    for queue in queues:
        for policy, s in summaries.items():
            entry = s["queues"].get(queue)
            if entry is None:
                continue
            d, m = entry["queueing_delay_s"], entry["multi_gpu_queueing_delay_s"]
            rows.append(
                [
                    queue,
                    policy,
                    str(entry["jobs"]),
                    f"{entry['entitled_gpus']:g}",
                    _seconds(d["mean"]),
                    _seconds(d["p50"]),
                    _seconds(d["p95"]),
                    _seconds(d["p99"]),
                    _seconds(m["mean"]),
                    _seconds(m["p95"]),
                    str(entry["preemptions"]),
                ]
            )
    out += ["", "Per queue (ENTITLED: GPUs a queue's share is measured against)", _table(rows)]
    return "\n".join(out) + "\n"


def load_table(by_load: Mapping[float, Mapping[str, Mapping[str, Any]]]) -> str:
    """Each policy's main figures at each load (``by_load``: load -> policy -> summary)."""
    head = ["LOAD", "POLICY", "OFFERED", "GPU UTIL", "DELAY MEAN", "P95", "MULTI MEAN"]
    head += ["MULTI P95", "JAIN", "JAIN-DAY", "PREEMPT", "PAST DEADLINE"]
    rows = [head]
    for target, summaries in by_load.items():
        for policy, s in summaries.items():
            d, m = s["queueing_delay_s"], s["multi_gpu_queueing_delay_s"]
            rows.append(
                [
                    f"{target:g}",
                    policy,
                    _ratio(s["offered_load"]),
                    f"{100 * s['gpu_utilisation']:.1f}%",
                    _seconds(d["mean"]),
                    _seconds(d["p95"]),
                    _seconds(m["mean"]),
                    _seconds(m["p95"]),
                    _ratio(s["fairness"]["jain_index"]),
                    _ratio(s["fairness"]["jain_index_day"]),
                    str(s["preemptions"]),
                    str(s["past_deadline"]["jobs"]),
                ]
            )
    return "By load (delays in seconds of virtual time)\n" + _table(rows) + "\n"


#: Each policy's line style, by its place in the comparison: a dash pattern, a marker
#: and a colour of its own, drawn a little transparent, so a line that runs on top
#: of another leaves the other visible (equal results show as one line of two styles).
_STYLES: Final[tuple[dict[str, Any], ...]] = (
    {"linestyle": "-", "marker": "o", "color": "tab:blue"},
    {"linestyle": "--", "marker": "s", "color": "tab:orange"},
    {"linestyle": ":", "marker": "^", "color": "tab:green"},
    {"linestyle": "-.", "marker": "D", "color": "tab:red"},
    {"linestyle": (0, (5, 1, 1, 1, 1, 1)), "marker": "v", "color": "tab:purple"},
    {"linestyle": (0, (1, 2)), "marker": "P", "color": "tab:brown"},
)
_HATCHES: Final = ("", "//", "..", "xx", "\\\\", "++")


def line_style(k: int, points: int) -> dict[str, Any]:
    """Matplotlib keywords of the ``k``-th policy's line over ``points`` points: its
    :data:`_STYLES` entry, about eight markers along the line (offset per policy, so
    markers of lines that coincide fall side by side), alpha 0.8, wider lines drawn
    first (under narrower ones)."""
    style: dict[str, Any] = dict(_STYLES[k % len(_STYLES)])
    every = max(1, points // 8)
    style.update(
        markevery=(min(k * max(1, every // len(_STYLES)), points - 1) if points else 0, every),
        markersize=5,
        alpha=0.8,
        linewidth=2.2 - 0.3 * (k % 4),
        zorder=2 + k,
    )
    return style


def plot(replays: Sequence[Replay], directory: Path) -> list[Path]:
    """The comparison's PNG plots in ``directory``; none when matplotlib is missing."""
    matplotlib = _optional("matplotlib")
    if matplotlib is None:
        return []
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    metadata = {"Software": None}
    written: list[Path] = []

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, r in enumerate(replays):
        delays = sorted(_delays(r.jobs))
        if not delays:
            continue
        xs = [max(d, 1.0) for d in delays]
        ys = [(i + 1) / len(delays) for i in range(len(delays))]
        ax.step(xs, ys, where="post", label=r.policy, **line_style(k, len(xs)))
    ax.set_xscale("log")
    ax.set_xlabel("queueing delay (s, virtual time; 0 shown as 1)")
    ax.set_ylabel("fraction of started jobs")
    ax.set_title("Queueing delay CDF")
    ax.grid(True, alpha=0.3)
    ax.legend()
    written.append(directory / "delay-cdf.png")
    fig.savefig(written[-1], dpi=100, metadata=metadata)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, r in enumerate(replays):
        if r.samples and r.gpus:
            days = [s.time / 86400 for s in r.samples]
            util = [100 * s.busy / r.gpus for s in r.samples]
            style = line_style(k, len(days)) | {"linewidth": 1.2 - 0.2 * (k % 3)}
            ax.plot(days, util, label=r.policy, **style)
    ax.set_xlabel("virtual time (days)")
    ax.set_ylabel("GPUs busy (%)")
    ax.set_title("GPU utilisation over time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    written.append(directory / "utilisation.png")
    fig.savefig(written[-1], dpi=100, metadata=metadata)
    plt.close(fig)

    queues = sorted({j.queue for r in replays for j in r.jobs})
    for name, label in (("vc-p95.png", "p95"), ("vc-mean.png", "mean")):
        fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(queues)), 4.5))
        width = 0.8 / max(1, len(replays))
        for k, r in enumerate(replays):
            values = []
            for q in queues:
                delays = sorted(_delays([j for j in r.jobs if j.queue == q]))
                if not delays:
                    values.append(0.0)
                elif label == "p95":
                    values.append(percentile(delays, 95) / 3600)
                else:
                    values.append(math.fsum(delays) / len(delays) / 3600)
            ax.bar(
                [i + k * width for i in range(len(queues))],
                values,
                width,
                label=r.policy,
                color=_STYLES[k % len(_STYLES)]["color"],
                hatch=_HATCHES[k % len(_HATCHES)],
                edgecolor="white",
            )
        ax.set_xticks([i + width * (len(replays) - 1) / 2 for i in range(len(queues))])
        ax.set_xticklabels(queues, rotation=45, ha="right")
        ax.set_ylabel(f"{label} queueing delay (hours)")
        ax.set_title(f"{label} queueing delay per queue")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        written.append(directory / name)
        fig.savefig(written[-1], dpi=100, metadata=metadata)
        plt.close(fig)
    return written


def plot_loads(
    by_load: Mapping[float, Mapping[str, Mapping[str, Any]]], directory: Path
) -> list[Path]:
    """:data:`LOAD_PLOT` in ``directory``: figures against offered load, one line per policy.

    None when matplotlib is missing or fewer than two loads were replayed.
    """
    matplotlib = _optional("matplotlib")
    if matplotlib is None or len(by_load) < 2:
        return []
    matplotlib.use("Agg")
    plt = importlib.import_module("matplotlib.pyplot")
    loads = sorted(by_load)
    policies = list(dict.fromkeys(p for summaries in by_load.values() for p in summaries))
    panels = (  # title, where in a summary, unit
        ("mean queueing delay (hours)", ("queueing_delay_s", "mean"), 1 / 3600),
        ("multi-GPU mean queueing delay (hours)", ("multi_gpu_queueing_delay_s", "mean"), 1 / 3600),
        ("GPU utilisation (%)", ("gpu_utilisation",), 100.0),
        ("Jain's index over days", ("fairness", "jain_index_day"), 1.0),
    )
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    # Each policy's points a little to the side of the load they belong to, so that
    # equal figures do not hide one another.
    gap = min((b - a for a, b in itertools.pairwise(loads)), default=1.0)
    for ax, (title, keys, unit) in zip(axes.flat, panels, strict=True):
        for k, policy in enumerate(policies):
            shift = gap * 0.03 * (k - (len(policies) - 1) / 2)
            xs, ys = [], []
            for target in loads:
                value: Any = by_load[target].get(policy)
                for key in keys:
                    value = None if value is None else value[key]
                if value is not None:
                    xs.append(target + shift)
                    ys.append(value * unit)
            style = line_style(k, len(xs)) | {"markevery": 1}
            ax.plot(xs, ys, label=policy, **style)
        ax.set_xlabel("offered load")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes.flat[0].legend()
    fig.tight_layout()
    path = directory / LOAD_PLOT
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return [path]
