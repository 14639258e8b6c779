"""Fair share with memory through the service: shown by the queues API, kept across restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.clock import VirtualClock
from fleet.core import events
from fleet.service import loop as loop_module
from fleet.service.wiring import Service
from fleet.store import admin as admin_rows
from fleet.store.database import open_database
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.running import new_jobs, running_service, settings

POLICIES = Path(__file__).resolve().parents[2] / "policies"
HOUR = 3600.0


def fair_tree(tmp_path: Path) -> Path:
    """The shipped team tree with a one-hour half-life on its root."""
    text = (POLICIES / "quota" / "team-tree.yaml").read_text()
    text = text.replace("    name: root\n", "    name: root\n    fairSharing: {halfLife: 1h}\n", 1)
    path = tmp_path / "fair-tree.yaml"
    path.write_text(text)
    return path


async def stored_usage(url: str) -> tuple[dict[str, dict[str, float]], float]:
    """The stored decayed usage, read with no service running."""
    db = await open_database(url)
    try:
        async with db.read() as session:
            return await admin_rows.queue_usage(session)
    finally:
        await db.close()


async def submit(svc: Service, text: str) -> None:
    await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))


async def test_decayed_usage_is_stored_and_comes_back_after_a_restart(
    database_url: str, tmp_path: Path
) -> None:
    clock = VirtualClock(0.0)
    config = settings(database_url, quota=fair_tree(tmp_path))
    async with running_service(config, clock) as svc:
        await submit(svc, pytorchjob("night", workers=2, gpus=8, duration="10h"))
        await running.settle(svc.loop, clock)
        for _ in range(8):  # two hours, a loop iteration every quarter of an hour
            await running.settle(svc.loop, clock, HOUR / 4)
        held = svc.loop.state.fair.held(svc.loop.state.tree, "team-a")["nvidia.com/gpu"]
        assert 11.0 < held < 16.0  # two half-lives towards 16 GPUs
        at = svc.loop.state.fair.at
    stored, stored_at = await stored_usage(database_url)
    assert stored_at == at  # stored when the loop stopped
    assert stored["team-a"]["nvidia.com/gpu"] == pytest.approx(held)

    async with running_service(config, clock) as svc:
        await running.settle(svc.loop, clock)
        fair = svc.loop.state.fair
        again = fair.held(svc.loop.state.tree, "team-a")["nvidia.com/gpu"]
        # Back from the store (not started afresh at the 16 GPUs held now), and
        # decayed over the time since it was stored with the 16 GPUs the job holds.
        d = 2 ** (-(fair.at - stored_at) / HOUR)
        assert again == pytest.approx(held * d + 16 * (1 - d))
        assert again < 15.0


async def test_the_loop_stores_the_usage_every_so_often(database_url: str, tmp_path: Path) -> None:
    clock = VirtualClock(0.0)
    config = settings(database_url, quota=fair_tree(tmp_path))
    async with running_service(config, clock) as svc:
        await submit(svc, pytorchjob("long", gpus=4, duration="10h"))
        await running.settle(svc.loop, clock)
        await running.settle(svc.loop, clock, loop_module.FAIR_SAVE_EVERY + 10)
        async with svc.db.read() as session:
            stored, at = await admin_rows.queue_usage(session)
        assert at >= loop_module.FAIR_SAVE_EVERY
        assert stored["team-a"]["nvidia.com/gpu"] > 0


async def test_without_fair_sharing_nothing_is_stored(database_url: str) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        await submit(svc, pytorchjob("long", gpus=4, duration="10h"))
        await running.settle(svc.loop, clock, loop_module.FAIR_SAVE_EVERY + 10)
    stored, _ = await stored_usage(database_url)
    assert stored == {}


async def test_a_restored_usage_of_a_queue_gone_from_the_tree_is_dropped(
    database_url: str, tmp_path: Path
) -> None:
    clock = VirtualClock(0.0)
    config = settings(database_url, quota=fair_tree(tmp_path))
    async with running_service(config, clock) as svc:
        events.apply(svc.loop.state, events.FairUsageRestored({"gone": {"cpu": 1.0}}, 0.0))
        assert "gone" not in svc.loop.state.fair.records(svc.loop.state.tree)


async def test_a_replays_loop_does_not_store_the_usage(database_url: str, tmp_path: Path) -> None:
    clock = VirtualClock(0.0)
    config = settings(database_url, quota=fair_tree(tmp_path))
    async with running_service(config, clock) as svc:
        svc.loop.journal.decisions_behind = True  # as fleet.sim.engine sets it
        await submit(svc, pytorchjob("long", gpus=4, duration="10h"))
        await running.settle(svc.loop, clock, loop_module.FAIR_SAVE_EVERY + 10)
        assert svc.loop.state.fair.records(svc.loop.state.tree)["team-a"]
    stored, at = await stored_usage(database_url)
    assert at == 0.0 and stored["team-a"] == {}  # only what the start stored, before the flag
