"""A replay run from the command line follows the heap growth in full collections, as serve does."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from fleet.service.collector import FollowGrowth
from fleet.sim import engine
from fleet.store.database import Database
from tests.sim.test_known_answers import traces_of


def following() -> list[FollowGrowth]:
    return [c for c in gc.callbacks if isinstance(c, FollowGrowth)]


@pytest.fixture(autouse=True)
def no_follower_before() -> Iterator[None]:
    """Followers an earlier test of the process left installed (an in-process
    ``fleet serve`` keeps its own) are set aside for the test and put back."""
    left = following()
    for c in left:
        gc.callbacks.remove(c)
    try:
        yield
    finally:
        gc.callbacks.extend(left)


def test_a_replay_follows_the_growth_while_it_runs_and_stops_after() -> None:
    jobs, tree_text, clusters_text = traces_of("lab-vc-safety")
    seen: list[int] = []

    async def observe(_db: Database, _now: float) -> None:
        seen.append(len(following()))

    assert following() == []
    engine.run(jobs, tree_text, clusters_text, "fleet", observe=observe)
    assert seen and set(seen) == {1}
    assert following() == []


def test_a_replay_in_a_process_that_follows_already_adds_no_second_follower() -> None:
    jobs, tree_text, clusters_text = traces_of("lab-vc-safety")
    mine = FollowGrowth()
    mine.install()
    seen: list[int] = []

    async def observe(_db: Database, _now: float) -> None:
        seen.append(len(following()))

    try:
        engine.run(jobs, tree_text, clusters_text, "fleet", observe=observe)
        assert following() == [mine]
    finally:
        mine.remove()
    assert set(seen) == {1}
