"""What a replay writes: per-job CSV, per-queue time series, ``summary.json``, tables and plots.

Theory of operation: everything here is computed from a
:class:`~fleet.sim.engine.Replay` alone, with explicit orders and fixed
formats, so the same replay always gives the same bytes (the wall-clock
fields ``wall_s`` and ``jobs_per_s`` of ``summary.json`` measure the run
itself and are the only exception).  Percentiles are nearest-rank (the
smallest value with at least p% of the values at or below it); queueing
delay is first start minus submission, in seconds of virtual time, over the
jobs that started; job completion time is end minus submission over the jobs
that finished.  GPU utilisation is the GPU-seconds jobs ran over the GPUs of
all clusters times the replayed span.  Fragmentation is the mean, over the
samples, of the share of free GPUs that sit on partly busy nodes.

Files of a replay in ``DIR``: ``summary.json``, ``jobs.csv`` (one row per
job), ``queues.csv`` (one row per sample and queue: GPUs used and borrowed,
jobs pending), and ``jobs.parquet`` when pyarrow is installed.  A comparison
writes each policy's files in ``DIR/<policy>/`` and, when matplotlib is
installed, ``delay-cdf.png``, ``utilisation.png`` and ``vc-p95.png`` in ``DIR``.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from fleet.sim.engine import JobResult, Replay

PERCENTILES: Final = (50, 95, 99)
PLOTS: Final = ("delay-cdf.png", "utilisation.png", "vc-p95.png")
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


def summary(replay: Replay) -> dict[str, Any]:
    """The ``summary.json`` document of one replay."""
    jobs = replay.jobs
    by_queue: dict[str, list[JobResult]] = {q: [] for q in replay.queues}
    for job in jobs:
        by_queue.setdefault(job.queue, []).append(job)
    span = replay.horizon
    busy = math.fsum(j.gpu_seconds for j in jobs)
    samples = replay.samples
    return {
        "policy": replay.policy,
        "jobs": len(jobs),
        "started": sum(1 for j in jobs if j.start is not None),
        "finished": sum(1 for j in jobs if j.end is not None),
        "queueing_delay_s": stats(_delays(jobs)),
        "job_completion_time_s": stats(_completions(jobs)),
        "queues": {
            queue: {
                "jobs": len(members),
                "finished": sum(1 for j in members if j.end is not None),
                "queueing_delay_s": stats(_delays(members)),
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
        "preemptions": sum(j.preemptions for j in jobs),
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
    writer.writerow(("time_s", "queue", "used_gpus", "borrowed_gpus", "pending_jobs"))
    for s in replay.samples:
        for q in replay.queues:
            writer.writerow(
                (_cell(s.time), q, s.used.get(q, 0), s.borrowed.get(q, 0), s.pending.get(q, 0))
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


def compare_table(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    """The comparison of ``fleet simulate --compare`` as text (delays in seconds)."""
    head = ["POLICY", "JOBS", "FINISHED", "DELAY MEAN", "P50", "P95", "P99", "JCT MEAN", "JCT P95"]
    head += ["GPU UTIL", "FRAG", "PREEMPT"]
    rows = [head]
    for policy, s in summaries.items():
        d, c = s["queueing_delay_s"], s["job_completion_time_s"]
        rows.append(
            [
                policy,
                str(s["jobs"]),
                str(s["finished"]),
                _seconds(d["mean"]),
                _seconds(d["p50"]),
                _seconds(d["p95"]),
                _seconds(d["p99"]),
                _seconds(c["mean"]),
                _seconds(c["p95"]),
                f"{100 * s['gpu_utilisation']:.1f}%",
                f"{100 * s['fragmentation']:.1f}%",
                str(s["preemptions"]),
            ]
        )
    out = ["Queueing delay and job completion time (JCT) in seconds of virtual time", _table(rows)]
    queues = sorted({q for s in summaries.values() for q in s["queues"]})
    rows = [["QUEUE", "POLICY", "JOBS", "DELAY MEAN", "P50", "P95", "P99", "PREEMPT"]]
    for queue in queues:
        for policy, s in summaries.items():
            entry = s["queues"].get(queue)
            if entry is None:
                continue
            d = entry["queueing_delay_s"]
            rows.append(
                [
                    queue,
                    policy,
                    str(entry["jobs"]),
                    _seconds(d["mean"]),
                    _seconds(d["p50"]),
                    _seconds(d["p95"]),
                    _seconds(d["p99"]),
                    str(entry["preemptions"]),
                ]
            )
    out += ["", "Per queue", _table(rows)]
    return "\n".join(out) + "\n"


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
    for r in replays:
        delays = sorted(_delays(r.jobs))
        if not delays:
            continue
        xs = [max(d, 1.0) for d in delays]
        ys = [(i + 1) / len(delays) for i in range(len(delays))]
        ax.step(xs, ys, where="post", label=r.policy)
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
    for r in replays:
        if r.samples and r.gpus:
            days = [s.time / 86400 for s in r.samples]
            util = [100 * s.busy / r.gpus for s in r.samples]
            ax.plot(days, util, label=r.policy, linewidth=0.8)
    ax.set_xlabel("virtual time (days)")
    ax.set_ylabel("GPUs busy (%)")
    ax.set_title("GPU utilisation over time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    written.append(directory / "utilisation.png")
    fig.savefig(written[-1], dpi=100, metadata=metadata)
    plt.close(fig)

    queues = sorted({j.queue for r in replays for j in r.jobs})
    fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(queues)), 4.5))
    width = 0.8 / max(1, len(replays))
    for k, r in enumerate(replays):
        values = []
        for q in queues:
            delays = sorted(_delays([j for j in r.jobs if j.queue == q]))
            values.append(percentile(delays, 95) / 3600 if delays else 0.0)
        ax.bar([i + k * width for i in range(len(queues))], values, width, label=r.policy)
    ax.set_xticks([i + width * (len(replays) - 1) / 2 for i in range(len(queues))])
    ax.set_xticklabels(queues, rotation=45, ha="right")
    ax.set_ylabel("p95 queueing delay (hours)")
    ax.set_title("p95 queueing delay per queue")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    written.append(directory / "vc-p95.png")
    fig.savefig(written[-1], dpi=100, metadata=metadata)
    plt.close(fig)
    return written
