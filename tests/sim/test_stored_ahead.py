"""A replay stores its submissions ahead of their time: what the store holds and the results say."""

from __future__ import annotations

from fleet.sim import engine
from fleet.store import replays
from fleet.store.database import Database
from tests.sim.test_known_answers import traces_of

M = 60.0


def test_jobs_stored_for_a_time_the_replay_does_not_reach_are_not_in_its_results() -> None:
    # lab/default-0 comes at 10m: stored with the others at 0 (before the next
    # sample, 1h), but the replay ends at once (its wall-time limit)
    jobs, tree_text, clusters_text = traces_of("lab-vc-safety")
    assert {j.key: j.submit for j in jobs}["lab/default-0"] == 10 * M
    result = engine.run(jobs, tree_text, clusters_text, "fleet", sample_every=60 * M, wall_limit=0)
    assert sorted(j.key for j in result.jobs) == ["lab-vc1/vc1-0", "lab-vc1/vc1-1", "lab-vc1/vc1-2"]


def test_an_observer_sees_the_jobs_submitted_by_its_time_and_none_stored_for_later() -> None:
    jobs, tree_text, clusters_text = traces_of("lab-vc-safety")
    seen: list[tuple[float, list[str]]] = []

    async def observe(db: Database, now: float) -> None:
        async with db.read() as session:
            seen.append((now, [f"{r.namespace}/{r.name}" for r in await replays.outcomes(session)]))

    result = engine.run(
        jobs, tree_text, clusters_text, "fleet", until=5 * M, sample_every=3 * M, observe=observe
    )
    assert sorted(j.key for j in result.jobs) == [
        "lab-vc1/vc1-0",
        "lab-vc1/vc1-1",
        "lab-vc1/vc1-2",
    ]
    assert [(t, sorted(keys)) for t, keys in seen] == [
        (0.0, []),
        (3 * M, ["lab-vc1/vc1-0", "lab-vc1/vc1-1", "lab-vc1/vc1-2"]),
    ]


def test_the_whole_small_trace_gives_the_same_results_however_far_ahead_it_is_stored() -> None:
    jobs, tree_text, clusters_text = traces_of("lab-vc-safety")
    results = [
        {(j.key, j.submit, j.start, j.end, j.preemptions) for j in run.jobs}
        for run in (
            engine.run(jobs, tree_text, clusters_text, "fleet", sample_every=every)
            for every in (1.0, 60.0, 24 * 3600.0)
        )
    ]
    assert results[0] == results[1] == results[2]
    assert len(results[0]) == len(jobs)
