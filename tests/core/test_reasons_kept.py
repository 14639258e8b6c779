"""Wait reasons are kept from one cycle to the next by the figures they are worded
from (``fleet.core.reason_texts``): the same figures give the same text without
wording it again, moved figures a new one."""

from __future__ import annotations

from fleet.core import events
from fleet.core.cycle import cycle
from fleet.core.quota import NON_PREEMPTIBLE_MIN, QuotaBlock
from fleet.core.reason_texts import ReasonTexts
from fleet.core.resources import GPU, Resources
from tests.core.factories import make_job, make_nodes, make_state, submit

TREE = {
    "name": "root",
    "min": {GPU: 8},
    "max": {GPU: 16},
    "children": [{"name": "team-a", "min": {GPU: 6}, "max": {GPU: 16}}],
}


def block(used: int) -> QuotaBlock:
    return QuotaBlock("team-a", GPU, used, 4, 6, NON_PREEMPTIBLE_MIN)


def test_a_block_is_worded_once_for_its_figures() -> None:
    texts = ReasonTexts()
    first = texts.block(block(5))
    assert first == block(5).reason
    assert texts.block(block(5)) is first
    assert texts.block(block(4)) == block(4).reason != first


def test_a_queues_rigid_runs_share_their_texts_until_its_figures_move() -> None:
    state = make_state(TREE, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("a0", gpus=5, seq=0))
    cycle(state, 0.0)
    for n in range(3):
        submit(state, make_job(f"r{n}", gpus=4, priority=120, preemptible=False, seq=10 + n))
    cycle(state, 1.0)
    [before] = state.waiting.runs["team-a"]
    reasons = [state.waiting.reason_of(job) for job in state.pending()]
    assert "5 of 6 GPUs guaranteed in use; this job needs 4" in reasons[0]
    cycle(state, 2.0)
    [after] = state.waiting.runs["team-a"]
    assert after is not before
    assert after.texts is before.texts  # nothing moved: nothing worded again
    assert [state.waiting.reason_of(job) for job in state.pending()] == reasons
    # The min moves (the tree's own figures, whether changed in place or not).
    events.apply(state, events.QuotaNodePatched("team-a", min=Resources({GPU: 7})))
    cycle(state, 3.0)
    [moved] = state.waiting.runs["team-a"]
    assert moved.texts is not before.texts
    assert "5 of 7 GPUs guaranteed in use; this job needs 4" in state.waiting.reason_of(
        state.pending()[0]
    )


def test_what_is_kept_is_dropped_past_its_limit() -> None:
    texts = ReasonTexts()
    for used in range(5):
        texts.block(block(used))
        texts.tail_texts(block(used))
        texts.run_figures(f"q{used}", {GPU: 6}, {GPU: used})
    texts.trim()
    assert len(texts.blocks) == len(texts.tails) == len(texts.runs) == 5
    texts.trim(limit=4)
    assert texts.blocks == {} and texts.tails == {} and texts.runs == {}
