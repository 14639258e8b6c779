"""What a replay reads back from its store besides starts and ends: reasons, deadlines, mins."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fleet.manifests import convert
from fleet.service import intake
from fleet.sim import engine, traces
from fleet.store import jobs as job_rows
from fleet.store.database import Session

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"


def documents() -> tuple[str, str, list[traces.TraceJob]]:
    tree_text = (POLICIES / "lab" / "quota-two-vcs-borrowing.yaml").read_text(encoding="utf-8")
    clusters_text = (POLICIES / "clusters" / "lab-1.yaml").read_text(encoding="utf-8")
    tree, _ = convert.load_quota(tree_text)
    clusters = convert.load_clusters(clusters_text)
    text = (POLICIES / "sim" / "lab-vc-safety.yaml").read_text(encoding="utf-8")
    return tree_text, clusters_text, traces.read_fleet(text, tree, clusters)


def test_each_preemption_has_a_reason_and_the_replay_knows_each_queues_min() -> None:
    tree_text, clusters_text, jobs = documents()
    result = engine.run(jobs, tree_text, clusters_text, "fleet", sample_every=60.0)
    reasons = {j.key: j.preempted_for for j in result.jobs}
    # vc1-1 borrowed default's GPU and was preempted once when default wanted it back.
    assert reasons == {
        "lab-vc1/vc1-0": (),
        "lab-vc1/vc1-1": ("Reclaim",),
        "lab-vc1/vc1-2": (),
        "lab/default-0": (),
    }
    assert all(j.past_deadline == () for j in result.jobs)
    assert result.min_gpus == {"default": 1, "vc1": 1}
    assert result.weights == {"default": 1.0, "vc1": 1.0}


def test_a_job_with_a_deadline_event_counts_as_past_its_deadline() -> None:
    tree_text, clusters_text, jobs = documents()
    late = traces.TraceJob(
        key="lab/late", queue="default", submit=0.0, duration=60.0, replicas=1, gpus=1
    )

    async def seed(session: Session) -> None:
        ((accepted,),) = await intake._store(session, [[engine.new_job(late)]], [0.0])
        for reason in ("MaxRuntimeExceeded", "Note", "DeadlineExceeded"):
            job_rows.add_event(session, accepted.head.id, 0.0, reason)

    result = asyncio.run(
        engine.replay(jobs[:1], tree_text, clusters_text, "fleet", sample_every=60.0, seed=seed)
    )
    got = {j.key: j.past_deadline for j in result.jobs}
    assert got == {"lab/late": ("DeadlineExceeded", "MaxRuntimeExceeded"), "lab-vc1/vc1-0": ()}
