"""Submissions read in worker processes: the same answers as in the serving process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import pytest

from fleet.api import keys, parse_workers
from fleet.api.app import create_app
from fleet.api.parse_workers import PAUSE, ParseWorkers
from fleet.api.problems import ProblemError
from fleet.api.submissions import SubmissionLimits, Submitted, parse_submission
from fleet.clock import VirtualClock
from fleet.core.quota import QuotaTree
from fleet.manifests import convert
from fleet.manifests.models import MemberClusterModel
from fleet.service.settings import POLICIES
from fleet.testing import documents, running
from tests.api.test_submissions import clusters, tree
from tests.manifests.factories import dump, make_job, make_policy, make_tree, node

LIMITS = SubmissionLimits(max_bytes=64 * 1024, max_replicas=16)

BODIES: dict[str, bytes] = {
    "good": dump(make_policy(), make_job("one"), make_job("two", workers=1)).encode(),
    "malformed YAML": b"kind: [unclosed\n",
    "no queue owns the namespace": dump(
        make_policy(namespace="nobody"), make_job("x", namespace="nobody")
    ).encode(),
    "too many pods": dump(make_policy(), make_job("wide", workers=40)).encode(),
    "not UTF-8": b"kind: \xff\n",
    "over the size limit": b"#" * (LIMITS.max_bytes + 1),
    "a job no policy selects": dump(make_job("alone")).encode(),
}


def here(
    body: bytes,
    tree: QuotaTree,
    clusters: list[MemberClusterModel],
) -> list[Submitted] | dict[str, Any]:
    """The serving process's answer: the jobs, or the problem as the client sees it."""
    try:
        return parse_submission(body, tree=tree, clusters=clusters, first_seq=0, limits=LIMITS)
    except ProblemError as e:
        return dict(json.loads(e.problem.to_json()))


async def there(
    workers: ParseWorkers,
    body: bytes,
    tree: QuotaTree,
    clusters: list[MemberClusterModel],
) -> list[Submitted] | dict[str, Any]:
    try:
        return await workers.parse(body, tree=tree, clusters=clusters, limits=LIMITS)
    except ProblemError as e:
        return dict(json.loads(e.problem.to_json()))


async def test_workers_answer_every_body_as_the_serving_process_does_in_one_batch() -> None:
    workers = ParseWorkers(1)
    members = list(clusters())
    try:
        answers = await asyncio.gather(
            *(there(workers, body, tree(), members) for body in BODIES.values())
        )
        for (what, body), answer in zip(BODIES.items(), answers, strict=True):
            assert answer == here(body, tree(), members), what
        good = answers[0]
        assert isinstance(good, list) and [s.name for s in good] == ["one", "two"]
        assert all(isinstance(a, dict) for a in answers[1:])
        # The bodies read by the workers went as one task, sent again with the tree
        # and clusters the fresh worker did not hold yet; the oversized one never went.
        assert workers.tasks == 2
        (pid,) = workers.workers.pids()
        assert pid != os.getpid()
    finally:
        workers.close()


async def test_workers_check_against_the_tree_the_service_holds_now() -> None:
    workers = ParseWorkers(1)
    members = list(clusters())
    body = dump(make_policy(namespace="c"), make_job("new", namespace="c")).encode()
    try:
        before = await there(workers, body, tree(), members)
        assert isinstance(before, dict) and before["status"] == 422  # no leaf owns "c"
        root = node(
            "root",
            min={"nvidia.com/gpu": 16},
            max={"nvidia.com/gpu": 16},
            children=[node("team-c", min={"nvidia.com/gpu": 8}, namespaces=["c"])],
        )
        changed, _ = convert.load_quota(dump(make_tree(root)))
        after = await there(workers, body, changed, members)
        assert isinstance(after, list) and after[0].job.queue == "team-c"
        assert after == here(body, changed, members)
    finally:
        workers.close()


async def test_a_dead_worker_fails_no_submission_and_is_replaced_after_a_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    workers = ParseWorkers(1)
    members = list(clusters())
    good = BODIES["good"]
    try:
        assert isinstance(await there(workers, good, tree(), members), list)
        (pid,) = workers.workers.pids()
        os.kill(pid, signal.SIGKILL)
        # Its batch is read in the serving process instead, and so is the next...
        assert await there(workers, good, tree(), members) == here(good, tree(), members)
        tasks = workers.tasks
        assert await there(workers, good, tree(), members) == here(good, tree(), members)
        assert workers.tasks == tasks and workers.workers.started == 1
        # ... until the pause is over: then a new worker reads it.
        real = time.monotonic
        monkeypatch.setattr(parse_workers.time, "monotonic", lambda: real() + PAUSE)
        assert await there(workers, good, tree(), members) == here(good, tree(), members)
        assert workers.tasks > tasks and workers.workers.started == 2
        (new_pid,) = workers.workers.pids()
        assert new_pid != pid
    finally:
        workers.close()
    with pytest.raises(ProcessLookupError):
        os.kill(new_pid, 0)


async def test_the_api_reads_submissions_in_its_workers(
    aiohttp_client: Any, database_url: str
) -> None:
    settings = running.settings(
        database_url,
        clusters=POLICIES / "clusters" / "lab-2.yaml",
        quota=POLICIES / "lab" / "quota-one-vc.yaml",
        parse_processes=1,
    )
    client = await aiohttp_client(create_app(settings, clock=VirtualClock(1000.0)))
    headers = {"Content-Type": "application/yaml"}
    text = documents.pytorchjob("a", namespace="lab", workers=1, gpus=1)
    resp = await client.post("/api/v1/submissions", data=text, headers=headers)
    assert resp.status == 201, await resp.text()
    assert [j["name"] for j in (await resp.json())["jobs"]] == ["a"]
    bad = documents.pytorchjob("b", namespace="nobody", workers=1, gpus=1)
    resp = await client.post("/api/v1/submissions", data=bad, headers=headers)
    assert resp.status == 422 and resp.content_type == "application/problem+json"
    errors = (await resp.json())["errors"]
    assert [(e["name"], e["path"]) for e in errors] == [
        ("nobody/b", "metadata.namespace")  # no queue for its namespace
    ]
    assert (await client.get("/api/v1/jobs/nobody/b")).status == 404  # nothing stored
    workers = client.app[keys.PARSE_WORKERS]
    assert workers.tasks >= 2
    (pid,) = workers.workers.pids()
    await client.close()  # the service stops its workers
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
