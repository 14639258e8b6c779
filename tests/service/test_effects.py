"""The loop's member calls run concurrently, one job's calls in order, outcomes in order.

A member here records when each call starts and lets it end only when the
test says so: the calls of different jobs are all in flight at once, a job's
delete waits for its create, and the outcomes come back in the actions'
order although the calls end in another.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

from fleet.clusters.base import (
    ClusterConflict,
    ClusterHealth,
    DispatchedJob,
    MemberCluster,
    QueueWatch,
)
from fleet.core.placement import PodPlacement
from fleet.core.state import Running, SchedulerState
from fleet.service import effects
from fleet.store.jobs import JobHead


class GatedMember:
    """Records calls; each ends when its gate opens."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    @property
    def name(self) -> str:
        return "m"

    async def _call(self, what: str) -> None:
        self.started.append(what)
        gate = self.gates.setdefault(what, asyncio.Event())
        await gate.wait()
        if what == "create ns/taken":
            raise ClusterConflict("m", "the name is taken")

    async def create(self, job: DispatchedJob) -> None:
        await self._call(f"create {job.key}")

    async def resize(self, job: DispatchedJob) -> None:
        await self._call(f"resize {job.key}")

    async def delete(self, key: str) -> bool:
        await self._call(f"delete {key}")
        return True

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def watch(self) -> QueueWatch:
        raise NotImplementedError

    def status_of(self, key: str) -> None:
        return None

    async def health(self) -> ClusterHealth:
        return ClusterHealth(True)


PODS = (PodPlacement("Worker-0", "n0"),)


def head(name: str) -> JobHead:
    return JobHead(0, f"uid-{name}", "ns", name, "q", "", "running")


@contextlib.contextmanager
def no_span(*args: Any, **kwargs: Any) -> Iterator[None]:
    yield


async def test_calls_run_together_a_jobs_calls_in_order_and_outcomes_in_order() -> None:
    member = GatedMember()
    names = ["a", "b", "taken"]
    running = {
        f"ns/{n}": cast(Running, SimpleNamespace(cluster="m", units=[SimpleNamespace(pods=PODS)]))
        for n in names
    }
    state = cast(SchedulerState, SimpleNamespace(running=running))
    actions: list[effects.Action] = [
        effects.Create(1, head("a"), {}),
        effects.Create(2, head("b"), {}),
        effects.Create(3, head("taken"), {}),
        effects.Delete(4, "ns/a", "m"),
    ]
    members = {"m": cast(MemberCluster, member)}
    acting = asyncio.create_task(effects.act(actions, state, members, no_span))
    for _ in range(10):
        await asyncio.sleep(0)
    # Every job's first call is in flight; a's delete waits for a's create.
    assert member.started == ["create ns/a", "create ns/b", "create ns/taken"]
    for what in ["create ns/taken", "create ns/b", "create ns/a"]:  # they end in reverse
        member.gates.setdefault(what, asyncio.Event()).set()
        for _ in range(5):
            await asyncio.sleep(0)
    assert member.started[-1] == "delete ns/a"
    member.gates["delete ns/a"].set()
    acted = await acting
    assert acted.outcomes == [
        effects.Created("ns/a", "m"),
        effects.Created("ns/b", "m"),
        effects.Conflicted("ns/taken", "m", "the name is taken"),
    ]
    assert acted.done == [1, 2, 3, 4]
