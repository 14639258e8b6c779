"""Scaling a trace's load: submission times stretched or squeezed, run times and order kept."""

from __future__ import annotations

import pytest

from fleet.sim import load
from fleet.sim.traces import TraceError, TraceJob


def job(name: str, submit: float, duration: float, gpus: int = 1, replicas: int = 1) -> TraceJob:
    return TraceJob(
        key=f"ns/{name}",
        queue="q",
        submit=submit,
        duration=duration,
        replicas=replicas,
        gpus=gpus,
    )


# 4 GPUs; 10 + 2x8x50 + 2x100 + 4x25 = 1,110 GPU-seconds over 100 s of arrivals: 2.775.
JOBS = [
    job("a", 100.0, 10.0),
    job("b", 120.0, 50.0, gpus=8, replicas=2),
    job("c", 120.0, 100.0, gpus=2),
    job("d", 150.0, 25.0, gpus=4),
    job("e", 200.0, 0.0),
]


def test_the_offered_load_is_gpu_seconds_over_gpus_times_the_submission_span() -> None:
    assert load.gpu_seconds(JOBS) == 1110.0
    assert load.span(JOBS) == 100.0
    assert load.offered(JOBS, 4) == pytest.approx(1110.0 / 400.0)
    assert load.ratio(1110.0, 4, 0.0) is None and load.ratio(1110.0, 0, 100.0) is None


@pytest.mark.parametrize("target", [0.6, 1.0, 1.2, 5.55])
def test_scaling_moves_submissions_from_the_first_and_keeps_everything_else(
    target: float,
) -> None:
    out, done = load.scaled(JOBS, 4, target)
    factor = 2.775 / target
    assert [j.submit for j in out] == [
        pytest.approx(100.0 + (j.submit - 100.0) * factor, abs=5e-4) for j in JOBS
    ]
    assert [(j.key, j.duration, j.replicas, j.gpus) for j in out] == [
        (j.key, j.duration, j.replicas, j.gpus) for j in JOBS
    ]
    assert [j.submit for j in out] == sorted(j.submit for j in out)
    assert out[1].submit == out[2].submit  # ties stay ties, in the trace's order
    assert done.before == pytest.approx(2.775)
    assert done.after == pytest.approx(target, rel=1e-4)
    assert load.offered(out, 4) == done.after
    assert (done.span_before, done.span_after) == (100.0, pytest.approx(100.0 * factor, abs=1e-3))


def test_scaled_times_are_whole_milliseconds() -> None:
    out, _ = load.scaled(JOBS, 4, 3.0)
    assert all(round(j.submit, 3) == j.submit for j in out)


def test_a_load_without_a_value_is_an_error() -> None:
    at_once = [job("a", 5.0, 10.0), job("b", 5.0, 10.0)]
    with pytest.raises(TraceError, match="all submitted at one moment"):
        load.scaled(at_once, 4, 0.8)
    with pytest.raises(TraceError, match="all submitted at one moment"):
        load.scaled([], 4, 0.8)
    with pytest.raises(TraceError, match="no GPUs"):
        load.scaled(JOBS, 0, 0.8)
    with pytest.raises(TraceError, match="ask for no GPU time"):
        load.scaled([job("a", 0.0, 10.0, gpus=0), job("b", 9.0, 10.0, gpus=0)], 4, 0.8)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(TraceError, match="is not a positive number"):
            load.scaled(JOBS, 4, bad)
