"""The quota tree's layers: what each module holds, the result types, the block kinds."""

from __future__ import annotations

import pytest

from fleet.core import quota, quota_structure, quota_usage, quota_victims
from fleet.core.quota import BlockKind, QuotaBlock, QuotaTree
from fleet.core.quota_usage import NO_MIN, WITHIN_MIN, MinFit, QuotaUsage
from fleet.core.resources import MAX_JOBS, Resources
from tests.core.quota_factories import Ledger, ack_tree, node, req, tree

GPU = "nvidia.com/gpu"


def team(**limits: dict[str, str | int]) -> QuotaTree:
    """Root (64 GPUs, 100 cpu) over ``team-a`` with the given min/max and ``team-b``."""
    cap = {GPU: 64, "cpu": 100, MAX_JOBS: 100}
    return tree(node("root", node("team-a", **limits), node("team-b"), min=cap, max=cap))


def test_the_public_names_are_importable_from_the_quota_module() -> None:
    assert quota.QuotaBlock is quota_usage.QuotaBlock
    assert quota.BlockKind is quota_usage.BlockKind
    assert quota.MAX is BlockKind.MAX
    assert quota.NON_PREEMPTIBLE_MIN is BlockKind.NON_PREEMPTIBLE_MIN
    assert quota.UNCHANGED is quota_structure.UNCHANGED
    assert isinstance(quota.UNCHANGED, quota._Unchanged)
    assert repr(quota.UNCHANGED) == "UNCHANGED"


def test_the_tree_is_its_usage_over_its_structure() -> None:
    assert issubclass(QuotaTree, QuotaUsage)
    assert issubclass(QuotaUsage, quota_structure.QuotaStructure)
    assert isinstance(ack_tree().copy(), QuotaTree)


def test_block_kinds_read_as_their_text() -> None:
    assert [str(k) for k in BlockKind] == ["max", "non-preemptible-min", "over-max", "over-min"]
    assert BlockKind("max") is BlockKind.MAX
    assert f"{BlockKind.NON_PREEMPTIBLE_MIN}" == "non-preemptible-min"


def test_classify_gives_block_kind_members() -> None:
    t = team(min={GPU: 8}, max={GPU: 8})
    Ledger(t).admit("team-a", req({GPU: 8}))
    at_max = t.classify("team-a", req({GPU: 1}), priority=10, preemptible=True)
    above_min = t.classify("team-a", req({GPU: 1}), priority=10, preemptible=False)
    assert isinstance(at_max, QuotaBlock)
    assert isinstance(above_min, QuotaBlock)
    assert at_max.kind is BlockKind.MAX
    assert above_min.kind is BlockKind.NON_PREEMPTIBLE_MIN
    assert at_max.reason == "queue team-a is full: 8 of 8 GPUs used; this job needs 1"


def test_fits_min_says_within_over_or_no_min() -> None:
    t = team(min={GPU: 8, "cpu": 4})
    leaf = t._index["team-a"]
    assert t._fits_min(leaf, req({GPU: 8, "cpu": 4})) is WITHIN_MIN
    over = t._fits_min(leaf, req({GPU: 9}))
    assert over == MinFit(fits=False, over=GPU)
    assert t._fits_min(leaf, req({GPU: 9})) is over  # one shared value per resource
    assert t._fits_min(t._index["team-b"], req(cpu=1)) is NO_MIN


@pytest.mark.parametrize(
    ("request_", "resource"),
    [(req(cpu=1), "cpu"), (Resources({}), MAX_JOBS)],
    ids=["first-requested", "empty-request"],
)
def test_a_non_preemptible_block_without_min_names_the_first_requested_resource(
    request_: Resources, resource: str
) -> None:
    block = team().classify("team-a", request_, priority=10, preemptible=False)
    assert isinstance(block, QuotaBlock)
    assert (block.kind, block.resource, block.limit) == (BlockKind.NON_PREEMPTIBLE_MIN, resource, 0)


def test_the_victim_methods_are_the_victim_functions() -> None:
    t = ack_tree()
    ledger = Ledger(t)
    keys = [ledger.admit(leaf, req(cpu=10)) for leaf in ("a.1", "a.1", "a.2", "a.2")]
    request = req(cpu=10)
    reclaim = t.reclaim_victims("b.1", request)
    assert reclaim == quota_victims.reclaim_victims(t, "b.1", request) == [keys[3]]
    in_queue = t.queue_victims("a.1", request, 20)
    assert in_queue == quota_victims.queue_victims(t, "a.1", request, 20) == [keys[1]]
    t.check_invariants()
