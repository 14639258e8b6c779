"""The job state table: the one rule every state change goes through."""

from __future__ import annotations

import pytest

from fleet.core.lifecycle import (
    HOLDING,
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    JobState,
    transition,
)


def test_every_state_is_reachable_from_queued() -> None:
    seen = {JobState.QUEUED}
    frontier = [JobState.QUEUED]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(JobState)


def test_terminal_states_are_final_and_holding_states_can_end() -> None:
    assert {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED} == TERMINAL
    for state in HOLDING:
        assert JobState.PREEMPTED in TRANSITIONS[state]
        assert JobState.CANCELLED in TRANSITIONS[state]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (JobState.QUEUED, JobState.RUNNING),
        (JobState.ADMITTED, JobState.SUCCEEDED),
        (JobState.PREEMPTED, JobState.RUNNING),
        (JobState.SUCCEEDED, JobState.QUEUED),
    ],
)
def test_an_illegal_move_names_the_job_and_both_states(old: JobState, new: JobState) -> None:
    with pytest.raises(IllegalTransition, match=f"job ns/a: cannot move from {old} to {new}"):
        transition("ns/a", old, new)


def test_a_legal_move_returns_the_new_state() -> None:
    assert transition("ns/a", JobState.PREEMPTED, JobState.QUEUED) is JobState.QUEUED
