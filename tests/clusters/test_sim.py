"""The simulated member cluster on the virtual clock: what it reports, when, in what order.

Theory of operation: each test drives a :class:`SimulatedCluster` on a
:class:`VirtualClock` through a :class:`Member` harness that reads the
cluster's :meth:`watch` in a coroutine of its own, as the scheduler loop
will, and keeps every event.  Moving the clock lets that reader run, so after
each ``advance`` the harness holds everything that happened up to then.
Nothing sleeps for real: the harness fails a test that calls ``time.time``
or ``asyncio.sleep``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from fleet.clock import VirtualClock
from fleet.clusters.base import (
    ClusterConflict,
    ClusterError,
    ClusterHealth,
    ClusterRejected,
    ClusterUnavailable,
    JobFinished,
    JobStarted,
    JobStopped,
    MemberEvent,
    MemberReadiness,
    NodeHealth,
)
from fleet.clusters.sim import DEFAULT_DURATION, SimulatedCluster, SimulatedRun
from tests.clusters.factories import dispatched

FAILED_REASON = "simulated failure (fleet.io/simulated-outcome: Failed)"


class Member:
    """A simulated cluster ``sim-a`` on a virtual clock, with every event it reported."""

    def __init__(self) -> None:
        self.clock = VirtualClock()
        self.cluster = SimulatedCluster("sim-a", self.clock)
        self.events: list[MemberEvent] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self.cluster.watch():
            self.events.append(event)

    async def seen(self) -> list[MemberEvent]:
        """Every event so far (after letting the reader catch up)."""
        await self.clock.run_until_idle()
        return list(self.events)

    async def close(self) -> None:
        await self.cluster.close()
        await self.reader


@pytest.fixture
def no_real_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail on any call of ``time.time`` or ``asyncio.sleep``."""

    def refuse(*args: object) -> None:
        raise AssertionError("the simulated cluster must use the injected clock")

    monkeypatch.setattr(time, "time", refuse)
    monkeypatch.setattr(asyncio, "sleep", refuse)


@pytest.fixture
async def member(no_real_time: None) -> AsyncIterator[Member]:
    member = Member()
    yield member
    await member.close()


def started(key: str, at: float, uid: str = "uid-1") -> JobStarted:
    return JobStarted("sim-a", key, uid, at)


def finished(key: str, at: float, uid: str = "uid-1", reason: str = "") -> JobFinished:
    return JobFinished("sim-a", key, uid, at, succeeded=not reason, reason=reason)


def stopped(key: str, at: float, uid: str = "uid-1") -> JobStopped:
    return JobStopped("sim-a", key, uid, at)


# Running to the end ----------------------------------------------------------------------


async def test_jobs_start_at_creation_and_finish_after_their_durations_in_clock_order(
    member: Member,
) -> None:
    for key, duration in [("t/b", "5m"), ("t/a", "90s"), ("t/d", "1h30m"), ("t/c", None)]:
        await member.cluster.create(dispatched(key, duration=duration))
    assert await member.seen() == [started(k, 0) for k in ("t/b", "t/a", "t/d", "t/c")]
    assert list(member.cluster.running()) == ["t/b", "t/a", "t/d", "t/c"]

    await member.clock.advance(61)
    assert (await member.seen())[4:] == [finished("t/c", DEFAULT_DURATION)]
    assert list(member.cluster.running()) == ["t/b", "t/a", "t/d"]

    await member.clock.advance_to(2 * 3600)
    assert (await member.seen())[4:] == [
        finished("t/c", 60),
        finished("t/a", 90),
        finished("t/b", 300),
        finished("t/d", 5400),
    ]
    assert member.cluster.running() == {}
    assert member.clock.sleepers() == 0


async def test_a_run_records_the_job_and_its_times(member: Member) -> None:
    await member.clock.advance(10)
    job = dispatched("t/a", duration="1.5h", outcome="Failed")
    await member.cluster.create(job)
    assert member.cluster.running() == {
        "t/a": SimulatedRun(job, started=10, ends=10 + 5400, succeeds=False, reason=FAILED_REASON)
    }


async def test_jobs_ending_at_the_same_time_end_in_the_order_they_were_created(
    member: Member,
) -> None:
    await member.cluster.create(dispatched("t/first", duration="10s"))
    await member.clock.advance(4)
    await member.cluster.create(dispatched("t/second", duration="6s"))
    await member.cluster.create(dispatched("t/early", duration="1s"))
    await member.clock.advance(100)
    ends = [e for e in await member.seen() if isinstance(e, JobFinished)]
    assert ends == [finished("t/early", 5), finished("t/first", 10), finished("t/second", 10)]


async def test_the_next_deadline_is_the_next_end(member: Member) -> None:
    await member.cluster.create(dispatched("t/a", duration="2m"))
    await member.cluster.create(dispatched("t/b", duration="30s"))
    assert await member.clock.advance_to_next() == 30
    assert await member.clock.advance_to_next() == 120
    assert await member.clock.advance_to_next() is None
    assert (await member.seen())[2:] == [finished("t/b", 30), finished("t/a", 120)]


@pytest.mark.parametrize("outcome", [None, "Succeeded"])
async def test_a_job_succeeds_unless_told_otherwise(member: Member, outcome: str | None) -> None:
    await member.cluster.create(dispatched("t/a", duration="1s", outcome=outcome))
    await member.clock.advance(1)
    assert (await member.seen())[-1] == finished("t/a", 1)


async def test_a_failed_outcome_fails_the_job_with_a_reason(member: Member) -> None:
    await member.cluster.create(dispatched("t/a", duration="2m", outcome="Failed"))
    await member.clock.advance(120)
    assert await member.seen() == [started("t/a", 0), finished("t/a", 120, reason=FAILED_REASON)]


async def test_many_jobs_end_in_clock_order_and_the_same_every_run() -> None:
    async def run() -> list[MemberEvent]:
        member = Member()
        for i in range(300):
            await member.cluster.create(dispatched(f"t/j{i}", duration=f"{(i * 37) % 50 + 1}s"))
            if i % 7 == 0:
                await member.clock.advance(1)
        await member.clock.advance(1000)
        await member.close()
        return member.events

    events = await run()
    ends = [e for e in events if isinstance(e, JobFinished)]
    assert len(ends) == 300
    assert [e.at for e in ends] == sorted(e.at for e in ends)
    assert await run() == events


# Deleting ---------------------------------------------------------------------------------


async def test_deleting_a_running_job_stops_it_at_once(member: Member) -> None:
    await member.cluster.create(dispatched("t/a", duration="90s"))
    await member.cluster.create(dispatched("t/b", duration="90s"))
    await member.clock.advance(30)
    assert await member.cluster.delete("t/a") is True
    assert list(member.cluster.running()) == ["t/b"]
    assert member.clock.sleepers() == 1  # t/a's end is no longer awaited
    await member.clock.advance(100)
    assert await member.seen() == [
        started("t/a", 0),
        started("t/b", 0),
        stopped("t/a", 30),
        finished("t/b", 90),
    ]


async def test_deleting_is_idempotent(member: Member) -> None:
    await member.cluster.create(dispatched("t/a", duration="90s"))
    assert await member.cluster.delete("t/a") is True
    assert await member.cluster.delete("t/a") is False
    assert await member.cluster.delete("t/never") is False
    assert await member.seen() == [started("t/a", 0), stopped("t/a", 0)]


async def test_deleting_an_ended_job_removes_it_and_reports_nothing_more(member: Member) -> None:
    await member.cluster.create(dispatched("t/a", duration="1s"))
    await member.clock.advance(5)
    assert await member.cluster.delete("t/a") is False
    assert await member.seen() == [started("t/a", 0), finished("t/a", 1)]
    # Gone: the key may be created again, by another incarnation.
    await member.cluster.create(dispatched("t/a", duration="1s", uid="uid-2"))
    assert (await member.seen())[-1] == started("t/a", 5, uid="uid-2")


async def test_a_deleted_job_can_be_created_again(member: Member) -> None:
    await member.cluster.create(dispatched("t/a", duration="10s"))
    await member.clock.advance(3)
    await member.cluster.delete("t/a")
    await member.cluster.create(dispatched("t/a", duration="10s", uid="uid-2"))
    await member.clock.advance(20)
    assert await member.seen() == [
        started("t/a", 0),
        stopped("t/a", 3),
        started("t/a", 3, uid="uid-2"),
        finished("t/a", 13, uid="uid-2"),
    ]


async def test_delete_checks_the_key(member: Member) -> None:
    with pytest.raises(ValueError, match="namespace/name"):
        await member.cluster.delete("no-slash")


# Creating again, conflicts, refusals ------------------------------------------------------


async def test_creating_again_with_the_same_uid_does_nothing(member: Member) -> None:
    job = dispatched("t/a", duration="10s")
    await member.cluster.create(job)
    await member.clock.advance(4)
    await member.cluster.create(job)
    assert member.cluster.running()["t/a"].started == 0
    await member.clock.advance(10)
    await member.cluster.create(job)  # ended, but still there
    assert member.cluster.running() == {}
    assert await member.seen() == [started("t/a", 0), finished("t/a", 10)]


async def test_the_same_key_with_another_uid_conflicts_while_the_job_runs(
    member: Member,
) -> None:
    await member.cluster.create(dispatched("t/a", duration="10s"))
    other = dispatched("t/a", duration="10s", uid="uid-2")
    with pytest.raises(ClusterConflict, match="t/a exists with uid uid-1, not uid-2"):
        await member.cluster.create(other)
    assert await member.seen() == [started("t/a", 0)]


async def test_a_new_run_of_the_name_replaces_an_ended_one(member: Member) -> None:
    """Fleet frees a name once its job ended: the new run's copy replaces the old."""
    await member.cluster.create(dispatched("t/a", duration="10s"))
    await member.clock.advance(10)
    await member.cluster.create(dispatched("t/a", duration="10s", uid="uid-2"))
    await member.clock.advance(10)
    assert await member.seen() == [
        started("t/a", 0),
        finished("t/a", 10),
        started("t/a", 10, uid="uid-2"),
        finished("t/a", 20, uid="uid-2"),
    ]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("abc", '"abc" is not a duration'),
        ("", '"" is not a duration'),
        ("-5m", '"-5m" is negative'),
        ("0s", '"0s" is zero'),
        ("87601h", '"87601h" is longer than ten years'),
        (90, "90 is not a string"),
    ],
)
async def test_an_invalid_duration_is_refused_naming_the_annotation_and_value(
    member: Member, value: object, shown: str
) -> None:
    with pytest.raises(ClusterRejected) as caught:
        await member.cluster.create(dispatched("t/a", duration=value))
    assert isinstance(caught.value, ClusterError)
    assert str(caught.value).startswith(
        f"sim-a: job t/a: annotation fleet.io/simulated-duration: {shown}"
    )
    assert member.cluster.running() == {}
    assert await member.seen() == []


@pytest.mark.parametrize(("value", "shown"), [("failed", '"failed"'), (False, "False")])
async def test_an_invalid_outcome_is_refused(member: Member, value: object, shown: str) -> None:
    with pytest.raises(ClusterRejected) as caught:
        await member.cluster.create(dispatched("t/a", outcome=value))
    assert str(caught.value) == (
        f"sim-a: job t/a: annotation fleet.io/simulated-outcome: {shown} is not Succeeded or Failed"
    )
    assert await member.seen() == []


async def test_a_job_for_another_cluster_is_a_mistake(member: Member) -> None:
    with pytest.raises(ValueError, match="t/a is dispatched to sim-b, not to sim-a"):
        await member.cluster.create(dispatched("t/a", cluster="sim-b"))


# Nodes, reachability, closing ------------------------------------------------------------


async def test_node_health_changes_are_reported_once_each(member: Member) -> None:
    await member.cluster.create(dispatched("t/a", duration="10s"))
    await member.clock.advance(2)
    member.cluster.set_node_health("node-1", False)
    member.cluster.set_node_health("node-1", False)
    await member.clock.advance(3)
    member.cluster.set_node_health("node-1", True)
    member.cluster.set_node_health("node-2", True)  # never bad: nothing changes
    await member.clock.advance(10)
    assert await member.seen() == [
        started("t/a", 0),
        NodeHealth("sim-a", "node-1", False, 2),
        NodeHealth("sim-a", "node-1", True, 5),
        finished("t/a", 10),  # its node went bad; it ran on
    ]


async def test_an_unreachable_member_refuses_changes_and_its_jobs_run_on(member: Member) -> None:
    await member.cluster.create(dispatched("t/a", duration="10s"))
    assert (await member.cluster.health()).reachable
    member.cluster.set_reachable(False, "network partition")
    assert await member.cluster.health() == ClusterHealth(False, "network partition")
    with pytest.raises(ClusterUnavailable, match="sim-a: network partition"):
        await member.cluster.create(dispatched("t/b"))
    with pytest.raises(ClusterUnavailable, match="network partition"):
        await member.cluster.delete("t/a")
    await member.clock.advance(10)
    member.cluster.set_reachable(True)
    assert await member.cluster.health() == ClusterHealth(True, "simulated, 0 jobs running")
    await member.cluster.create(dispatched("t/b", duration="1s"))
    assert await member.seen() == [
        started("t/a", 0),
        MemberReadiness("sim-a", False, "network partition", 0),
        finished("t/a", 10),
        MemberReadiness("sim-a", True, "", 10),
        started("t/b", 10),
    ]


async def test_closing_stops_the_jobs_coroutines_and_ends_every_watcher(
    no_real_time: None,
) -> None:
    clock = VirtualClock()
    cluster = SimulatedCluster("sim-a", clock)
    await cluster.create(dispatched("t/a", duration="10s"))
    await cluster.create(dispatched("t/b", duration="20s"))
    await clock.advance(10)

    async def read() -> list[MemberEvent]:
        return [event async for event in cluster.watch()]

    # Events wait for a watcher; the first one reads them all.
    first = asyncio.create_task(read())
    await clock.run_until_idle()
    second = asyncio.create_task(read())
    await clock.run_until_idle()
    await cluster.close()
    await cluster.close()
    assert await first == [started("t/a", 0), started("t/b", 0), finished("t/a", 10)]
    assert await second == []
    assert clock.sleepers() == 0
    assert list(cluster.running()) == ["t/b"]
    assert await cluster.health() == ClusterHealth(False, "closed")
    with pytest.raises(ClusterUnavailable, match="closed"):
        await cluster.create(dispatched("t/c"))
    with pytest.raises(ClusterUnavailable, match="closed"):
        await cluster.delete("t/b")
    assert [e async for e in cluster.watch()] == []


def test_a_simulated_cluster_needs_a_name() -> None:
    with pytest.raises(ValueError, match="needs a name"):
        SimulatedCluster("", VirtualClock())
