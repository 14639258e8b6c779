"""Failover between real members: a member's API server stops, its jobs go to the other one.

The purge rules are checked when the stopped member comes back: ``Directly``
deletes the old copy as soon as it can, ``Gracefully`` once the new copy
runs, ``Never`` leaves it.  The failover clock survives a restart of Fleet.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import pytest

from fleet.clusters.base import member_object_name
from tests.kube.conftest import NAMESPACE, Fleet, pytorchjobs, submission
from tests.kube.controlplane import ControlPlane, wait_for
from tests.kube.real_operator import MemberControllers

pytestmark = pytest.mark.slow


def copy_in(plane: ControlPlane, name: str, uid: str) -> dict[str, Any] | None:
    object_name = member_object_name(f"{NAMESPACE}/{name}")
    for job in pytorchjobs(plane):
        meta = job["metadata"]
        if meta["name"] == object_name and meta["labels"]["fleet.io/job-uid"] == uid:
            return job
    return None


def fail_over(
    fleet: Fleet, members: dict[str, ControlPlane], name: str, mode: str
) -> tuple[dict[str, Any], ControlPlane, ControlPlane]:
    """Run ``name``, stop its member's API server, wait until it runs in the other one."""
    fleet.submit(submission(name, workers=1, gpus=2, toleration=2, purge_mode=mode))
    first = fleet.wait_state(name, "Running")
    old = members[first["cluster"]]
    new = next(p for n, p in members.items() if n != first["cluster"])
    old.stop_apiserver()
    moved = fleet.wait_state(name, "Queued", "Admitted", "Dispatched", "Running", timeout=30)
    while moved["cluster"] == first["cluster"]:
        moved = fleet.job(name)
        time.sleep(0.1)
    assert any("failed over from" in e["message"] for e in fleet.job(name)["events"])
    return first, old, new


def test_directly_purges_the_old_copy_as_soon_as_its_member_is_back(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    first, old, new = fail_over(fleet, members, "direct", "Directly")
    running = fleet.wait_state("direct", "Running")
    assert running["cluster"] == new.name
    assert copy_in(new, "direct", first["uid"]) is not None
    view = fleet.clusters_view()[old.name]
    assert view["health"] == "Unreachable"
    assert view["message"]

    old.start_apiserver()
    wait_for(lambda: copy_in(old, "direct", first["uid"]) is None, "the old copy purged")
    assert fleet.job("direct")["state"] == "Running"
    wait_for(lambda: fleet.clusters_view()[old.name]["health"] == "Healthy", "the member back")


def test_gracefully_purges_the_old_copy_only_once_the_new_copy_runs(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    # The new copy will not run until its member's operator works again.
    fleet.submit(submission("grace", workers=1, gpus=2, toleration=2, purge_mode="Gracefully"))
    first = fleet.wait_state("grace", "Running")
    old = members[first["cluster"]]
    new_name = next(n for n in members if n != first["cluster"])
    operators[new_name].pause()
    old.stop_apiserver()
    wait_for(
        lambda: fleet.job("grace")["cluster"] == new_name, "the job admitted to the other member"
    )
    fleet.wait_state("grace", "Dispatched")

    old.start_apiserver()
    wait_for(lambda: fleet.clusters_view()[old.name]["health"] == "Healthy", "the member back")
    time.sleep(1.0)  # several loop iterations: the old copy must stay
    assert copy_in(old, "grace", first["uid"]) is not None

    operators[new_name].pause(False)
    fleet.wait_state("grace", "Running")
    wait_for(lambda: copy_in(old, "grace", first["uid"]) is None, "the old copy purged")


def test_never_leaves_the_old_copy_and_its_news_do_not_reach_the_job(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    first, old, new = fail_over(fleet, members, "never", "Never")
    fleet.wait_state("never", "Running")
    old.start_apiserver()
    wait_for(lambda: fleet.clusters_view()[old.name]["health"] == "Healthy", "the member back")
    time.sleep(1.0)
    assert copy_in(old, "never", first["uid"]) is not None
    # The old copy ends in its member: the job, running elsewhere, is not affected.
    operators[old.name].finish(NAMESPACE, member_object_name(f"{NAMESPACE}/never"))
    time.sleep(1.0)
    job = fleet.job("never")
    assert job["state"] == "Running"
    assert job["cluster"] == new.name


def test_a_restart_of_fleet_does_not_reset_the_failover_clock(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    toleration = 8
    fleet: Fleet = fleet_factory()
    fleet.submit(submission("clock", workers=1, gpus=1, toleration=toleration))
    first = fleet.wait_state("clock", "Running")
    old = members[first["cluster"]]
    old.stop_apiserver()
    db = fleet.tmp / "fleet.db"

    def stored_since() -> float | None:
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT since FROM unhealthy_jobs").fetchone()
        return None if row is None else float(row[0])

    since = wait_for(stored_since, "the first-unhealthy time stored")
    time.sleep(toleration / 2)
    fleet.kill()
    restarted = time.time()
    fleet.start()
    moved = wait_for(
        lambda: fleet.job("clock")["cluster"] not in (None, old.name), "the job failed over", 30
    )
    failed_over = [e for e in fleet.job("clock")["events"] if "failed over from" in e["message"]]
    assert failed_over, fleet.job("clock")["events"]
    assert moved
    # With the clock reset by the restart, failover could not happen before
    # restarted + toleration; with the stored clock it happens at since + toleration.
    when = _seconds(failed_over[0]["time"])
    assert when < restarted + toleration
    assert when >= since + toleration - 0.001  # event times are kept to the microsecond


def _seconds(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
