"""Jobs that wait together behind a refused one (``fleet.core.bulk_wait.wait_all``): in the
borrowing pass also on room owed to guaranteed work, up to the first job that may
start, and never past a job the blocking resource does not stop.

Each scenario runs three cycles side by side: the parked cycle, the scan (no
parking) and the plain cycle (no shortcut).  The parked and scan cycles must
agree on every decision and every reason; the plain cycle, which tries every
job itself, on every admission and preemption.
"""

from __future__ import annotations

from typing import Any

from fleet.core.cycle import Admit, Decision, Preempt, Wait, cycle
from fleet.core.cycle_memory import ALL_SHORTCUTS, NO_SHORTCUTS, Shortcuts
from fleet.core.jobs import Job
from fleet.core.resources import GPU
from fleet.core.state import SchedulerState
from tests.core.factories import make_job, make_nodes, make_state, submit

MODES = {"parked": ALL_SHORTCUTS, "scan": Shortcuts(parking=False), "plain": NO_SHORTCUTS}
KEPT = "quota group root has room, but it is owed to guaranteed jobs still queued: "


def acts(decisions: list[Decision]) -> list[Decision]:
    return [d for d in decisions if isinstance(d, Admit | Preempt)]


def two_teams(root: int, team_a: int, team_b: int) -> dict[str, Any]:
    """A root of ``root`` GPUs (its min and its max) over team-a and team-b, guaranteed
    ``team_a`` and ``team_b`` GPUs and each allowed to borrow up to the root's."""
    return {
        "name": "root",
        "min": {GPU: root},
        "max": {GPU: root},
        "children": [
            {"name": "team-a", "min": {GPU: team_a}, "max": {GPU: root}},
            {"name": "team-b", "min": {GPU: team_b}, "max": {GPU: root}},
        ],
    }


class SideBySide:
    """One scheduler state per mode, fed the same jobs."""

    def __init__(self, tree: dict[str, Any], nodes: int, **capacity: str | int) -> None:
        self.states = {m: make_state(tree, {"c1": make_nodes(nodes, **capacity)}) for m in MODES}
        self.scan_reasons: dict[str, str] = {}

    def submit(self, *jobs: Job) -> None:
        for state in self.states.values():
            submit(state, *jobs)

    def cycle(self, now: float) -> list[Decision]:
        out = {m: cycle(state, now, shortcuts=MODES[m]) for m, state in self.states.items()}
        assert acts(out["parked"]) == acts(out["scan"]) == acts(out["plain"])
        self.scan_reasons.update({d.job: d.reason for d in out["scan"] if isinstance(d, Wait)})
        parked = self.parked
        assert {j.key: parked.waiting.reason_of(j) for j in parked.pending()} == {
            j.key: self.scan_reasons[j.key] for j in self.states["scan"].pending()
        }
        return out["parked"]

    @property
    def parked(self) -> SchedulerState:
        return self.states["parked"]

    def reason(self, name: str) -> str:
        (job,) = (j for j in self.parked.pending() if j.key == f"default/{name}")
        return self.parked.waiting.reason_of(job)

    def looked_at(self, name: str) -> bool:
        """Whether the parked cycle tried the job itself (else it waited in a group)."""
        return f"default/{name}" in self.parked.waiting.single


OWED_TREE: dict[str, Any] = two_teams(20, 8, 8)


def test_jobs_refused_on_owed_room_wait_together_up_to_the_first_that_may_start() -> None:
    # team-a uses 6 of its min 8, team-b 7 of 8: the root has 7 of 20 left.
    # Both queues' first jobs would borrow, so both wait for the borrowing
    # pass, where team-b's 1-GPU b2 (behind its b1) is owed 1 of the 7: a job
    # of team-a may borrow at most 6.  team-a (the lower share) is served
    # first: a1 (7) is kept out; a2 (8) and a3 (7) wait with it without being
    # tried; a4 (3) may start and does.  Then team-b's b1 starts; a5 (8) is
    # refused on the max, with a6 (7) parked behind it; b2 starts.
    runs = SideBySide(OWED_TREE, 4, gpus=8)
    runs.submit(
        make_job("a0", queue="team-a", gpus=6, seq=0),
        make_job("b0", queue="team-b", gpus=7, seq=1),
    )
    runs.cycle(0.0)
    needs = {"a1": 7, "a2": 8, "a3": 7, "a4": 3, "a5": 8, "a6": 7}
    team_a = [
        make_job(n, queue="team-a", gpus=g, seq=10 + i) for i, (n, g) in enumerate(needs.items())
    ]
    runs.submit(
        *team_a,
        make_job("b1", queue="team-b", gpus=2, seq=20),
        make_job("b2", queue="team-b", gpus=1, seq=21),
    )
    decisions = runs.cycle(1.0)
    admitted = ["default/a4", "default/b1", "default/b2"]
    assert [d.job for d in decisions if isinstance(d, Admit)] == admitted
    kept_7 = f"{KEPT}13 of 20 GPUs used; this job needs 7 and would borrow it"
    assert runs.reason("a1") == kept_7
    assert runs.reason("a2") == "quota group root is full: 13 of 20 GPUs used; this job needs 8"
    assert runs.reason("a3") == kept_7
    assert runs.reason("a5") == "quota group root is full: 18 of 20 GPUs used; this job needs 8"
    assert runs.reason("a6") == "quota group root is full: 18 of 20 GPUs used; this job needs 7"
    # Only the jobs looked at one by one report a Wait.
    assert [n for n in ("a1", "a2", "a3", "a5", "a6") if runs.looked_at(n)] == ["a1", "a5"]
    assert [d.job for d in decisions if isinstance(d, Wait)] == ["default/a1", "default/a5"]


def test_a_job_that_asks_none_of_the_blocking_resource_is_still_tried() -> None:
    # The root has 2 GPUs left; team-a's g1 and g2 (8 each) would borrow and
    # cannot, but c1 behind them asks no GPU and fits team-a's min: it starts.
    tree: dict[str, Any] = two_teams(16, 8, 8)
    runs = SideBySide(tree, 4, gpus=8, cpu=8)
    runs.submit(
        make_job("a0", queue="team-a", gpus=8, seq=0),
        make_job("b0", queue="team-b", gpus=6, seq=1),
    )
    runs.cycle(0.0)
    runs.submit(
        make_job("g1", queue="team-a", gpus=8, seq=10),
        make_job("g2", queue="team-a", gpus=8, seq=11),
        make_job("c1", queue="team-a", cpu="1", seq=12),
    )
    decisions = runs.cycle(1.0)
    assert [d.job for d in decisions if isinstance(d, Admit)] == ["default/c1"]
    assert runs.reason("g2") == "quota group root is full: 14 of 16 GPUs used; this job needs 8"
    assert not runs.looked_at("g2")


def test_jobs_that_could_preempt_too_little_of_their_own_queue_wait_together() -> None:
    # team-a is at its max (8) with low (2 GPUs, priority 10) and high (6, 100).
    # p1 (8) cannot start: preempting low frees 2 of the 6 missing.  p2 (6) and
    # p3 (4) behind it are no better off, so they wait without being tried; p4
    # (2) fits once low is preempted, and starts.
    tree: dict[str, Any] = {
        "name": "root",
        "max": {GPU: 24},
        "children": [{"name": "team-a", "max": {GPU: 8}}, {"name": "team-b", "max": {GPU: 8}}],
    }
    runs = SideBySide(tree, 4, gpus=8)
    runs.submit(
        make_job("low", queue="team-a", gpus=2, priority=10, seq=0),
        make_job("high", queue="team-a", gpus=6, priority=100, seq=1),
    )
    runs.cycle(0.0)
    runs.submit(
        *(
            make_job(f"p{i}", queue="team-a", gpus=g, priority=100, seq=10 + i)
            for i, g in enumerate((8, 6, 4, 2), start=1)
        )
    )
    decisions = runs.cycle(1.0)
    assert [d.job for d in decisions if isinstance(d, Admit)] == ["default/p4"]
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["default/low"]
    assert [n for n in ("p1", "p2", "p3") if runs.looked_at(n)] == ["p1"]
    assert runs.reason("p2") == "queue team-a is full: 8 of 8 GPUs used; this job needs 6"
    assert runs.reason("p3") == "queue team-a is full: 8 of 8 GPUs used; this job needs 4"


def test_a_job_kept_out_even_with_its_queues_lower_priorities_gone_preempts_nobody() -> None:
    # team-a (min 12) runs g (8 GPUs, priority 100) and low (2, priority 10);
    # team-b (min 8) runs 7.  The root has 3 of 20 left, and team-b's b2 is
    # owed 1 of them.  h1 (5, priority 100) would borrow: preempting low frees
    # 2, and 3 + 2 - 1 is still short of 5, so it waits on the full max without
    # a search among low and the rest; h2 and h3 behind it wait with it.
    tree: dict[str, Any] = two_teams(20, 12, 8)
    runs = SideBySide(tree, 4, gpus=8)
    runs.submit(
        make_job("g", queue="team-a", gpus=8, priority=100, seq=0),
        make_job("low", queue="team-a", gpus=2, priority=10, seq=1),
        make_job("b0", queue="team-b", gpus=7, seq=2),
    )
    runs.cycle(0.0)
    runs.submit(
        make_job("h1", queue="team-a", gpus=5, priority=100, seq=10),
        make_job("h2", queue="team-a", gpus=5, priority=100, seq=11),
        make_job("h3", queue="team-a", gpus=6, priority=100, seq=12),
        make_job("b1", queue="team-b", gpus=2, seq=20),
        make_job("b2", queue="team-b", gpus=1, seq=21),
    )
    decisions = runs.cycle(1.0)
    assert [d.job for d in decisions if isinstance(d, Admit)] == ["default/b1", "default/b2"]
    assert not [d for d in decisions if isinstance(d, Preempt)]
    assert runs.reason("h1") == "quota group root is full: 17 of 20 GPUs used; this job needs 5"
    assert [n for n in ("h1", "h2", "h3") if runs.looked_at(n)] == ["h1"]
