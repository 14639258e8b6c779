"""The view the loop publishes for the API: made when read, and counting what a full count would."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from fleet.clock import VirtualClock
from fleet.core.jobs import Mode
from fleet.service.loop import SchedulerLoop
from fleet.service.settings import POLICIES, Settings
from fleet.service.wiring import Service
from fleet.testing.documents import pytorchjob
from fleet.testing.running import new_jobs, running_service, settings, settle

LAB = POLICIES / "lab"


async def submit(svc: Service, text: str) -> None:
    await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))


def counted_vc_gpus(loop: SchedulerLoop) -> dict[tuple[str, str], int]:
    """GPUs of guaranteed units per (cluster, queue), counted from scratch."""
    out: Counter[tuple[str, str]] = Counter()
    for run in loop.state.running.values():
        for unit in run.units:
            if unit.charge.mode is Mode.GUARANTEED:
                out[run.cluster, run.job.queue] += sum(len(p.gpus) for p in unit.pods)
    return dict(out)


def published_vc_gpus(loop: SchedulerLoop) -> dict[tuple[str, str], int]:
    return {
        (cluster, vc): used
        for cluster, gpus in loop.view.clusters.items()
        for vc, (_total, used) in gpus.vcs.items()
        if used
    }


async def test_vc_usage_in_the_view_matches_a_full_count_after_every_step(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        loop = svc.loop
        steps = [
            # opportunistic work on every GPU, then guaranteed jobs that take
            # their share back (preemptions), then jobs ending at different times
            *[
                pytorchjob(f"oppo-{n}", namespace="sandbox", gpus=8, priority_class="oppo")
                for n in range(6)
            ],
            pytorchjob("a-long", workers=2, gpus=8, duration="2h"),
            pytorchjob("a-short", workers=1, gpus=4, duration="10m"),
            pytorchjob("a-small", workers=1, gpus=2, duration="30m"),
        ]
        seen_nonzero = False
        for text in steps:
            await submit(svc, text)
            await settle(loop, clock)
            assert published_vc_gpus(loop) == counted_vc_gpus(loop)
            seen_nonzero = seen_nonzero or bool(counted_vc_gpus(loop))
        assert seen_nonzero
        for minutes in (11, 20, 100):  # a-short, then a-small, then a-long end
            await settle(loop, clock, minutes * 60)
            assert published_vc_gpus(loop) == counted_vc_gpus(loop)
        assert published_vc_gpus(loop) == {}


async def test_a_view_is_made_when_read_and_is_current_between_iterations(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        loop = svc.loop
        first = loop.view.version
        for n in range(3):
            await submit(svc, pytorchjob(f"j{n}", gpus=1, duration="1h"))
            await settle(loop, clock)
        # three iterations at least, no reader: no view was made meanwhile
        assert loop.iterations >= 3
        assert loop.publisher.view.version == first
        view = loop.view  # read between iterations: made now, from the state
        assert view.version == first + 1
        assert sum(q.admitted for q in view.queues if q.name == "team-a") == 3
        assert loop.view is view  # nothing changed since: the same view

        # Read during an iteration (here: by work the loop runs in it, after it
        # took the new submission), the last view is returned; read after the
        # iteration, a new one.
        await submit(svc, pytorchjob("j3", gpus=1, duration="1h"))
        during = await loop.exclusive(lambda lp: _read_view(lp))
        assert during is view
        await settle(loop, clock)
        after = loop.view
        assert after.version == view.version + 1
        assert "team-a/j3" in dict(after.recent)[after.version]
        assert sum(q.admitted for q in after.queues if q.name == "team-a") == 4

        # Read while stale during an iteration: that iteration publishes when it ends.
        await submit(svc, pytorchjob("j4", gpus=1, duration="1h"))
        await settle(loop, clock)
        assert loop.publisher.view is after  # stale, nobody read it
        during = await loop.exclusive(lambda lp: _read_view(lp))
        assert during is after
        await settle(loop, clock)
        assert loop.publisher.view.version == after.version + 1  # published at the iteration's end
        assert "team-a/j4" in dict(loop.publisher.view.recent)[loop.publisher.view.version]


async def _read_view(loop: SchedulerLoop) -> object:
    return loop.view


async def test_vc_usage_in_the_view_follows_a_job_that_grows(database_url: str) -> None:
    # The lab's incremental experiment: "grow" starts with one worker and its
    # second starts when "one-node" ends: the job's units change, not its record.
    clock = VirtualClock(1_000.0)
    async with running_service(
        Settings(
            database_url=database_url,
            clusters=POLICIES / "clusters" / "lab-2.yaml",
            quota=LAB / "quota-one-vc.yaml",
            schedule_interval=5.0,
        ),
        clock,
    ) as svc:
        loop = svc.loop
        for file in ("incremental-1-one-node.yaml", "incremental-2-grow.yaml"):
            await submit(svc, (LAB / file).read_text(encoding="utf-8"))
            await settle(loop, clock, 5.0)
            assert published_vc_gpus(loop) == counted_vc_gpus(loop)
        units = len(loop.state.running["lab/grow"].units)
        await settle(loop, clock, 600 + 10.0)
        assert len(loop.state.running["lab/grow"].units) > units  # it grew
        assert published_vc_gpus(loop) == counted_vc_gpus(loop)


async def test_a_max_of_zero_is_published_as_a_limit_of_zero(
    database_url: str, tmp_path: Path
) -> None:
    text = (POLICIES / "quota" / "team-tree.yaml").read_text(encoding="utf-8")
    frozen = text.replace(
        "max: {nvidia.com/gpu: 8, cpu: 128, memory: 1Ti}",
        "max: {nvidia.com/gpu: 0, cpu: 128, memory: 1Ti}",
    )
    assert frozen != text
    quota = tmp_path / "quota.yaml"
    quota.write_text(frozen, encoding="utf-8")
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url, quota=quota), clock) as svc:
        loop = svc.loop
        await submit(svc, pytorchjob("gpu", namespace="sandbox", gpus=1, duration="1h"))
        await settle(loop, clock)
        (sandbox,) = [q for q in loop.view.queues if q.name == "sandbox"]
        assert sandbox.max == {"cpu": "128", "memory": "1Ti", "nvidia.com/gpu": "0"}
        assert loop.view.reasons["sandbox/gpu"].startswith(
            "queue sandbox is full: 0 of 0 GPUs used"
        )
