"""The service's garbage collection: frozen after full collections, thawed every so often."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from fleet.service.collector import FollowGrowth, cycle_paused


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def policy() -> Iterator[FollowGrowth]:
    gc.collect()
    policy = FollowGrowth(thaw_every=3, thaw_after=0.0)
    policy.install()
    try:
        yield policy
    finally:
        policy.remove()
        gc.collect()


def test_what_survives_a_full_collection_is_frozen_until_every_nth(policy: FollowGrowth) -> None:
    gc.collect()  # first full collection: the survivors are frozen
    assert policy.full == 1
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert gc.get_freeze_count() > 0
    gc.collect()  # the third: thawed, the next one walks everything
    assert policy.full == 3
    assert gc.get_freeze_count() == 0
    gc.collect(1)  # a younger collection is not counted
    assert policy.full == 3


def test_a_cycle_that_was_frozen_is_freed_by_the_thawed_collection(policy: FollowGrowth) -> None:
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    gc.collect()  # the cycle is alive: frozen with the rest
    del a, b
    gc.collect()  # a full collection does not see it: frozen
    assert gone() is not None
    gc.collect()  # the third thaws
    gc.collect()  # and this one walks everything again
    assert gone() is None


def test_installing_twice_follows_once(policy: FollowGrowth) -> None:
    policy.install()
    assert gc.callbacks.count(policy) == 1


def test_thawing_less_than_every_collection_is_refused() -> None:
    with pytest.raises(ValueError, match="thaw_every"):
        FollowGrowth(thaw_every=0)
    with pytest.raises(ValueError, match="thaw_after"):
        FollowGrowth(thaw_after=-1.0)


def test_a_thaw_waits_for_its_time_too() -> None:
    now = [100.0]
    gc.collect()
    policy = FollowGrowth(thaw_every=2, thaw_after=60.0, clock=lambda: now[0])
    policy.install()
    try:
        for _ in range(5):  # under load: many full collections, none walks everything
            gc.collect()
            assert gc.get_freeze_count() > 0
        now[0] += 60.0
        gc.collect()  # enough collections and enough time: thawed
        assert gc.get_freeze_count() == 0
        gc.collect()  # the next thaw counts again from here
        gc.collect()
        assert gc.get_freeze_count() > 0
    finally:
        policy.remove()
        gc.collect()


def test_a_paused_cycle_is_not_stopped_and_collects_the_young_after() -> None:
    assert gc.isenabled()
    collections: list[int] = []

    def seen(phase: str, info: dict[str, object]) -> None:
        if phase == "start":
            collections.append(int(str(info["generation"])))

    gc.callbacks.append(seen)
    try:
        with cycle_paused():
            assert not gc.isenabled()
            kept = [Node() for _ in range(5 * gc.get_threshold()[0])]
            assert collections == []  # far past the threshold: no collection
        assert gc.isenabled()
        assert collections == [0]  # one, of the youngest generation, right after
        assert gc.get_count()[0] < 100
    finally:
        gc.callbacks.remove(seen)
    assert len(kept) == 5 * gc.get_threshold()[0]


def test_garbage_made_in_a_paused_cycle_is_freed_right_after() -> None:
    with cycle_paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        kept = [Node() for _ in range(3 * gc.get_threshold()[0])]
        assert gone() is not None  # a reference cycle waits for the collector
    assert gone() is None
    assert len(kept) == 3 * gc.get_threshold()[0]


def test_a_cycle_that_allocated_little_collects_nothing() -> None:
    collections: list[object] = []

    def seen(phase: str, info: dict[str, object]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        with cycle_paused():
            Node()
    finally:
        gc.callbacks.remove(seen)
    assert collections == []


def test_overlapping_pauses_resume_when_the_last_ends() -> None:
    first, second = cycle_paused(), cycle_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the other cycle still runs
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_process_that_switched_collection_off_keeps_it_off() -> None:
    gc.disable()
    try:
        with cycle_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
