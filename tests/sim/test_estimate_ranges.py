"""Start estimates people can trust: what is left of a run, ranges learnt from the
starts that followed, and never a start in the past (:mod:`fleet.sim.forecast`)."""

from __future__ import annotations

import pytest

from fleet.sim import forecast
from fleet.sim.forecast import Calibration, Estimate, Forecast

T0 = 1_000_000.0


def test_a_running_job_past_its_declared_run_time_is_expected_to_run_on() -> None:
    # declared 1 h, has run 2 h: not "ends now" but what longer runs of its queue took
    runs = (600.0, 1800.0, 9000.0, 10800.0, 14400.0)
    assert forecast.remaining(7200.0, 3600.0, runs) == pytest.approx(10800.0 - 7200.0)
    # before its declared end, the declaration holds
    assert forecast.remaining(1800.0, 3600.0, runs) == 1800.0
    # no run of the queue lasted that long: half again what it has run
    assert forecast.remaining(20000.0, 3600.0, runs) == 10000.0


def test_without_a_declaration_what_is_left_follows_the_runs_that_lasted_longer() -> None:
    runs = (60.0, 60.0, 60.0, 60.0, 36000.0, 36000.0, 36000.0)
    # the median run is a minute, but a job that has lasted 10 minutes is a long one
    assert forecast.remaining(600.0, None, runs) == pytest.approx(36000.0 - 600.0)
    # too little history: what is left of the median, then half what it has run
    assert forecast.remaining(10.0, None, (100.0,)) == 90.0
    assert forecast.remaining(400.0, None, (100.0,)) == 200.0
    assert forecast.remaining(10.0, None, ()) == forecast.DEFAULT_EXPECTED - 10.0


def test_an_estimate_shown_after_its_start_has_passed_is_overdue_and_never_in_the_past() -> None:
    e = Estimate(T0 + 100, "runs 1h", earliest=T0 + 50, latest=T0 + 400)
    assert forecast.shown(e, T0) == e
    later = forecast.shown(e, T0 + 200)
    assert later.start == later.earliest == T0 + 200 and later.start is not None
    assert later.overdue
    assert later.latest == T0 + 200 + 300  # as wide as it was
    much_later = forecast.shown(e, T0 + 2000)
    assert much_later.latest == T0 + 2000 + 1900  # growing with the delay
    # before the start, only the range's lower end is held at now
    assert forecast.shown(e, T0 + 80) == Estimate(
        T0 + 100, "runs 1h", earliest=T0 + 80, latest=T0 + 400
    )


def _forecast(at: float, starts: dict[str, float], declared: bool = False) -> Forecast:
    estimates = {k: Estimate(s, "runs", declared=declared) for k, s in starts.items()}
    ids = {k: i for i, k in enumerate(sorted(starts), 1)}
    return Forecast(at, 3600.0, estimates, ids=ids)


def test_ranges_follow_how_far_earlier_estimates_were_from_actual_starts() -> None:
    calibration = Calibration()
    first = calibration.ranged(_forecast(T0, {"a": T0 + 600}))
    # before enough starts were seen: from half the wait sooner to the wait again later
    assert first.estimates["a"].earliest == T0 + 300
    assert first.estimates["a"].latest == T0 + 1200
    # forty jobs estimated to start in 10 min all started 20 min late
    keys = {f"j{i:02}": T0 + 600 for i in range(40)}
    found = calibration.ranged(_forecast(T0, keys))
    calibration.record(found)
    ids = found.ids
    calibration.learn_starts({ids[k]: T0 + 1800 for k in keys}, T0 + 1800, 3600.0)
    assert calibration.samples(False) == 40
    assert calibration.samples(True) == 0  # declared estimates learn apart
    later = calibration.ranged(_forecast(T0 + 1800, {"b": T0 + 2400}))
    b = later.estimates["b"]
    # 20 min late, as every one was; the range holds the simulation's point and is
    # never narrower than NARROWEST (a quarter of the wait sooner)
    assert (b.earliest, b.start, b.latest) == (T0 + 2400 - 150, T0 + 2400, T0 + 2400 + 1200)
    declared = calibration.ranged(_forecast(T0 + 1800, {"b": T0 + 2400}, declared=True))
    # none seen on declared run times yet: their default range is the narrowest
    assert declared.estimates["b"].latest == T0 + 2400 + 300


def test_estimates_of_jobs_that_never_start_are_forgotten_after_the_horizon() -> None:
    calibration = Calibration()
    calibration.record(calibration.ranged(_forecast(T0, {"a": T0 + 60})))
    calibration.learn_starts({}, T0 + 100, 3600.0)
    assert calibration._open
    calibration.learn_starts({}, T0 + 4000, 3600.0)
    assert not calibration._open
    assert calibration.samples(False) == 0
