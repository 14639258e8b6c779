"""The fleet over time in the store: samples written, read back, and deleted past retention."""

from __future__ import annotations

from fleet.store.database import open_database
from fleet.store.samples import FLEET, Sample, add_samples, samples_since


def sample(queue: str, gpus: int) -> Sample:
    return Sample(queue=queue, gpus=gpus, running=1, pending=2, wait_p95=None, starts=0)


async def test_old_samples_are_deleted_as_new_ones_are_written(database_url: str) -> None:
    db = await open_database(database_url)
    try:
        retention = 300.0
        for at in (0.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0, 420.0):
            async with db.write() as session:
                await add_samples(
                    session,
                    at,
                    [sample("team-a", int(at)), sample(FLEET, int(at))],
                    keep_after=at - retention,
                )
        async with db.read() as session:
            kept = await samples_since(session, 0.0)
            recent = await samples_since(session, 400.0)
        # 420 - 300 = 120: the samples before 120 s are gone, the rest kept in order.
        assert sorted({at for at, _ in kept}) == [120.0, 180.0, 240.0, 300.0, 360.0, 420.0]
        assert [(at, s.queue) for at, s in kept[:2]] == [(120.0, FLEET), (120.0, "team-a")]
        assert [(at, s.queue, s.gpus) for at, s in recent] == [
            (420.0, FLEET, 420),
            (420.0, "team-a", 420),
        ]
        assert recent[0][1] == sample(FLEET, 420)
        async with db.write() as session:  # taken again at the same moment: replaced
            await add_samples(session, 420.0, [sample("team-b", 1)], keep_after=120.0)
        async with db.read() as session:
            assert [(at, s.queue) for at, s in await samples_since(session, 400.0)] == [
                (420.0, "team-b")
            ]
    finally:
        await db.close()


async def test_a_long_range_is_merged_into_stretches(database_url: str) -> None:
    db = await open_database(database_url)
    try:
        async with db.write() as session:
            for at in range(0, 600, 60):  # 10 samples, 60 s apart
                s = Sample("team-a", at // 60, 1, 0, float(at) if at % 120 else None, 1)
                await add_samples(session, float(at), [s], keep_after=0.0)
        async with db.read() as session:
            merged = await samples_since(session, 0.0, width=300.0)
        assert [(at, s.gpus, s.wait_p95, s.starts) for at, s in merged] == [
            (240.0, 4, 180.0, 5),  # 0..240: the largest of each figure, the admissions summed
            (540.0, 9, 540.0, 5),
        ]
    finally:
        await db.close()
