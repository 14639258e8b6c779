"""A hypothesis state machine over submit / cycle / finish / preempt / cancel / quota change
/ clock ticks.

After every step: quota usage and placers agree with a recount, usage is
never above ``max`` anywhere, no partial gang runs, a reclaim never takes
guaranteed work, and no running job has run past its own deadline or its
queue's ``maxRuntime`` (team-c's, which requeues).
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fleet.core import events, run_limits
from fleet.core.cycle import Admit, Preempt, cycle
from fleet.core.jobs import Mode
from fleet.core.lifecycle import JobState
from fleet.core.quota import QuotaError
from fleet.core.resources import GPU, Resources
from fleet.core.state import SchedulerState
from tests.core.factories import (
    cancel,
    confirm_stops,
    finish,
    make_job,
    make_nodes,
    make_state,
    submit,
)

TREE: dict[str, Any] = {
    "name": "root",
    "min": {"nvidia.com/gpu": 16},
    "max": {"nvidia.com/gpu": 24},
    "children": [
        {
            "name": "org",
            "min": {"nvidia.com/gpu": 12},
            "max": {"nvidia.com/gpu": 24},
            "children": [
                {"name": "team-a", "min": {"nvidia.com/gpu": 6}, "max": {"nvidia.com/gpu": 16}},
                {"name": "team-b", "min": {"nvidia.com/gpu": 6}, "max": {"nvidia.com/gpu": 12}},
            ],
        },
        {
            "name": "team-c",
            "min": {"nvidia.com/gpu": 4},
            "max": {"nvidia.com/gpu": 8},
            "maxRuntime": 40.0,
            "maxRuntimeAction": "Requeue",
        },
    ],
}
QUEUES = ["team-a", "team-b", "team-c"]


class CycleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        clusters = {"c1": make_nodes(2, gpus=8), "c2": make_nodes(2, gpus=4)}
        self.state: SchedulerState = make_state(TREE, clusters)
        self.count = 0
        self.max_lowered = False

    @rule(
        queue=st.sampled_from(QUEUES),
        pods=st.integers(1, 3),
        gpus=st.sampled_from([1, 2, 4, 8]),
        priority=st.sampled_from([-1, 10, 100]),
        gang=st.booleans(),
        preemptible=st.booleans(),
        deadline=st.sampled_from([None, None, 5.0, 25.0]),
    )
    def submit(
        self,
        queue: str,
        pods: int,
        gpus: int,
        priority: int,
        gang: bool,
        preemptible: bool,
        deadline: float | None = None,
    ) -> None:
        self.count += 1
        job = make_job(
            f"j{self.count}",
            queue=queue,
            pods=pods,
            gpus=gpus,
            priority=priority,
            gang=gang,
            preemptible=preemptible or priority < 0,
            deadline=deadline,
        )
        submit(self.state, job)

    @rule(queue=st.sampled_from(QUEUES))
    def elastic_then_urgent(self, queue: str) -> None:
        """An incremental job grows with borrowed quota, then a priority-100 job
        of its queue needs the room: growth steps become victims on their own
        (this once crashed on the growth charge's key)."""
        self.submit(queue, 3, 2, 10, False, True)
        self.run_cycle()
        self.submit(queue, 3, 2, 100, False, True)
        self.run_cycle()

    @rule()
    def run_cycle(self) -> None:
        before = {u.charge.key: u.charge.mode for r in self.state.running.values() for u in r.units}
        cut = {b.node for b in self.state.tree.over_limits()}
        # The cycle's clock never runs behind the core's (ticks move the core's).
        decisions = cycle(self.state, max(float(self.count), self.state.now))
        self.state.check_invariants()
        confirm_stops(self.state, decisions)
        for d in decisions:
            if isinstance(d, Preempt):
                mode = before[d.unit or d.job]
                # A queue a quota change left over its limits gives up its over-limit
                # jobs first, whatever their mode.
                over = cut & set(self.state.tree.path_to_root(d.queue))
                if "reclaimed" in d.reason:
                    # Otherwise borrowed jobs only.
                    assert mode is Mode.BORROWED or over, f"reclaim took {mode} job {d.job}"
                elif mode is Mode.GUARANTEED:
                    # Guaranteed work goes only to a higher priority of its queue
                    # (or, above, as an over-limit job after a quota cut).
                    assert "preempted by" in d.reason, d.reason
            if isinstance(d, Admit) and not d.grown:
                run = self.state.running.get(d.job)
                if run is not None:
                    assert len(run.pods) >= run.job.gang_size

    @precondition(lambda self: bool(self.state.running))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.state.running)))
        finish(self.state, key)

    @precondition(lambda self: bool(self.state.running))
    @rule(data=st.data())
    def preempt(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.state.running)))
        events.apply(self.state, events.DispatchFailed(key, "member refused it"))
        assert self.state.is_pending(key)
        assert not any(p.holds(key) for p in self.state.placers.values())

    @precondition(lambda self: self.state.pending_count() > 0)
    @rule(data=st.data())
    def cancel_pending(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(j.key for j in self.state.pending())))
        cancel(self.state, key)

    @rule(queue=st.sampled_from(QUEUES), new_max=st.integers(4, 16))
    def change_quota(self, queue: str, new_max: int) -> None:
        tree = self.state.tree
        try:
            tree.set_node(queue, max=Resources({GPU: new_max}))
        except QuotaError:
            return
        if tree.used(queue)[GPU] > new_max:
            self.max_lowered = True

    @rule(seconds=st.sampled_from([1.0, 5.0, 30.0]))
    def tick(self, seconds: float) -> None:
        """Time moves on: the jobs at a run-time limit end (team-c's are queued again)."""
        now = max(self.state.now, float(self.count)) + seconds
        for t in events.apply(self.state, events.ClockAdvanced(now)):
            assert t.event in (run_limits.DEADLINE_EXCEEDED, run_limits.MAX_RUNTIME_EXCEEDED)
            if t.new is JobState.PREEMPTED:
                events.apply(self.state, events.Stopped(t.job))

    @invariant()
    def no_job_runs_past_its_limit(self) -> None:
        for key, run in self.state.running.items():
            limit = self.state.run_limit(run.job)
            if limit is not None:
                assert self.state.run_time(key) < limit.seconds, key

    @invariant()
    def consistent(self) -> None:
        self.state.check_invariants()

    @invariant()
    def never_above_max_after_admission(self) -> None:
        if self.max_lowered:
            return  # an administrator lowered max below usage; nothing is evicted for it
        tree = self.state.tree
        for name in tree.nodes():
            limit = tree.max_of(name)
            if limit is not None:
                assert tree.used(name).first_over(limit) is None, f"{name} above max"


CycleMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCycleMachine = CycleMachine.TestCase
