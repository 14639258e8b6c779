"""Unit tests of the quota tree: validation, classification, accounting, victims, changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from fleet.core.charges import Charge
from fleet.core.checks import InvariantError
from fleet.core.jobs import Mode
from fleet.core.quota import MAX, QuotaBlock, QuotaError, QuotaNodeSpec, QuotaTree
from fleet.core.resources import MAX_JOBS, Resources, typed_gpu
from tests.core.quota_factories import (
    Ledger,
    ack_tree,
    flat_tree,
    node,
    req,
    res,
    tree,
    with_paths,
)

GPU = "nvidia.com/gpu"
MakeLedger = Callable[[QuotaTree], Ledger]
A100 = typed_gpu("A100")


@pytest.fixture
def ledgers() -> Iterator[list[Ledger]]:
    """Ledgers made by a test; their trees' invariants are checked at teardown."""
    made: list[Ledger] = []
    yield made
    for ledger in made:
        ledger.tree.check_invariants()


@pytest.fixture
def ledger_for(ledgers: list[Ledger]) -> MakeLedger:
    def make(t: QuotaTree) -> Ledger:
        ledger = Ledger(t)
        ledgers.append(ledger)
        return ledger

    return make


# Validation ------------------------------------------------------------------

INVALID = [
    pytest.param(
        node("root", node("a"), node("a")),
        "a",
        None,
        "spec.root.children[1].name",
        id="duplicate-node-name",
    ),
    pytest.param(
        node("root", node("a", namespaces=("ml",)), node("b", namespaces=("x", "ml"))),
        "b",
        None,
        "spec.root.children[1].namespaces[1]",
        id="namespace-in-two-leaves",
    ),
    pytest.param(
        node("root", node("a", node("a.1"), namespaces=("ml",))),
        "a",
        None,
        "spec.root.children[0].namespaces",
        id="namespaces-on-non-leaf",
    ),
    pytest.param(
        node("root", node("a", min={"cpu": 6}), node("b", min={"cpu": 6}), min={"cpu": 10}),
        "root",
        "cpu",
        "spec.root.min",
        id="children-min-sum-above-parent-min",
    ),
    pytest.param(
        node("root", node("a", min={GPU: 1}), min={"cpu": 10}),
        "root",
        GPU,
        "spec.root.min",
        id="child-min-on-resource-parent-min-lacks",
    ),
    pytest.param(
        node("root", node("a", max={"cpu": 20}), max={"cpu": 10}),
        "a",
        "cpu",
        "spec.root.children[0].max",
        id="child-max-above-parent-max",
    ),
    pytest.param(
        node("root", node("a", node("a.1", min={"cpu": 30}, max={"cpu": 20}))),
        "a.1",
        "cpu",
        "spec.root.children[0].children[0].min",
        id="min-above-max",
    ),
    pytest.param(
        node("root", QuotaNodeSpec("a", min=Resources({"cpu": -1000}))),
        "a",
        "cpu",
        "spec.root.children[0].min",
        id="negative-min",
    ),
    pytest.param(
        node("root", QuotaNodeSpec("a", max=Resources({GPU: -2}))),
        "a",
        GPU,
        "spec.root.children[0].max",
        id="negative-max",
    ),
    pytest.param(node("root", node("")), "", None, "spec.root.children[0].name", id="empty-name"),
]


@pytest.mark.parametrize(("root", "name", "resource", "path"), INVALID)
def test_build_rejects(root: QuotaNodeSpec, name: str, resource: str | None, path: str) -> None:
    with pytest.raises(QuotaError) as info:
        tree(root)
    assert info.value.path == path
    assert info.value.node == name
    message = str(info.value)
    assert f"{name!r}" in message
    assert path in message
    if resource is not None:
        assert resource in message


def test_min_above_max_message_reads_well() -> None:
    with pytest.raises(QuotaError) as info:
        tree(node("root", node("a", node("a.1", min={"cpu": 30}, max={"cpu": 20}))))
    assert str(info.value) == (
        "node 'a.1': min cpu 30 is above max 20 (spec.root.children[0].children[0].min)"
    )


def test_every_broken_rule_names_its_node_first() -> None:
    root = node(
        "root",
        node(
            "a",
            node("a.1", min={"cpu": 30}, max={"cpu": 20}, namespaces=("ml",)),
            min={"cpu": 6},
            max={"cpu": 20},
            namespaces=("x",),
        ),
        node("b", min={"cpu": 6}, namespaces=("ml",)),
        QuotaNodeSpec("c", max=Resources({GPU: -2})),
        node("a"),
        min={"cpu": 10},
        max={"cpu": 10},
    )
    with pytest.raises(QuotaError) as info:
        tree(root)
    errors = info.value.errors
    assert [(e.node, e.path) for e in errors] == [
        ("a", "spec.root.children[0].max"),
        ("a", "spec.root.children[0].namespaces"),
        ("a.1", "spec.root.children[0].children[0].min"),
        ("a", "spec.root.children[0].min"),
        ("b", "spec.root.children[1].namespaces[0]"),
        ("c", "spec.root.children[2].max"),
        ("c", "spec.root.children[2].min"),
        ("a", "spec.root.children[3].name"),
        ("root", "spec.root.min"),
    ]
    for e in errors:
        assert e.message.startswith(f"node {e.node!r}: "), e
        assert str(e) == f"{e.message} ({e.path})"
    assert errors[5].message == f"node 'c': max {GPU} -2 is negative"


def test_quota_error_is_a_value_error() -> None:
    assert issubclass(QuotaError, ValueError)


VALID = [
    pytest.param(node("root", node("a"), max={"cpu": 10}), id="absent-child-max-is-fine"),
    pytest.param(
        node("root", node("a", max={GPU: 99}), max={"cpu": 10}),
        id="child-max-on-resource-parent-max-lacks",
    ),
    pytest.param(
        node("root", node("a", min={GPU: 4}, max={"cpu": 1}), min={GPU: 4}),
        id="min-on-resource-max-lacks",
    ),
    pytest.param(node("root", node("a", namespaces=("x", "x"))), id="namespace-twice-in-one-leaf"),
    pytest.param(
        node("root", node("a", min={"cpu": 5}), node("b", min={"cpu": 5}), min={"cpu": 10}),
        id="children-min-sum-equal-parent-min",
    ),
]


@pytest.mark.parametrize("root", VALID)
def test_build_accepts(root: QuotaNodeSpec) -> None:
    tree(root).check_invariants()


def test_seed_example_loads_with_a_root_warning() -> None:
    seed = node(
        "root",
        node(
            "child-2",
            max={MAX_JOBS: 1, "cpu": 10000, GPU: 10000, "memory": "10000Gi"},
            namespaces=("default",),
        ),
        max={"cpu": 999900, "memory": "400000Gi", MAX_JOBS: 10000000000, GPU: 100000},
        min={"cpu": 9999, "memory": "40Gi"},
    )
    t = tree(seed)
    assert len(t.warnings) == 1
    assert "'root'" in t.warnings[0]
    assert t.queue_for_namespace("default") == "child-2"


def test_root_with_min_equal_max_has_no_warning() -> None:
    assert ack_tree().warnings == []


# Structure -------------------------------------------------------------------


def test_structure_queries() -> None:
    t = tree(
        node(
            "root",
            node("a", node("a.1", namespaces=("ml", "cv")), node("a.2"), min={"cpu": 4}),
            node("b", namespaces=("web",), max={"cpu": 8}),
            min={"cpu": 4},
        )
    )
    assert t.nodes() == ["root", "a", "a.1", "a.2", "b"]
    assert t.leaves() == ["a.1", "a.2", "b"]
    assert t.path_to_root("a.2") == ["a.2", "a", "root"]
    assert t.parent("a.1") == "a"
    assert t.parent("root") is None
    assert t.is_leaf("b") and not t.is_leaf("a")
    assert t.has_node("a.2") and not t.has_node("c")
    assert t.namespaces_of("a.1") == ("ml", "cv")
    assert t.queue_for_namespace("cv") == "a.1"
    assert t.queue_for_namespace("nope") is None
    assert t.min_of("a") == res(cpu=4)
    assert t.max_of("b") == res(cpu=8)
    assert t.max_of("a") is None
    assert t.spec_path("a.2") == "spec.root.children[0].children[1]"


def test_unknown_node_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="nope"):
        ack_tree().min_of("nope")


def test_classify_on_a_non_leaf_is_rejected() -> None:
    with pytest.raises(ValueError, match="not a leaf"):
        ack_tree().classify("a", req(cpu=1), priority=10, preemptible=True)


# Classification --------------------------------------------------------------


def team(**limits: dict[str, str | int]) -> QuotaTree:
    """Root (64 GPUs, 100 cpu) over ``team-a`` with the given min/max and ``team-b``."""
    cap = {GPU: 64, "cpu": 100, MAX_JOBS: 100}
    return tree(node("root", node("team-a", **limits), node("team-b"), min=cap, max=cap))


CLASSIFY = [
    pytest.param(team(min={GPU: 8}), [], req({GPU: 8}), 10, True, Mode.GUARANTEED, id="within-min"),
    pytest.param(
        team(min={GPU: 8}), [req({GPU: 4})], req({GPU: 8}), 10, True, Mode.BORROWED, id="above-min"
    ),
    pytest.param(
        team(min={GPU: 8}),
        [],
        req({GPU: 8, "cpu": 40}),
        10,
        True,
        Mode.GUARANTEED,
        id="min-ignores-resources-it-does-not-name",
    ),
    pytest.param(team(), [], req(cpu=1), 10, True, Mode.BORROWED, id="empty-min-borrows"),
    pytest.param(
        team(min={"cpu": 10, MAX_JOBS: 1}),
        [req(cpu=1)],
        req(cpu=1),
        10,
        True,
        Mode.BORROWED,
        id="max-jobs-in-min-limits-the-guarantee",
    ),
    pytest.param(
        team(min={"cpu": 10}),
        [req(cpu=1)] * 5,
        req(cpu=1),
        10,
        True,
        Mode.GUARANTEED,
        id="max-jobs-not-in-min-is-not-compared",
    ),
    pytest.param(
        team(max={GPU: 8}), [req({GPU: 8})], req({GPU: 64}), -1, True, Mode.OPPORTUNISTIC,
        id="opportunistic-ignores-max",
    ),
    pytest.param(
        team(min={GPU: 8}), [], req({GPU: 8}), 120, False, Mode.GUARANTEED,
        id="non-preemptible-within-min",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("t", "before", "request_", "priority", "preemptible", "mode"), CLASSIFY)
def test_classify_mode(
    t: QuotaTree,
    before: list[Resources],
    request_: Resources,
    priority: int,
    preemptible: bool,
    mode: Mode,
) -> None:
    ledger = Ledger(t)
    for r in before:
        ledger.admit("team-a", r)
    verdict = t.classify("team-a", request_, priority=priority, preemptible=preemptible)
    assert verdict is mode
    t.check_invariants()


def blocked(
    t: QuotaTree, queue: str, request: Resources, *, priority: int = 10, preemptible: bool = True
) -> QuotaBlock:
    verdict = t.classify(queue, request, priority=priority, preemptible=preemptible)
    assert isinstance(verdict, QuotaBlock), verdict
    return verdict


def test_block_at_leaf_max_names_queue_and_limit() -> None:
    t = team(max={GPU: 16})
    Ledger(t).admit("team-a", req({GPU: 16}))
    block = blocked(t, "team-a", req({GPU: 8}))
    assert (block.kind, block.node, block.resource) == ("max", "team-a", GPU)
    assert (block.used, block.request, block.limit) == (16, 8, 16)
    assert block.reason == "queue team-a is full: 16 of 16 GPUs used; this job needs 8"


def test_block_at_inner_node_max_names_the_node(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    for _ in range(4):
        ledger.admit("a.1", req(cpu=5))
        ledger.admit("a.2", req(cpu=5))
    block = blocked(ledger.tree, "b.1", req(cpu=5))
    assert (block.node, block.leaf) == ("root", False)
    assert block.reason == "quota group root is full: 40 of 40 CPUs used; this job needs 5"


def test_block_checks_the_leaf_first(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    for _ in range(4):
        ledger.admit("a.1", req(cpu=5))
    for _ in range(4):
        ledger.admit("a.2", req(cpu=5))
    assert blocked(ledger.tree, "a.1", req(cpu=5)).node == "a.1"


def test_block_on_memory_formats_quantities() -> None:
    t = team(max={"memory": "1Gi"})
    block = blocked(t, "team-a", req(memory="2Gi"))
    assert block.reason == "queue team-a is full: 0 of 1 GiB memory used; this job needs 2 GiB"


def test_max_jobs_blocks_every_mode() -> None:
    t = team(max={MAX_JOBS: 1})
    Ledger(t).admit("team-a", req(cpu=1))
    for priority in (10, -1):
        block = blocked(t, "team-a", req(cpu=1), priority=priority)
        assert block.resource == MAX_JOBS
        assert block.kind == "max"


def test_opportunistic_counts_against_max_jobs() -> None:
    t = team(max={MAX_JOBS: 1})
    Ledger(t).admit("team-a", req({GPU: 8}), priority=-1, expect=Mode.OPPORTUNISTIC)
    assert blocked(t, "team-a", req(cpu=1)).resource == MAX_JOBS


def test_non_preemptible_above_min_is_blocked() -> None:
    t = team(min={GPU: 8})
    Ledger(t).admit("team-a", req({GPU: 8}), preemptible=False, expect=Mode.GUARANTEED)
    block = blocked(t, "team-a", req({GPU: 8}), preemptible=False)
    assert block.kind == "non-preemptible-min"
    assert (block.node, block.resource, block.used, block.limit) == ("team-a", GPU, 8, 8)
    assert block.reason.startswith(
        "the guarantee (min) of queue team-a is full: 8 of 8 GPUs guaranteed in use"
    )


def test_non_preemptible_in_a_queue_without_min_is_blocked() -> None:
    block = blocked(team(), "team-a", req(cpu=1), preemptible=False)
    assert block.kind == "non-preemptible-min"


def test_non_preemptible_within_min_still_respects_max() -> None:
    t = team(min={GPU: 8}, max={"cpu": 4})
    block = blocked(t, "team-a", req({GPU: 8, "cpu": 8}), preemptible=False)
    assert (block.kind, block.resource) == ("max", "cpu")


def test_typed_gpu_quota_limits_its_sku_while_all_gpus_are_charged(ledger_for: MakeLedger) -> None:
    t = tree(
        node(
            "root",
            node("team-a", max={A100: 8, GPU: 16}),
            min={GPU: 32},
            max={GPU: 32},
        )
    )
    ledger = ledger_for(t)
    ledger.admit("team-a", req({GPU: 8, A100: 8}))
    block = blocked(t, "team-a", req({GPU: 8, A100: 8}))
    assert (block.resource, block.used, block.limit) == (A100, 8, 8)
    ledger.admit("team-a", req({GPU: 8}))  # another SKU fits the untyped limit
    assert t.used("team-a")[GPU] == 16
    assert t.used("root") == req({GPU: 16, A100: 8}) + {MAX_JOBS: 1}
    assert blocked(t, "team-a", req({GPU: 1})).resource == GPU


# Accounting ------------------------------------------------------------------


def test_admit_charges_every_node_of_the_path(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    t = ledger.tree
    g = ledger.admit("a.1", req(cpu=10), expect=Mode.GUARANTEED)
    b = ledger.admit("a.1", req(cpu=5), expect=Mode.BORROWED)
    o = ledger.admit("a.1", req(cpu=40), priority=-1, expect=Mode.OPPORTUNISTIC)
    for name in ("a.1", "a", "root"):
        assert t.used(name) == res(cpu=15) + {MAX_JOBS: 3}
        assert t.guaranteed_used(name) == req(cpu=10)
        assert t.borrowed_used(name) == req(cpu=5)
        assert t.admitted_count(name) == 3
    for name in ("a.2", "b", "b.1"):
        assert t.used(name) == res()
        assert t.admitted_count(name) == 0
    assert [t.mode_of(k) for k in (g, b, o)] == [Mode.GUARANTEED, Mode.BORROWED, Mode.OPPORTUNISTIC]
    assert t.jobs_of("a.1") == [g, b, o]


def test_release_restores_the_path(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    t = ledger.tree
    keys = [ledger.admit("a.1", req(cpu=5), priority=p) for p in (10, 10, 10, -1)]
    ledger.release(*keys)
    for name in t.nodes():
        assert t.used(name) == res()
        assert t.admitted_count(name) == 0
    assert not any(t.holds(k) for k in keys)


def test_release_of_an_unknown_key_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        ack_tree().release("nope")


def test_admitting_a_key_twice_is_rejected() -> None:
    t = ack_tree()
    t.admit(Charge("j", "j", "a.1", 1, 1, True, Mode.BORROWED, req(cpu=1)))
    with pytest.raises(ValueError, match="already admitted"):
        t.admit(Charge("j", "j", "a.2", 1, 2, True, Mode.BORROWED, req(cpu=1)))


@pytest.mark.corrupts_state
def test_check_invariants_detects_a_drifted_counter() -> None:
    t = ack_tree()
    Ledger(t).admit("a.1", req(cpu=5))
    t._used[0]["cpu"] += 1  # simulate a bookkeeping bug
    drift = r"root: used drifted: kept \{'cpu': 5001, .*recount \{'cpu': 5000, "
    with pytest.raises(InvariantError, match=drift):
        t.check_invariants()


@pytest.mark.corrupts_state
def test_check_invariants_detects_usage_above_max() -> None:
    t = ack_tree()
    t.admit(Charge("j", "j", "a.1", 1, 1, True, Mode.BORROWED, req(cpu=25)))
    with pytest.raises(InvariantError, match="used is above max"):
        t.check_invariants()


def test_copy_is_independent() -> None:
    t = ack_tree()
    Ledger(t).admit("a.1", req(cpu=5))
    c = t.copy()
    Ledger(c).admit("a.2", req(cpu=5), key="other")
    c.set_node("b.1", max=res(cpu=15))
    assert t.used("root") == req(cpu=5)
    assert c.used("root") == res(cpu=10) + {MAX_JOBS: 2}
    assert not t.holds("other")
    assert t.max_of("b.1") == res(cpu=20)
    t.check_invariants()
    c.check_invariants()


# Reclaim ---------------------------------------------------------------------


def fill_a(ledger: Ledger) -> None:
    """ACK walkthrough start: a.1 and a.2 run four 5-cpu jobs each (2 guaranteed, 2 borrowed)."""
    for queue in ("a.1", "a.2"):
        for mode in (Mode.GUARANTEED, Mode.GUARANTEED, Mode.BORROWED, Mode.BORROWED):
            ledger.admit(queue, req(cpu=5), expect=mode)


def reclaim_and_admit(ledger: Ledger, queue: str, request: Resources) -> list[str]:
    t = ledger.tree
    victims = t.reclaim_victims(queue, request)
    assert victims is not None
    ledger.release(*victims)
    ledger.admit(queue, request, expect=Mode.GUARANTEED)
    return [ledger_queue_of(v) for v in victims]


def ledger_queue_of(key: str) -> str:
    return key.split("/")[0]


def test_reclaim_follows_the_ack_walkthrough(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    fill_a(ledger)
    assert reclaim_and_admit(ledger, "b.1", req(cpu=5)) == ["a.2"]
    assert reclaim_and_admit(ledger, "b.1", req(cpu=5)) == ["a.1"]
    assert [ledger.count(q) for q in ("a.1", "a.2", "b.1")] == [3, 3, 2]
    assert reclaim_and_admit(ledger, "b.2", req(cpu=5)) == ["a.2"]
    assert reclaim_and_admit(ledger, "b.2", req(cpu=5)) == ["a.1"]
    assert [ledger.count(q) for q in ("a.1", "a.2", "b.1", "b.2")] == [2, 2, 2, 2]
    # Everything left in a is guaranteed: nothing more to reclaim.
    assert ledger.tree.borrowed_used("a") == res()


def test_reclaim_spreads_one_request_over_the_biggest_borrowers(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    fill_a(ledger)
    victims = ledger.tree.reclaim_victims("b.1", req(cpu=10))
    assert victims is not None
    assert [ledger_queue_of(v) for v in victims] == ["a.2", "a.1"]


def test_reclaim_comes_back_to_a_leaf_that_still_borrows_most(ledger_for: MakeLedger) -> None:
    """After a pick, the leaf it came from is weighed again against the leaves not
    looked at yet (the kept lending order and the leaves already taken from)."""
    t = flat_tree(
        node("a", min={"cpu": 1}, max={"cpu": 8}),
        node("b", min={"cpu": 1}, max={"cpu": 8}),
        node("r", min={"cpu": 4}, max={"cpu": 8}),
        capacity={"cpu": 8},
    )
    ledger = ledger_for(t)
    for queue, count in (("a", 5), ("b", 2)):
        for _ in range(count):
            ledger.admit(queue, req(cpu=1))
    assert t.reclaim_victims("r", req(cpu=2))  # the tree keeps its lending order from now on
    newest_b = ledger.admit("b", req(cpu=1), expect=Mode.BORROWED)
    # a borrows 4, b borrows 2: a, a (2 left each, b's newest is the newest), then b.
    victims = t.reclaim_victims("r", req(cpu=3))
    assert victims is not None
    assert [ledger_queue_of(v) for v in victims] == ["a", "a", "b"]
    assert victims[-1] == newest_b
    assert victims == t.reclaim_victims("r", req(cpu=3), bounded=False)
    t.check_invariants()


def test_reclaim_is_a_pure_query(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    fill_a(ledger)
    before = {n: ledger.tree.used(n) for n in ledger.tree.nodes()}
    ledger.tree.reclaim_victims("b.1", req(cpu=20))
    assert {n: ledger.tree.used(n) for n in ledger.tree.nodes()} == before


def test_reclaim_prefers_lowest_priority_over_biggest_borrower(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    for queue, priority in (("a.1", 10), ("a.2", 5)):
        for _ in range(2):
            ledger.admit(queue, req(cpu=5), priority=priority, expect=Mode.GUARANTEED)
    for _ in range(2):
        ledger.admit("a.1", req(cpu=5), priority=10, expect=Mode.BORROWED)
    low = ledger.admit("a.2", req(cpu=5), priority=5, expect=Mode.BORROWED)
    ledger.admit("a.2", req(cpu=5), priority=50, expect=Mode.BORROWED)
    assert ledger.tree.reclaim_victims("b.1", req(cpu=5)) == [low]


def test_reclaim_takes_the_newest_among_equals(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    for _ in range(2):
        ledger.admit("a.1", req(cpu=5), expect=Mode.GUARANTEED)
    older = ledger.admit("a.1", req(cpu=5), expect=Mode.BORROWED)
    newer = ledger.admit("a.1", req(cpu=5), expect=Mode.BORROWED)
    ledger.admit("a.2", req(cpu=10), expect=Mode.GUARANTEED)
    ledger.admit("b.2", req(cpu=10), expect=Mode.GUARANTEED)
    assert ledger.tree.reclaim_victims("b.1", req(cpu=5)) == [newer]
    assert older != newer


def test_reclaim_never_takes_guaranteed_or_non_preemptible_or_opportunistic(
    ledger_for: MakeLedger,
) -> None:
    ledger = ledger_for(ack_tree())
    borrowed = set()
    for queue in ("a.1", "a.2"):
        ledger.admit(queue, req(cpu=10), expect=Mode.GUARANTEED)
        borrowed.add(ledger.admit(queue, req(cpu=10), expect=Mode.BORROWED))
        ledger.admit(queue, req(cpu=40), priority=-1, expect=Mode.OPPORTUNISTIC)
    taken = set()
    for queue in ("b.1", "b.2"):
        victims = ledger.tree.reclaim_victims(queue, req(cpu=10))
        assert victims is not None and len(victims) == 1
        taken.update(victims)
        ledger.release(*victims)
        ledger.admit(queue, req(cpu=10), expect=Mode.GUARANTEED)
    assert taken == borrowed
    assert ledger.tree.used("root")["cpu"] == 40_000


def test_reclaim_skips_non_preemptible_borrowed_jobs(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    t = ledger.tree
    ledger.admit("a.1", req(cpu=10), expect=Mode.GUARANTEED)
    # Built directly: the cycle never admits a non-preemptible borrowed job,
    # but state rebuilt after a quota change may hold one.
    t.admit(Charge("pinned", "pinned", "a.1", 0, 99, False, Mode.BORROWED, req(cpu=10)))
    ledger.admit("a.2", req(cpu=10), expect=Mode.GUARANTEED)
    ledger.admit("b.2", req(cpu=10), expect=Mode.GUARANTEED)
    assert t.reclaim_victims("b.1", req(cpu=5)) is None


def test_reclaim_leaves_a_subtree_that_is_within_its_min_alone(ledger_for: MakeLedger) -> None:
    leaf = {"min": {"cpu": 10}, "max": {"cpu": 40}}
    mid = {"min": {"cpu": 20}, "max": {"cpu": 40}}
    t = tree(
        node(
            "root",
            node("a", node("a.1", **leaf), node("a.2", **leaf), **mid),
            node("b", node("b.1", **leaf), node("b.2", **leaf), **mid),
            min={"cpu": 40},
            max={"cpu": 40},
        )
    )
    ledger = ledger_for(t)
    for _ in range(2):
        ledger.admit("a.1", req(cpu=5), priority=1, expect=Mode.GUARANTEED)
    for _ in range(2):
        ledger.admit("a.1", req(cpu=5), priority=1, expect=Mode.BORROWED)  # a is at its min
    for _ in range(2):
        ledger.admit("b.2", req(cpu=5), expect=Mode.GUARANTEED)
    from_b2 = [ledger.admit("b.2", req(cpu=5), expect=Mode.BORROWED) for _ in range(2)]
    victims = t.reclaim_victims("b.1", req(cpu=5))
    assert victims == [from_b2[-1]]


def test_reclaim_refuses_a_request_not_within_min(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    fill_a(ledger)
    assert ledger.tree.reclaim_victims("b.1", req(cpu=15)) is None


def test_reclaim_returns_nothing_when_the_request_fits() -> None:
    assert ack_tree().reclaim_victims("b.1", req(cpu=5)) == []


def test_reclaim_cannot_fix_the_queue_own_max(ledger_for: MakeLedger) -> None:
    t = tree(
        node(
            "root",
            node("a", min={"cpu": 10}, max={"cpu": 10}),
            node("b"),
            min={"cpu": 10},
            max={"cpu": 100},
        )
    )
    ledger = ledger_for(t)
    t.admit(Charge("over", "over", "a", 1, 0, True, Mode.BORROWED, req(cpu=10)))
    ledger.admit("b", req(cpu=50))
    assert t.reclaim_victims("a", req(cpu=5)) is None


# Victims inside one queue ----------------------------------------------------


def test_queue_victims_lowest_priority_then_newest(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(team(max={GPU: 16}))
    t = ledger.tree
    old_low = ledger.admit("team-a", req({GPU: 4}), priority=1)
    new_low = ledger.admit("team-a", req({GPU: 4}), priority=1)
    ledger.admit("team-a", req({GPU: 4}), priority=5)
    ledger.admit("team-a", req({GPU: 4}), priority=100)
    assert t.queue_victims("team-a", req({GPU: 4}), 100) == [new_low]
    assert t.queue_victims("team-a", req({GPU: 8}), 100) == [new_low, old_low]


def test_queue_victims_needs_strictly_lower_priority(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(team(max={GPU: 8}))
    ledger.admit("team-a", req({GPU: 8}), priority=10)
    assert ledger.tree.queue_victims("team-a", req({GPU: 8}), 10) is None
    assert ledger.tree.queue_victims("team-a", req({GPU: 8}), 11) is not None


def test_queue_victims_skips_non_preemptible_and_opportunistic(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(team(min={GPU: 8}, max={GPU: 8}))
    ledger.admit("team-a", req({GPU: 8}), priority=1, preemptible=False)
    ledger.admit("team-a", req({GPU: 8}), priority=-1)
    assert ledger.tree.queue_victims("team-a", req({GPU: 8}), 100) is None


def test_queue_victims_skips_jobs_that_free_nothing_needed(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(team(max={GPU: 8}))
    needed = ledger.admit("team-a", req({GPU: 8}), priority=5)
    ledger.admit("team-a", req(cpu=4), priority=1)
    assert ledger.tree.queue_victims("team-a", req({GPU: 4}), 10) == [needed]


def test_queue_victims_drops_picks_a_later_pick_makes_unnecessary(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(team(max={GPU: 12}))
    ledger.admit("team-a", req({GPU: 2}), priority=5)
    small = ledger.admit("team-a", req({GPU: 2}), priority=1)
    big = ledger.admit("team-a", req({GPU: 8}), priority=2)
    assert small
    assert ledger.tree.queue_victims("team-a", req({GPU: 8}), 10) == [big]


def test_queue_victims_is_empty_when_it_fits() -> None:
    assert team(max={GPU: 8}).queue_victims("team-a", req({GPU: 8}), 10) == []


# Quota changes ---------------------------------------------------------------


def test_set_node_changes_min_max_and_namespaces() -> None:
    t = tree(node("root", node("a", namespaces=("x",)), node("b"), min={"cpu": 10}))
    t.set_node("a", min=res(cpu=10), max=res(cpu=20), namespaces=("y",))
    assert t.min_of("a") == res(cpu=10)
    assert t.max_of("a") == res(cpu=20)
    assert t.queue_for_namespace("y") == "a"
    assert t.queue_for_namespace("x") is None
    t.set_node("a", max=None)
    assert t.max_of("a") is None
    assert t.min_of("a") == res(cpu=10)
    assert t.to_spec() == with_paths(
        node("root", node("a", min={"cpu": 10}, namespaces=("y",)), node("b"), min={"cpu": 10})
    )


BAD_CHANGES = [
    pytest.param("a.1", {"min": res(cpu=30)}, "a.1", "cpu", id="min-above-own-max"),
    pytest.param("a.1", {"max": res(cpu=50)}, "a.1", "cpu", id="max-above-parent-max"),
    pytest.param("a", {"min": res(cpu=10)}, "a", "cpu", id="min-below-children-sum"),
    pytest.param("b.1", {"namespaces": ("taken",)}, "b.1", None, id="namespace-taken"),
    pytest.param("a", {"namespaces": ("n",)}, "a", None, id="namespaces-on-non-leaf"),
    pytest.param("b", {"max": Resources({"cpu": -1})}, "b", "cpu", id="negative-max"),
]


@pytest.mark.parametrize(("name", "change", "culprit", "resource"), BAD_CHANGES)
def test_set_node_failure_changes_nothing(
    name: str, change: dict[str, object], culprit: str, resource: str | None
) -> None:
    t = ack_tree()
    t.set_node("a.1", namespaces=("taken",))
    Ledger(t).admit("a.1", req(cpu=5))
    before = (t.to_spec(), t.queue_for_namespace("taken"), t.used("root"), list(t.warnings))
    with pytest.raises(QuotaError) as info:
        t.set_node(name, **change)  # type: ignore[arg-type]
    assert info.value.node == culprit
    if resource is not None:
        assert resource in str(info.value)
    after = (t.to_spec(), t.queue_for_namespace("taken"), t.used("root"), list(t.warnings))
    assert after == before
    t.check_invariants()


def test_lowering_max_below_usage_keeps_the_usage(ledger_for: MakeLedger) -> None:
    ledger = ledger_for(ack_tree())
    keys = [ledger.admit("a.1", req(cpu=5)) for _ in range(4)]
    ledger.tree.set_node("a.1", min=res(cpu=5), max=res(cpu=10))
    assert ledger.tree.used("a.1") == res(cpu=20) + {MAX_JOBS: 4}
    ledger.tree.check_invariants()  # grandfathered, not a violation
    assert blocked(ledger.tree, "a.1", req(cpu=1)).limit == 10_000
    ledger.release(*keys[:3])
    ledger.admit("a.1", req(cpu=5))


def test_set_node_on_the_root_updates_warnings() -> None:
    t = ack_tree()
    t.set_node("root", max=res(cpu=80))
    assert len(t.warnings) == 1 and "'root'" in t.warnings[0]
    t.set_node("root", max=res(cpu=40))
    assert t.warnings == []


def test_set_node_of_an_unknown_node_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        ack_tree().set_node("nope", min=res(cpu=1))


def test_spec_root_is_unchanged_by_build() -> None:
    root = with_paths(node("root", node("a")))
    t = QuotaTree.build(root)
    assert t.to_spec() == root


def test_block_is_a_frozen_value() -> None:
    block = QuotaBlock("q", "cpu", 1, 2, 2, MAX)
    with pytest.raises((AttributeError, TypeError)):  # TypeError: compiled
        block.used = 3  # type: ignore[misc]


def test_a_queue_over_a_lowered_max_admits_nothing_new_until_within_it(
    ledger_for: MakeLedger,
) -> None:
    ledger = ledger_for(team(max={GPU: 16}))
    first = ledger.admit("team-a", req({GPU: 8}))
    ledger.admit("team-a", req({GPU: 8}))
    ledger.tree.set_node("team-a", max=res({GPU: 8}))
    cpu_only = blocked(ledger.tree, "team-a", req(cpu=1))
    assert (cpu_only.kind, cpu_only.node, cpu_only.resource) == ("over-max", "team-a", GPU)
    assert cpu_only.reason == (
        "queue team-a is over its max since a quota change: 16 of 8 GPUs used; "
        "it admits nothing new until it is back within its limits"
    )
    assert [b.node for b in ledger.tree.over_limits()] == ["team-a"]
    ledger.release(first)  # 8/8: within the max again
    assert ledger.tree.over_limits() == []
    ledger.admit("team-a", req(cpu=1), expect=Mode.BORROWED)
    assert blocked(ledger.tree, "team-a", req({GPU: 1})).kind == "max"


def test_a_queue_whose_guaranteed_work_exceeds_a_lowered_min_admits_nothing_new(
    ledger_for: MakeLedger,
) -> None:
    ledger = ledger_for(team(min={GPU: 16}))
    job = ledger.admit("team-a", req({GPU: 16}), expect=Mode.GUARANTEED)
    ledger.tree.set_node("team-a", min=res({GPU: 8}))
    block = blocked(ledger.tree, "team-a", req({GPU: 1}))
    assert (block.kind, block.used, block.limit) == ("over-min", 16, 8)
    assert "team-b" not in {b.node for b in ledger.tree.over_limits()}
    ledger.admit("team-b", req({GPU: 1}))  # the sibling is not affected
    ledger.release(job)
    ledger.admit("team-a", req({GPU: 8}), expect=Mode.GUARANTEED)


def test_an_inner_node_over_its_max_blocks_every_queue_under_it(ledger_for: MakeLedger) -> None:
    t = tree(
        node(
            "root",
            node("org", node("a", namespaces=("a",)), node("b", namespaces=("b",)), max={GPU: 16}),
            node("c", namespaces=("c",)),
        )
    )
    ledger = ledger_for(t)
    ledger.admit("a", req({GPU: 16}))
    t.set_node("org", max=res({GPU: 8}))
    assert blocked(t, "b", req(cpu=1)).node == "org"
    ledger.admit("c", req({GPU: 4}))


def test_a_copied_tree_keeps_its_cut_nodes() -> None:
    t = team(max={GPU: 16})
    Ledger(t).admit("team-a", req({GPU: 16}))
    t.set_node("team-a", max=res({GPU: 8}))
    assert [b.node for b in t.copy().over_limits()] == ["team-a"]


@pytest.mark.corrupts_state
def test_check_invariants_detects_an_over_limit_node_not_marked_as_cut() -> None:
    t = team(max={GPU: 16})
    Ledger(t).admit("team-a", req({GPU: 16}))
    t.set_node("team-a", max=res({GPU: 8}))
    t._cut.clear()
    with pytest.raises(InvariantError, match="team-a is over a limit but not marked as cut"):
        t.check_invariants()


def test_every_broken_rule_is_reported_at_once() -> None:
    bad = node(
        "root",
        node("a", min={"cpu": "8"}, max={"cpu": "20"}, namespaces=("ns",)),
        node("b", min={"cpu": "8"}, max={"cpu": "4"}, namespaces=("ns",)),
        min={"cpu": "10"},
        max={"cpu": "10"},
    )
    with pytest.raises(QuotaError) as info:
        tree(bad)
    messages = [str(e) for e in info.value.errors]
    assert info.value.errors[0] is info.value
    assert any("'a'" in m and "above the max" in m for m in messages)  # a.max > root.max
    assert any("'b'" in m and "min cpu 8 is above max 4" in m for m in messages)
    assert any("namespace 'ns' already belongs" in m for m in messages)
    assert any("children's min cpu 16" in m for m in messages)
