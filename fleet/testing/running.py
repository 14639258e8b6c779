"""A service on a virtual clock for tests: settings, submissions, start and stop.

Theory of operation: a test runs the service in its own event loop, as
``fleet serve`` would but without HTTP: :func:`running_service` starts it with
:func:`fleet.service.wiring.start` (on a virtual clock the loop's work runs
inline in the test's event loop, :meth:`fleet.clock.Clock.compute`, so the
clock drives everything) and stops it with
:func:`fleet.service.wiring.stop` however the block ends, so a test that
restarts the service writes two blocks.  :func:`settings` are the service's
settings on a database with a five-second scheduling interval (the shipped
quota tree and member clusters unless told); :func:`lab_settings` those of a
lab's clusters.  :func:`new_jobs` turns a submission into what the API hands
to intake, and :func:`settle` advances the clock and lets the loop handle
everything that follows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fleet.api.submissions import SubmissionLimits, parse_submission
from fleet.clock import Clock, VirtualClock
from fleet.core.quota import QuotaTree
from fleet.manifests.models import MemberClusterModel
from fleet.service import wiring
from fleet.service.intake import NewJob
from fleet.service.loop import SchedulerLoop
from fleet.service.settings import POLICIES, Settings
from fleet.service.wiring import Service


def settings(database_url: str, **kw: Any) -> Settings:
    """The service's settings on ``database_url``, scheduling every 5 s, with ``kw``."""
    return Settings(database_url=database_url, schedule_interval=5.0, **kw)


def lab_settings(database_url: str, lab: str) -> Settings:
    """:func:`settings` with the member clusters of ``policies/clusters/{lab}.yaml``."""
    return settings(
        database_url,
        clusters=POLICIES / "clusters" / f"{lab}.yaml",
        quota=POLICIES / "quota" / "team-tree.yaml",
    )


@asynccontextmanager
async def running_service(settings: Settings, clock: Clock) -> AsyncIterator[Service]:
    """The service started on ``clock``; stopped when the block ends, however it ends."""
    svc = await wiring.start(settings, clock)
    try:
        yield svc
    finally:
        await wiring.stop(svc)


def new_jobs(text: str, tree: QuotaTree, clusters: Sequence[MemberClusterModel]) -> list[NewJob]:
    """The jobs of a submission, as the API hands them to intake."""
    limits = SubmissionLimits()
    return [
        NewJob(s.job, s.document, s.policy, s.spec_hash, s.suspended, s.policy_source)
        for s in parse_submission(
            text.encode(), tree=tree, clusters=clusters, first_seq=0, limits=limits
        )
    ]


async def settle(loop: SchedulerLoop, clock: VirtualClock, seconds: float = 0.0) -> None:
    """Advance the virtual clock and let the loop handle everything that follows."""
    if seconds:
        await clock.advance(seconds)
    for _ in range(3):
        await clock.run_until_idle()
        await loop.quiet()
