"""Failover's clocks and decisions, without a database or a member: the book alone.

The service's tests (tests/service/test_failover.py) show the same rules end
to end on a virtual clock with stored clocks; these show each rule on the
pure :class:`~fleet.core.failover.FailoverBook` and a core state.
"""

from __future__ import annotations

from fleet.core import events
from fleet.core.cycle import cycle
from fleet.core.failover import (
    PURGE_DIRECTLY,
    PURGE_GRACEFULLY,
    RESTART_GRACE,
    Clock,
    Due,
    FailoverBook,
    Note,
    Purge,
    Rule,
    pending_job,
    rule_of,
)
from fleet.core.state import SchedulerState
from tests.core.factories import make_job, make_nodes, make_state, submit

TREE = {
    "name": "root",
    "min": {"nvidia.com/gpu": 16},
    "children": [{"name": "team-a", "min": {"nvidia.com/gpu": 16}, "namespaces": ["default"]}],
}
KEY = "default/train"


def running_in(cluster: str, *, clusters: frozenset[str] | None = None) -> SchedulerState:
    """A state with job ``train`` running in ``cluster`` (of members east and west)."""
    others = {"east", "west"} - {cluster}
    state = make_state(TREE, {cluster: make_nodes(1, gpus=8), **{o: {} for o in others}})
    submit(state, make_job("train", gpus=8, clusters=clusters))
    cycle(state)
    events.apply(state, events.Dispatched(KEY))
    events.apply(state, events.MemberJobStarted(KEY))
    assert state.running[KEY].cluster == cluster
    return state


def test_a_job_fails_over_once_unhealthy_for_its_toleration_and_not_before() -> None:
    state = running_in("east")
    book = FailoverBook()
    book.rules[KEY] = Rule(60, "Directly")
    book.member_ready("east", False, "HTTP 503 from the API server")
    first = book.due(state, 100.0)
    assert first.due == ()
    assert first.clocks == {KEY: Clock("east", 100.0, "member east is not ready")}
    assert book.due(state, 159.0).due == ()
    turn = book.due(state, 160.0)
    assert turn.due == (
        Due(
            KEY,
            "east",
            "failed over from east: unhealthy for 60s (tolerationSeconds 60): "
            "member east is not ready",
            PURGE_DIRECTLY,
        ),
    )
    assert turn.clocks == {KEY: None}  # the clock goes with the decision


def test_a_member_ready_again_stops_the_clock() -> None:
    state = running_in("east")
    book = FailoverBook()
    book.node_health("east", "node-0", False)
    assert book.due(state, 100.0).clocks == {
        KEY: Clock("east", 100.0, "node node-0 of east is bad")
    }
    book.node_health("east", "node-0", True)
    turn = book.due(state, 200.0)
    assert turn.clocks == {KEY: None}
    assert book.due(state, 10_000.0).due == ()


def test_a_job_with_nowhere_else_to_go_stays() -> None:
    state = running_in("east", clusters=frozenset({"east"}))
    book = FailoverBook()
    book.member_ready("east", False, "")
    book.due(state, 0.0)
    assert book.due(state, 10_000.0).due == ()
    assert KEY in book.since  # still unhealthy, still counted


def test_a_restored_clock_waits_for_its_member_to_say_how_it_is() -> None:
    state = running_in("east")
    book = FailoverBook()
    book.restore({KEY: Clock("east", 50.0, "member east is not ready")}, [], now=1_000.0)
    assert book.due(state, 1_000.0 + RESTART_GRACE - 1).clocks == {}  # kept, not cleared
    assert KEY in book.since
    book.member_ready("east", True, "")  # it said: ready
    assert book.due(state, 1_001.0).clocks == {KEY: None}


def test_an_old_copys_reports_are_failovers_business_not_the_cores() -> None:
    state = running_in("east")
    book = FailoverBook()
    assert book.job_report("east", KEY, state)
    assert not book.job_report("west", KEY, state)  # the copy in west is not the job
    book.job_restarting("west", KEY, True, "CrashLoop", 5.0, state)
    assert book.why_unhealthy(KEY, "east", []) == "" and not book.noting
    book.job_restarting("east", KEY, True, "CrashLoop", 6.0, state)
    book.job_restarting("east", KEY, False, "", 7.0, state)
    assert book.due(state, 8.0).notes == (
        Note(KEY, 6.0, "Restarting", "in east: CrashLoop"),
        Note(KEY, 7.0, "Recovered", "runs again in east"),
    )


def test_a_graceful_purge_waits_for_the_new_copy_to_run() -> None:
    state = make_state(TREE, {"east": make_nodes(1, gpus=8), "west": make_nodes(1, gpus=8)})
    submit(state, make_job("train", gpus=8, clusters=frozenset({"west"})))  # failed over
    book = FailoverBook()
    book.restore({}, [Purge(7, KEY, "east", PURGE_GRACEFULLY)], now=0.0)
    assert book.purges_due(state, {"east", "west"}) == ([], [])  # not running elsewhere yet
    cycle(state)
    events.apply(state, events.Dispatched(KEY))
    events.apply(state, events.MemberJobStarted(KEY))
    ask, done = book.purges_due(state, {"east", "west"})
    assert [(p.intent, p.cluster) for p in ask] == [(7, "east")] and done == []
    ask[0].asked = True
    assert not book.job_stopped("east", KEY, state)  # the old copy stopped: not news to the core
    assert book.purges_due(state, {"east", "west"}) == ([], [7])
    book.purges_finished([7])
    assert book.purges == []


def test_a_purge_in_a_member_that_is_gone_is_done() -> None:
    state = running_in("west")
    book = FailoverBook()
    book.restore({}, [Purge(3, KEY, "east", PURGE_DIRECTLY)], now=0.0)
    assert book.purges_due(state, {"west"}) == ([], [3])


def test_rules_come_from_the_policy_with_defaults_for_what_is_missing_or_wrong() -> None:
    assert rule_of(None) == Rule(300, "Gracefully")
    policy = {
        "spec": {
            "failover": {
                "application": {
                    "decisionConditions": {"tolerationSeconds": 30},
                    "purgeMode": "Immediately",
                }
            }
        }
    }
    assert rule_of(policy) == Rule(30, "Directly")
    policy["spec"]["failover"]["application"]["decisionConditions"]["tolerationSeconds"] = True
    assert rule_of(policy).toleration == 300


def test_a_failed_over_job_waits_in_its_queue_with_its_record() -> None:
    state = running_in("east")
    events.apply(state, events.FailedOver(KEY, "moved"))
    job = pending_job(state, KEY)
    assert job is not None and job.clusters == frozenset({"west"})
    assert pending_job(state, "default/other") is None
