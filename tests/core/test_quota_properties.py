"""Hypothesis properties of the quota tree on random trees (depth <= 3) and requests.

A state machine admits only what ``classify`` allows, releases, reclaims and
preempts inside queues, and after every step checks the tree against an
independent model: usage never above max, guaranteed + borrowed = used (apart
from opportunistic job counts), and ``check_invariants``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fleet.core.charges import Charge
from fleet.core.jobs import Mode
from fleet.core.quota import (
    NON_PREEMPTIBLE_MIN,
    QuotaBlock,
    QuotaNodeSpec,
    QuotaTree,
    min_block,
)
from fleet.core.resources import GPU, MAX_JOBS, Resources
from tests.core.quota_factories import with_paths

NAMES = ("cpu", GPU, MAX_JOBS)
SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def trees(draw: st.DrawFn) -> QuotaNodeSpec:
    """A valid tree: children's mins split their parent's, maxes within the parent's."""
    counter = iter(range(1000))
    cap = {
        "cpu": draw(st.integers(0, 12)),
        GPU: draw(st.integers(0, 12)),
        MAX_JOBS: draw(st.one_of(st.just(50), st.integers(0, 12))),
    }
    root_max = draw(st.sampled_from(["same", "none", "bigger"]))

    def limits(
        parent_min: dict[str, int], parent_max: dict[str, int] | None
    ) -> tuple[list[dict[str, int]], list[dict[str, int] | None]]:
        n = draw(st.integers(1, 3))
        left = dict(parent_min)
        mins: list[dict[str, int]] = []
        maxes: list[dict[str, int] | None] = []
        for _ in range(n):
            mn = {}
            for r in NAMES:
                if left.get(r, 0) and draw(st.booleans()):
                    mn[r] = draw(st.integers(0, left[r]))
                    left[r] -= mn[r]
            mins.append(mn)
            if draw(st.booleans()):
                maxes.append(None)
                continue
            mx = {}
            for r in NAMES:
                if draw(st.booleans()):
                    lo = mn.get(r, 0)
                    hi = parent_max[r] if parent_max is not None and r in parent_max else 16
                    mx[r] = draw(st.integers(lo, max(lo, hi)))
            maxes.append(mx)
        return mins, maxes

    def make(mn: dict[str, int], mx: dict[str, int] | None, depth: int) -> QuotaNodeSpec:
        name = f"n{next(counter)}"
        children: tuple[QuotaNodeSpec, ...] = ()
        if depth < 3 and (depth == 1 or draw(st.booleans())):
            mins, maxes = limits(mn, mx)
            children = tuple(make(cm, cx, depth + 1) for cm, cx in zip(mins, maxes, strict=True))
        return QuotaNodeSpec(
            name=name,
            min=Resources(mn),
            max=None if mx is None else Resources(mx),
            namespaces=() if children else (f"ns-{name}",),
            children=children,
        )

    if root_max == "none":
        top: dict[str, int] | None = None
    elif root_max == "bigger":
        top = {r: v + 4 for r, v in cap.items()}
    else:
        top = dict(cap)
    return with_paths(make(cap, top, 1))


requests = st.builds(
    lambda cpu, gpu: Resources({"cpu": cpu, GPU: gpu, MAX_JOBS: 1}),
    st.integers(0, 6),
    st.integers(0, 4),
)
priorities = st.sampled_from([-1, 0, 5, 10, 100])
small_requests = st.builds(
    lambda cpu, gpu: Resources({"cpu": cpu, GPU: gpu, MAX_JOBS: 1}),
    st.integers(0, 1),
    st.integers(1, 2),
)


@dataclass
class Held:
    queue: str
    request: Resources
    mode: Mode
    priority: int
    preemptible: bool


class QuotaMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tree: QuotaTree | None = None
        self.held: dict[str, Held] = {}
        self.seq = 0

    @property
    def t(self) -> QuotaTree:
        assert self.tree is not None
        return self.tree

    @initialize(spec=trees())
    def build(self, spec: QuotaNodeSpec) -> None:
        self.tree = QuotaTree.build(spec)

    def _admit(self, queue: str, request: Resources, priority: int, preemptible: bool) -> bool:
        verdict = self.t.classify(queue, request, priority=priority, preemptible=preemptible)
        event(f"classify: {verdict if isinstance(verdict, Mode) else verdict.kind}")
        if priority >= 0 and not preemptible:
            # The cycle's parked runs ask this instead of building the block.
            stopped = isinstance(verdict, QuotaBlock) and verdict.kind == NON_PREEMPTIBLE_MIN
            assert self.t.stops_rigid(queue, request) == stopped
            if stopped:
                floor, guaranteed = self.t.guarantee_of(queue)
                assert min_block(queue, floor, guaranteed, request) == verdict
        if isinstance(verdict, QuotaBlock):
            if verdict.kind == "max":
                assert verdict.used + verdict.request > verdict.limit, verdict
                assert verdict.node in self.t.path_to_root(queue)
            else:
                assert not preemptible and priority >= 0
            return False
        assert (verdict is Mode.OPPORTUNISTIC) == (priority < 0)
        if not preemptible:
            assert verdict is not Mode.BORROWED
        key = f"j{self.seq}"
        self.t.admit(Charge(key, key, queue, priority, self.seq, preemptible, verdict, request))
        self.seq += 1
        self.held[key] = Held(queue, request, verdict, priority, preemptible)
        return True

    def _release(self, keys: list[str]) -> None:
        for key in keys:
            self.t.release(key)
            del self.held[key]

    @rule(data=st.data(), request=requests, priority=priorities, preemptible=st.booleans())
    def admit(
        self, data: st.DataObject, request: Resources, priority: int, preemptible: bool
    ) -> None:
        queue = data.draw(st.sampled_from(self.t.leaves()))
        self._admit(queue, request, priority, preemptible)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.held)))
        self._release([key])

    @rule(data=st.data(), apply=st.booleans())
    def reclaim(self, data: st.DataObject, apply: bool) -> None:
        with_min = [q for q in self.t.leaves() if self.t.min_of(q)]
        queue = data.draw(st.sampled_from(with_min or self.t.leaves()))
        # Mostly requests within the queue's min: that is when reclaim applies.
        floor = self.t.min_of(queue)
        request = Resources(
            {
                "cpu": data.draw(st.integers(0, max(floor["cpu"], 1))),
                GPU: data.draw(st.integers(0, max(floor[GPU], 1))),
                MAX_JOBS: 1,
            }
        )
        before = {n: self.t.used(n) for n in self.t.nodes()}
        victims = self.t.reclaim_victims(queue, request)
        assert {n: self.t.used(n) for n in self.t.nodes()} == before  # a pure query
        event(f"reclaim: {'none' if victims is None else len(victims)} victims")
        if victims is None:
            return
        assert len(set(victims)) == len(victims)
        for key in victims:
            job = self.held[key]
            assert job.mode is Mode.BORROWED
            assert job.preemptible
            assert job.queue != queue
        trial = self.t.copy()
        for key in victims:
            trial.release(key)
        assert trial.classify(queue, request, priority=0, preemptible=True) is Mode.GUARANTEED
        if apply:
            self._release(victims)
            assert self._admit(queue, request, 0, True)

    @rule(data=st.data(), request=requests, priority=priorities, apply=st.booleans())
    def preempt_in_queue(
        self, data: st.DataObject, request: Resources, priority: int, apply: bool
    ) -> None:
        queue = data.draw(st.sampled_from(self.t.leaves()))
        victims = self.t.queue_victims(queue, request, priority)
        event(f"queue_victims: {'none' if victims is None else len(victims)} victims")
        if victims is None:
            return
        for key in victims:
            job = self.held[key]
            assert job.queue == queue
            assert 0 <= job.priority < priority
            assert job.preemptible
        trial = self.t.copy()
        for key in victims:
            trial.release(key)
        verdict = trial.classify(queue, request, priority=max(priority, 0), preemptible=True)
        assert isinstance(verdict, Mode), verdict
        if apply:
            self._release(victims)
            assert self._admit(queue, request, max(priority, 0), True)

    @invariant()
    def tree_agrees_with_the_model(self) -> None:
        if self.tree is None:
            return
        t = self.t
        t.check_invariants()
        for name in t.nodes():
            under = [h for h in self.held.values() if name in t.path_to_root(h.queue)]
            used = Resources()
            guar = Resources()
            borr = Resources()
            oppo = 0
            for h in under:
                if h.mode is Mode.OPPORTUNISTIC:
                    used = used + {MAX_JOBS: h.request[MAX_JOBS]}
                    oppo += h.request[MAX_JOBS]
                    continue
                used = used + h.request
                if h.mode is Mode.GUARANTEED:
                    guar = guar + h.request
                else:
                    borr = borr + h.request
            assert t.used(name) == used
            assert t.guaranteed_used(name) == guar
            assert t.borrowed_used(name) == borr
            assert t.used(name) - guar - borr == {MAX_JOBS: oppo}
            assert t.admitted_count(name) == len(under)
            limit = t.max_of(name)
            if limit is not None:
                assert used.first_over(limit) is None, (name, used, limit)


QuotaMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestQuotaMachine = QuotaMachine.TestCase


@SETTINGS
@given(spec=trees(), data=st.data())
def test_release_restores_usage_exactly(spec: QuotaNodeSpec, data: st.DataObject) -> None:
    t = QuotaTree.build(spec)
    leaves = t.leaves()
    for i in range(data.draw(st.integers(0, 5))):
        queue = data.draw(st.sampled_from(leaves))
        request = data.draw(requests)
        verdict = t.classify(queue, request, priority=10, preemptible=True)
        if isinstance(verdict, Mode):
            t.admit(Charge(f"bg{i}", f"bg{i}", queue, 10, i, True, verdict, request))
    before = {n: (t.used(n), t.guaranteed_used(n), t.borrowed_used(n)) for n in t.nodes()}
    queue = data.draw(st.sampled_from(leaves))
    request = data.draw(requests)
    priority = data.draw(priorities)
    verdict = t.classify(queue, request, priority=priority, preemptible=True)
    if isinstance(verdict, Mode):
        t.admit(Charge("probe", "probe", queue, priority, 99, True, verdict, request))
        t.check_invariants()
        t.release("probe")
    assert {n: (t.used(n), t.guaranteed_used(n), t.borrowed_used(n)) for n in t.nodes()} == before
    t.check_invariants()


@SETTINGS
@given(spec=trees())
def test_random_trees_are_valid_and_round_trip(spec: QuotaNodeSpec) -> None:
    t = QuotaTree.build(spec)
    assert t.to_spec() == spec
    assert t.nodes()[0] == spec.name
    for leaf in t.leaves():
        assert t.path_to_root(leaf)[-1] == spec.name
        assert t.queue_for_namespace(f"ns-{leaf}") == leaf


@SETTINGS
@given(spec=trees(), data=st.data())
def test_reclaim_takes_only_borrowed_jobs_of_other_queues_and_makes_room(
    spec: QuotaNodeSpec, data: st.DataObject
) -> None:
    t = QuotaTree.build(spec)
    leaves = t.leaves()
    held: dict[str, tuple[str, Mode, bool]] = {}
    for i in range(data.draw(st.integers(0, 40))):
        queue = data.draw(st.sampled_from(leaves))
        request = data.draw(requests)
        priority = data.draw(priorities)
        preemptible = data.draw(st.booleans())
        verdict = t.classify(queue, request, priority=priority, preemptible=preemptible)
        if isinstance(verdict, Mode):
            t.admit(Charge(f"j{i}", f"j{i}", queue, priority, i, preemptible, verdict, request))
            held[f"j{i}"] = (queue, verdict, preemptible)
    with_min = [q for q in leaves if t.min_of(q)] or leaves
    queue = data.draw(st.sampled_from(with_min))
    floor = t.min_of(queue)
    request = Resources(
        {
            "cpu": data.draw(st.integers(0, max(floor["cpu"], 1))),
            GPU: data.draw(st.integers(0, max(floor[GPU], 1))),
            MAX_JOBS: 1,
        }
    )
    victims = t.reclaim_victims(queue, request)
    event(f"reclaim: {'none' if victims is None else len(victims)} victims")
    if victims is None:
        return
    trial = t.copy()
    for key in victims:
        owner, mode, preemptible = held[key]
        assert owner != queue
        assert mode is Mode.BORROWED
        assert preemptible
        trial.release(key)
    assert trial.classify(queue, request, priority=0, preemptible=True) is Mode.GUARANTEED
    t.check_invariants()
    trial.check_invariants()


@SETTINGS
@given(spec=trees(), data=st.data())
def test_bounded_reclaim_search_answers_as_the_search_over_every_leaf(
    spec: QuotaNodeSpec, data: st.DataObject
) -> None:
    """The reclaim search seeded only with leaves that could give (subtrees at or
    below their min left out) picks the same victims, in the same order, as
    the search seeded with every leaf under the blocking node."""
    t = QuotaTree.build(spec)
    leaves = t.leaves()
    for i in range(data.draw(st.integers(0, 60))):
        queue = data.draw(st.sampled_from(leaves))
        request = data.draw(requests)
        priority = data.draw(priorities)
        preemptible = data.draw(st.booleans())
        verdict = t.classify(queue, request, priority=priority, preemptible=preemptible)
        if isinstance(verdict, Mode):
            t.admit(Charge(f"j{i}", f"j{i}", queue, priority, i, preemptible, verdict, request))
        if i % 7 == 6 and t.jobs_of(queue):
            t.release(t.jobs_of(queue)[0])  # guaranteed usage drops under borrowed work
    for queue in leaves:
        floor = t.min_of(queue)
        request = Resources(
            {
                "cpu": data.draw(st.integers(0, max(floor["cpu"], 1))),
                GPU: data.draw(st.integers(0, max(floor[GPU], 1))),
                MAX_JOBS: 1,
            }
        )
        bounded = t.reclaim_victims(queue, request)
        reference = t.reclaim_victims(queue, request, bounded=False)
        event(f"reclaim: {'none' if bounded is None else len(bounded)} victims")
        assert bounded == reference


@st.composite
def wide_trees(draw: st.DrawFn) -> QuotaNodeSpec:
    """A full tree of 2-4 groups of 2-5 leaves whose ``min`` sums to the root's
    ``max`` (the cycle benchmark's shape, small): many leaves borrow at once."""
    shape = draw(st.lists(st.integers(2, 5), min_size=2, max_size=4))
    mins = [
        [{"cpu": draw(st.integers(0, 4)), GPU: draw(st.integers(1, 6))} for _ in range(n)]
        for n in shape
    ]
    total = {r: sum(mn[r] for group in mins for mn in group) for r in ("cpu", GPU)}
    groups = []
    for g, group in enumerate(mins):
        group_min = {r: sum(mn[r] for mn in group) for r in total}
        group_max = {r: min(total[r], 2 * v + 2) for r, v in group_min.items()}
        leaves = tuple(
            QuotaNodeSpec(
                name=f"q{g}-{i}",
                min=Resources(mn),
                max=Resources(
                    {r: min(group_max[r], v * draw(st.integers(1, 4)) + 2) for r, v in mn.items()}
                ),
                namespaces=(f"ns-{g}-{i}",),
            )
            for i, mn in enumerate(group)
        )
        groups.append(
            QuotaNodeSpec(
                name=f"g{g}", min=Resources(group_min), max=Resources(group_max), children=leaves
            )
        )
    return with_paths(
        QuotaNodeSpec(
            name="root", min=Resources(total), max=Resources(total), children=tuple(groups)
        )
    )


@SETTINGS
@given(spec=st.one_of(trees(), wide_trees()), data=st.data())
def test_the_kept_lending_order_follows_admissions_and_releases(
    spec: QuotaNodeSpec, data: st.DataObject
) -> None:
    """Searches read the lending leaves from an order the tree keeps between them;
    after any admissions and releases the search still picks what the search
    over every leaf picks, and the kept order equals a recount."""
    t = QuotaTree.build(spec)
    leaves = t.leaves()
    # Small jobs make searches that need several victims, from one leaf or many.
    sizes = data.draw(st.sampled_from([requests, small_requests]))
    for step in range(data.draw(st.integers(1, 5))):
        # A queue's jobs end (it is below its min again) while the others fill
        # the room: the next searches have borrowed jobs to reclaim.
        for key in t.jobs_of(data.draw(st.sampled_from(leaves))):
            t.release(key)
        for i in range(data.draw(st.integers(0, 40))):
            n = 100 * step + i
            queue = data.draw(st.sampled_from(leaves))
            request = data.draw(sizes)
            priority = data.draw(priorities)
            preemptible = data.draw(st.booleans())
            verdict = t.classify(queue, request, priority=priority, preemptible=preemptible)
            if isinstance(verdict, Mode):
                t.admit(Charge(f"j{n}", f"j{n}", queue, priority, n, preemptible, verdict, request))
        for queue in leaves:
            floor = t.min_of(queue)
            request = Resources(
                {
                    "cpu": data.draw(st.integers(0, floor["cpu"])),
                    GPU: data.draw(st.integers(0, max(floor[GPU], 1))),
                    MAX_JOBS: 1,
                }
            )
            kept = t.reclaim_victims(queue, request)
            assert kept == t.reclaim_victims(queue, request, bounded=False)
            event(f"reclaim: {'none' if kept is None else len(kept)} victims")
        t.check_invariants()
