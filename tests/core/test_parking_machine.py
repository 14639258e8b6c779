"""The parked cycle decides exactly what a full scan decides, step after step.

A hypothesis state machine keeps three scheduler states that receive the
same events (submissions, finishes, cancellations, refused dispatches,
preemptions and their confirmations, node health, quota changes (a ``max``
or a ``min``), the clock, clusters drained, added and removed):

* ``parked``: the cycle as the service runs it (every shortcut, parked
  tails, only changed reasons reported);
* ``scan``: the same memories but no parking: every waiting job is checked
  and reported every cycle;
* ``plain``: no shortcut at all, each job tried in full.

After every cycle ``parked`` and ``scan`` must agree on everything: the
admissions with their placements, the preemptions with their reasons, and
the reason of every pending job (``WaitBook.reason_of`` for the parked
cycle, the last reported ``Wait`` for the scan).  ``plain`` must agree on the
admissions, placements and preemptions (the memories may word a reason after
an earlier limit, see ``test_decisions_as_full_trial``).  The tree sets a
``preemptMinRuntime`` so that a job waiting only for a protection must be
looked at again when the clock passes its end.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fleet.core import events
from fleet.core.capacity import CapacityPlacer
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cycle import Admit, Decision, Preempt, Wait, cycle
from fleet.core.cycle_memory import ALL_SHORTCUTS, NO_SHORTCUTS, Shortcuts
from fleet.core.lifecycle import JobState
from fleet.core.resources import GPU, Resources
from fleet.core.state import SchedulerState
from fleet.testing.cells import rack_config
from tests.core.factories import make_job, make_node, make_nodes, make_state, make_tree

TREE: dict[str, Any] = {
    "name": "root",
    "min": {GPU: 20},
    "max": {GPU: 24},
    "children": [
        {
            "name": "org",
            "min": {GPU: 12},
            "max": {GPU: 20},
            "preemptMinRuntime": 30.0,
            "children": [
                {"name": "team-a", "min": {GPU: 6}, "max": {GPU: 16}},
                {"name": "team-b", "min": {GPU: 6}, "max": {GPU: 12}},
            ],
        },
        {"name": "team-c", "min": {GPU: 4}, "max": {GPU: 8}},
    ],
}
QUEUES = ["team-a", "team-b", "team-c"]
CLUSTERS = {"c1": make_nodes(2, gpus=8), "c2": make_nodes(2, gpus=4)}
SCAN = Shortcuts(parking=False)
MODES = {"parked": ALL_SHORTCUTS, "scan": SCAN, "plain": NO_SHORTCUTS}


def acts(decisions: list[Decision]) -> list[Decision]:
    return [d for d in decisions if isinstance(d, Admit | Preempt)]


class ParkingMachine(RuleBasedStateMachine):
    #: the tree every state starts from (and a replaced tree is edited from)
    tree: dict[str, Any] = TREE
    #: who submits the jobs, in turn (empty: nobody named)
    users: tuple[str, ...] = ("",)

    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, SchedulerState] = {name: self.make() for name in MODES}
        #: the scan's reasons, as a consumer of its Wait decisions keeps them
        self.scan_reasons: dict[str, str] = {}
        self.count = 0
        self.now = 0.0
        self.extra = 0

    def make(self) -> SchedulerState:
        """A fresh scheduler state (capacity placers)."""
        return make_state(self.tree, CLUSTERS)

    def node_name(self, node: int) -> str:
        return f"node-{node}"

    @property
    def parked(self) -> SchedulerState:
        return self.states["parked"]

    def each(self, event: events.Event) -> None:
        """Apply ``event`` to every state: it succeeds in all of them or in none."""
        failed: list[type[Exception] | None] = []
        for state in self.states.values():
            try:
                events.apply(state, event)
            except (KeyError, ValueError) as e:
                failed.append(type(e))
            else:
                failed.append(None)
        assert len(set(failed)) == 1, failed

    @rule(
        queue=st.sampled_from(QUEUES),
        pods=st.integers(1, 3),
        gpus=st.sampled_from([1, 2, 4, 8]),
        priority=st.sampled_from([-1, 10, 10, 100]),
        gang=st.booleans(),
        least=st.integers(0, 2),
        preemptible=st.booleans(),
        copies=st.integers(1, 6),
    )
    def submit(
        self,
        queue: str,
        pods: int,
        gpus: int,
        priority: int,
        gang: bool,
        least: int,
        preemptible: bool,
        copies: int,
    ) -> None:
        for _ in range(copies):
            self.count += 1
            job = make_job(
                f"j{self.count}",
                queue=queue,
                pods=pods,
                gpus=gpus,
                priority=priority,
                gang=gang,
                min_members=least,
                preemptible=preemptible or priority < 0,
                seq=self.count,
                user=self.users[self.count % len(self.users)],
            )
            self.each(events.Submitted(job))
            # Not looked at yet: no reason, even behind a parked tail.
            assert self.parked.waiting.reason_of(job) == ""

    @rule()
    def run_cycle(self) -> None:
        out = {
            name: cycle(state, self.now, shortcuts=MODES[name])
            for name, state in self.states.items()
        }
        for state in self.states.values():
            state.check_invariants()
        assert acts(out["parked"]) == acts(out["scan"])
        assert acts(out["plain"]) == acts(out["scan"])
        for d in out["scan"]:
            if isinstance(d, Wait):
                self.scan_reasons[d.job] = d.reason
        pending = self.parked.pending()
        parked = sum(1 for j in pending if j.key not in self.parked.waiting.single)
        event("parked jobs" if parked else "no parked job")
        runs = any(self.parked.waiting.runs.values())
        event("parked run of non-preemptible jobs" if runs else "no parked run")
        event(f"{len(pending) // 5 * 5}+ pending")
        assert [j.key for j in pending] == [j.key for j in self.states["scan"].pending()]
        for job in pending:
            assert self.parked.waiting.reason_of(job) == self.scan_reasons[job.key], job.key
        # Only changed reasons are reported by the parked cycle.
        reported = [d.job for d in out["parked"] if isinstance(d, Wait)]
        assert len(reported) == len(set(reported)) or any(
            "displaced" in d.reason for d in out["parked"] if isinstance(d, Wait)
        )
        for d in out["scan"]:
            if isinstance(d, Preempt) and not d.unit:
                self.each(events.Stopped(d.job))

    def _running(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(sorted(self.parked.running)))

    @precondition(lambda self: bool(self.parked.running))
    @rule(data=st.data(), succeeded=st.booleans())
    def finish(self, data: st.DataObject, succeeded: bool) -> None:
        key = self._running(data)
        if self.parked.phase[key] is JobState.ADMITTED:
            self.each(events.Dispatched(key))
        self.each(events.Finished(key, succeeded))

    @precondition(lambda self: bool(self.parked.running))
    @rule(data=st.data())
    def dispatch_fails(self, data: st.DataObject) -> None:
        key = self._running(data)
        if self.parked.phase[key] is JobState.ADMITTED:
            self.each(events.DispatchFailed(key, "member refused it"))

    @precondition(lambda self: bool(self.parked.running))
    @rule(data=st.data())
    def cancel_running(self, data: st.DataObject) -> None:
        self.each(events.Cancelled(self._running(data)))

    @precondition(lambda self: self.parked.pending_count() > 0)
    @rule(data=st.data())
    def cancel_pending(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(j.key for j in self.parked.pending())))
        self.each(events.Cancelled(key))

    @rule(cluster=st.sampled_from(sorted(CLUSTERS)), node=st.integers(0, 1), healthy=st.booleans())
    def node_health(self, cluster: str, node: int, healthy: bool) -> None:
        if cluster not in self.parked.placers:
            return
        self.each(events.NodeHealthChanged(cluster, self.node_name(node), healthy))
        for key in sorted(self.parked.stopping):
            self.each(events.Stopped(key))

    @rule(queue=st.sampled_from([*QUEUES, "org"]), new_max=st.integers(2, 20))
    def change_quota(self, queue: str, new_max: int) -> None:
        self.each(events.QuotaNodePatched(queue, max=Resources({GPU: new_max})))

    @rule(queue=st.sampled_from(QUEUES), new_min=st.integers(0, 8))
    def change_min(self, queue: str, new_min: int) -> None:
        """A queue's ``min`` moves: the reasons of its parked non-preemptible jobs
        are worded from it (and kept from one cycle to the next by their figures)."""
        self.each(events.QuotaNodePatched(queue, min=Resources({GPU: new_min})))

    @rule(
        name=st.sampled_from([*QUEUES, "org"]),
        runtime=st.sampled_from([None, 0.0, 5.0, 60.0]),
    )
    def replace_tree(self, name: str, runtime: float | None) -> None:
        """A whole new tree: the same shape, one node's preemptMinRuntime changed."""

        def edit(spec: dict[str, Any]) -> dict[str, Any]:
            out = dict(spec)
            if spec["name"] == name:
                out["preemptMinRuntime"] = runtime
            out["children"] = [edit(c) for c in spec.get("children", [])]
            return out

        self.each(events.QuotaTreeReplaced(make_node(edit(self.tree))))

    @rule(seconds=st.sampled_from([1.0, 10.0, 40.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.each(events.ClockAdvanced(self.now))

    @rule(cluster=st.sampled_from(sorted(CLUSTERS)))
    def drain(self, cluster: str) -> None:
        if cluster in self.parked.placers:
            self.each(events.ClusterDraining(cluster))

    @rule()
    def add_cluster(self) -> None:
        self.extra += 1
        name = f"x{self.extra}"
        for state in self.states.values():  # one placer each: placers hold state
            events.apply(state, events.ClusterAdded(CapacityPlacer(name, make_nodes(1, gpus=8))))

    @precondition(lambda self: len(self.parked.placers) > 1)
    @rule(data=st.data())
    def remove_cluster(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.parked.placers)))
        self.each(events.ClusterRemoved(name))

    @invariant()
    def same_world(self) -> None:
        keys = {name: sorted(s.phase.items()) for name, s in self.states.items()}
        assert keys["parked"] == keys["scan"] == keys["plain"]


ParkingMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestParkingMachine = ParkingMachine.TestCase


class CellParkingMachine(ParkingMachine):
    """The same machine on the cell allocator (the service's placer): team-a owns a
    VC of one 8-GPU node in c1, team-b one of a 4-GPU node in c2; team-c has none
    (its guaranteed jobs use the shared pools, the other node of each cluster)."""

    def make(self) -> SchedulerState:
        placers = {
            "c1": CellPlacer("c1", load_cell_config(rack_config(1, 2, 8, {"team-a": VC}))),
            "c2": CellPlacer("c2", load_cell_config(rack_config(1, 2, 4, {"team-b": VC}))),
        }
        return SchedulerState(make_tree(self.tree), placers)

    def node_name(self, node: int) -> str:
        return f"r0n{node}"


VC = [("RACK.NODE", 1)]
CellParkingMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCellParkingMachine = CellParkingMachine.TestCase


#: :data:`TREE` with per-user limits on two leaves (``limits.perUser``).
USER_TREE: dict[str, Any] = {
    **TREE,
    "children": [
        {
            **TREE["children"][0],
            "children": [
                {
                    **TREE["children"][0]["children"][0],
                    "limits": {"perUser": {"runningJobs": 3, GPU: 8}},
                },
                {**TREE["children"][0]["children"][1], "limits": {"perUser": {GPU: 4}}},
            ],
        },
        TREE["children"][1],
    ],
}


class UserParkingMachine(ParkingMachine):
    """The machine on a tree with per-user limits, the jobs submitted by several
    users in turn (and some by nobody)."""

    tree = USER_TREE
    users = ("alice", "bob", "", "alice")


UserParkingMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestUserParkingMachine = UserParkingMachine.TestCase


class UserCellParkingMachine(CellParkingMachine):
    """:class:`UserParkingMachine` on the cell allocator."""

    tree = USER_TREE
    users = ("alice", "bob", "", "alice")


UserCellParkingMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestUserCellParkingMachine = UserCellParkingMachine.TestCase
