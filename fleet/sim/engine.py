"""Replaying a trace through the service's own scheduler loop on a virtual clock.

Theory of operation: a replay builds what ``fleet serve`` builds — a store,
the quota tree, one placer and one simulated member per cluster, and a
:class:`fleet.service.loop.SchedulerLoop` — but on a :class:`fleet.clock.VirtualClock`
and with the cycle run inline.  Nothing in the loop knows it is replayed: the
replay submits jobs the way the API does (:func:`fleet.service.intake.accept`, then
:meth:`~fleet.service.loop.SchedulerLoop.submitted`), and the simulated members end
jobs when their ``fleet.io/simulated-duration`` has passed on the clock.

The replay steps time itself, from one moment to the next thing that happens:
the next submission, the earliest deadline a coroutine sleeps for (a job's
end), or the next sample.  At each moment it moves the clock there and lets
the loop settle (every coroutine waits, the loop is idle with an empty
inbox) before it looks again, so every transition is recorded at the virtual
time it happened.  Sleepers are woken one at a time
(:meth:`~fleet.clock.VirtualClock.advance_one`), so jobs that end at the same
second are handled one after the other in a fixed order, however fast the
store's thread answers.  The loop's own timer is set far out
(:data:`LOOP_INTERVAL`): every change wakes the loop, and nothing in a
replay needs a periodic cycle.  The replay ends when every job has been
submitted and nothing runs any more (jobs that can never start stay
pending), or at ``until``.

The store is a SQLite file in a temporary directory (one per replay) opened
with :data:`fleet.store.database.Durability` ``FAST``: the same schema and
the same writes as the service, without waiting for the disk, since the file
is thrown away.  Its statements are the replay's largest cost, so it writes
in large batches: the submissions up to the next sample are stored in one
transaction, each at its own time (:class:`_Ahead`), and the loop's journal
writes behind (``write_behind``: records wait until a bounded number of
them waits, or a reader flushes) and lets a cycle's decisions wait too,
without intents (``decisions_behind``: nothing ever restarts from this
store), reading the jobs it creates ahead.  Per-job results are read back from the store at the end
(its jobs and their events, :mod:`fleet.store.replays`), the record the
service keeps anyway: besides starts and ends, the reason of each
preemption (:func:`fleet.store.replays.preemption_reasons`) and whether the
job ran past a time limit (an event named in :data:`PAST_DEADLINE`).
Per-queue time series are sampled from the loop's state every
``sample_every`` seconds of virtual time; the replay also keeps each leaf's
``min`` GPUs and fair-share weight, what :mod:`fleet.sim.report` measures
the queues' shares against.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import hashlib
import json
import math
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from fleet.clock import VirtualClock
from fleet.clusters.base import MemberCluster
from fleet.clusters.sim import (
    DEFAULT_DURATION,
    DURATION_ANNOTATION,
    SimulatedCluster,
    parse_duration,
)
from fleet.core import resources, snapshot
from fleet.core.jobs import DEFAULT_PRIORITY_CLASSES, NON_PREEMPTIBLE_BY_DEFAULT, Job, ReplicaGroup
from fleet.core.quota import QuotaTree
from fleet.core.resources import Resources
from fleet.manifests import convert
from fleet.manifests.models import MemberClusterModel
from fleet.service import intake
from fleet.service.collector import FollowGrowth
from fleet.service.loop import SchedulerLoop
from fleet.sim import policies
from fleet.sim.traces import TraceError, TraceJob
from fleet.store import jobs as job_rows
from fleet.store import replays
from fleet.store.database import Database, Durability, Session, open_database
from fleet.store.models import JobRow

#: The annotation in which a job declares how long it is expected to run.
EXPECTED_ANNOTATION: Final = "fleet.io/expected-duration"
#: Seconds between the loop's timed cycles in a replay: effectively never.
LOOP_INTERVAL: Final = 100 * 365 * 24 * 3600.0
#: Default seconds of virtual time between two samples of the queues.
SAMPLE_EVERY: Final = 3600.0
#: Most jobs of the trace stored ahead in one transaction (:class:`_Ahead`).
AHEAD: Final = 2048

Progress = Callable[[int, int, float], None]
#: Writes jobs into a replay's empty store before its loop starts.
Seed = Callable[[Session], Awaitable[None]]
#: Looks at a replay's store at a sample time.
Observer = Callable[[Database, float], Awaitable[None]]
#: Events that end a job's run in the store's event log.
_RUN_ENDS: Final = frozenset({"Preempted", "Succeeded", "Failed", "Cancelled"})
#: Event reasons that say a job ran past its own deadline or its queue's run-time limit.
PAST_DEADLINE: Final = ("DeadlineExceeded", "MaxRuntimeExceeded")


@dataclass(frozen=True, slots=True)
class JobResult:
    """What happened to one job of the trace (times in seconds of virtual time)."""

    key: str
    queue: str
    gpus: int
    submit: float
    duration: float
    admit: float | None
    start: float | None
    end: float | None
    state: str
    cluster: str | None
    mode: str | None
    preemptions: int
    #: GPU-seconds the job ran, over all its runs (a preempted run counts until it stopped).
    gpu_seconds: float
    #: The reason of each preemption, in order.
    preempted_for: tuple[str, ...] = ()
    #: The :data:`PAST_DEADLINE` reasons among the job's events, in that order.
    past_deadline: tuple[str, ...] = ()

    @property
    def queueing_delay(self) -> float | None:
        """First start minus submission (None: it never started)."""
        return None if self.start is None else self.start - self.submit


@dataclass(frozen=True, slots=True)
class Sample:
    """The queues at one moment: GPUs used and borrowed, and jobs pending, per leaf queue."""

    time: float
    used: Mapping[str, int]
    borrowed: Mapping[str, int]
    pending: Mapping[str, int]
    busy: int
    #: Free GPUs on nodes that are partly busy, over all free GPUs (0: none free).
    fragmentation: float


@dataclass(frozen=True, slots=True)
class Replay:
    """One policy's replay of a trace."""

    policy: str
    jobs: tuple[JobResult, ...]
    samples: tuple[Sample, ...]
    queues: tuple[str, ...]
    gpus: int
    horizon: float
    wall_s: float
    iterations: int
    #: Each leaf's ``min`` GPUs in the policy's tree (0: none).
    min_gpus: Mapping[str, int] = field(default_factory=dict)
    #: Each leaf's fair-share weight (``fairSharing.weight`` in force, 1 by default).
    weights: Mapping[str, float] = field(default_factory=dict)


def _priority(trace_job: TraceJob) -> int:
    value = DEFAULT_PRIORITY_CLASSES.get(trace_job.priority_class)
    if value is None:
        raise TraceError(
            f"job {trace_job.key}: unknown priority class {trace_job.priority_class!r}; "
            f"known: {', '.join(DEFAULT_PRIORITY_CLASSES)}"
        )
    return value


def _millis(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def new_job(trace_job: TraceJob) -> intake.NewJob:
    """The submission of one trace job: its core job and the PyTorchJob a user would send."""
    namespace, _, name = trace_job.key.partition("/")
    if trace_job.job is not None and trace_job.manifest is not None:
        job = trace_job.job
        manifest = dict(trace_job.manifest)
        policy = None if trace_job.policy is None else dict(trace_job.policy)
    else:
        per_pod = Resources({resources.GPU: trace_job.gpus} if trace_job.gpus else {})
        job = Job(
            key=trace_job.key,
            queue=trace_job.queue,
            priority=_priority(trace_job),
            seq=0,
            groups=(ReplicaGroup("Worker", trace_job.replicas, per_pod),),
            preemptible=trace_job.priority_class not in NON_PREEMPTIBLE_BY_DEFAULT,
            priority_class=trace_job.priority_class,
        )
        container: dict[str, Any] = {"name": "pytorch", "image": "trace/replay"}
        annotations = {DURATION_ANNOTATION: _millis(trace_job.duration)}
        if trace_job.declared:
            annotations[EXPECTED_ANNOTATION] = _millis(trace_job.duration)
        if trace_job.gpus:
            container["resources"] = {"limits": {resources.GPU: trace_job.gpus}}
        manifest = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": annotations,
            },
            "spec": {
                "runPolicy": {
                    "schedulingPolicy": {
                        "queue": trace_job.queue,
                        "priorityClass": trace_job.priority_class,
                    }
                },
                "pytorchReplicaSpecs": {
                    "Worker": {
                        "replicas": trace_job.replicas,
                        "template": {"spec": {"containers": [container]}},
                    }
                },
            },
        }
        policy = None
    text = json.dumps({"job": manifest, "policy": policy}, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return intake.NewJob(job, manifest, policy, digest)


class _Ahead:
    """Submissions stored ahead of their time, to be handed to the loop at it.

    The replay knows its submissions: it stores those up to the next sample
    (at most :data:`AHEAD` jobs, never part of a moment's) in one transaction
    (:func:`fleet.service.intake.accept_each`, each at its own time) instead
    of one per moment, and tells the loop of each when its time comes, as
    the API would after its commit.  An observer at a sample sees the same
    store; jobs stored for a time the replay does not reach are deleted at
    the end (:meth:`forget`).
    """

    def __init__(self, db: Database, jobs: Sequence[TraceJob], start: float) -> None:
        self.db = db
        self.jobs = jobs
        self.start = start
        #: (index of its first job, its jobs' count, what became of it), in order
        self.stored: collections.deque[tuple[int, int, list[intake.Accepted] | intake.NameTaken]]
        self.stored = collections.deque()
        self.until = 0  # jobs[:until] are stored

    def _moment(self, i: int) -> int:
        """The end of the moment of ``jobs[i]``: the index after its last job."""
        at = max(self.jobs[i].submit, self.start)
        j = i + 1
        while j < len(self.jobs) and max(self.jobs[j].submit, self.start) <= at:
            j += 1
        return j

    async def take(self, i: int, now: float, before: float) -> tuple[list[intake.Accepted], int]:
        """The stored jobs of the submission at ``now`` (from ``jobs[i]``), and the
        index after it; stores ahead up to ``before`` first if it is not stored."""
        if i >= self.until:
            submissions: list[tuple[Sequence[intake.NewJob], float]] = []
            moments: list[tuple[int, int]] = []
            j = i
            while j < len(self.jobs) and (
                j == i or (self.jobs[j].submit < before and j - i < AHEAD)
            ):
                end = self._moment(j)
                submissions.append(
                    ([new_job(tj) for tj in self.jobs[j:end]], max(self.jobs[j].submit, self.start))
                )
                moments.append((j, end - j))
                j = end
            outcomes = await intake.accept_each(self.db, submissions)
            self.stored.extend(
                (first, count, outcome)
                for (first, count), outcome in zip(moments, outcomes, strict=True)
            )
            self.until = j
        first, count, outcome = self.stored.popleft()
        assert first == i and max(self.jobs[i].submit, self.start) <= now
        if isinstance(outcome, intake.NameTaken):
            raise outcome
        return outcome, i + count

    async def forget(self) -> None:
        """Delete the jobs stored for submissions never handed to the loop."""
        ids = [
            a.head.id
            for _, _, outcome in self.stored
            if not isinstance(outcome, intake.NameTaken)
            for a in outcome
            if a.created
        ]
        self.stored.clear()
        if ids:
            async with self.db.write() as session:
                await job_rows.delete_jobs(session, ids)


def _check_queues(jobs: Sequence[TraceJob], tree: QuotaTree) -> None:
    leaves = set(tree.leaves())
    for job in jobs:
        if job.queue not in leaves:
            shown = ", ".join(tree.leaves())
            raise TraceError(
                f"job {job.key}: queue {job.queue!r} is not a leaf of the quota tree "
                f"(leaves: {shown}); generate a matching tree with `fleet simulate gen-clusters`"
            )


async def _settle(loop: SchedulerLoop, clock: VirtualClock) -> None:
    """Let every coroutine run until the loop is idle with nothing to do."""
    while True:
        await clock.run_until_idle()
        await loop.quiet()
        await clock.run_until_idle()
        if loop.is_quiet():
            return


def _node_gpus(clusters: Sequence[MemberClusterModel]) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for cluster in clusters:
        for node, capacity in cluster.cell_config().nodes().items():
            out[(cluster.name, node)] = capacity[resources.GPU]
    return out


def cluster_gpus(clusters: Sequence[MemberClusterModel]) -> int:
    """The GPUs of all the clusters' nodes (a replay's ``gpus``)."""
    return sum(_node_gpus(clusters).values())


def _sample(loop: SchedulerLoop, node_gpus: Mapping[tuple[str, str], int], now: float) -> Sample:
    state = loop.state
    tree = state.tree
    leaves = tree.leaves()
    busy_on: dict[tuple[str, str], int] = {}
    for run in state.running.values():
        for pod in run.pods:
            where = (run.cluster, pod.node)
            busy_on[where] = busy_on.get(where, 0) + len(pod.gpus)
    busy = sum(busy_on.values())
    free = sum(node_gpus.values()) - busy
    partly = sum(
        node_gpus[where] - used for where, used in busy_on.items() if used < node_gpus[where]
    )
    return Sample(
        time=now,
        used={q: tree.used(q)[resources.GPU] for q in leaves},
        borrowed={q: tree.borrowed_used(q)[resources.GPU] for q in leaves},
        pending={q: len(state.queues[q].pending) for q in leaves},
        busy=busy,
        fragmentation=partly / free if free > 0 else 0.0,
    )


def _seeded(row: JobRow) -> TraceJob:
    """A job written into the store by a seed, as a trace job (for its results)."""
    job = snapshot.job_from_plain(row.record, seq=row.id)
    annotations = (row.manifest.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(DURATION_ANNOTATION)
    duration = parse_duration(text) if isinstance(text, str) else DEFAULT_DURATION
    return TraceJob(
        key=job.key,
        queue=job.queue,
        submit=row.created_at,
        duration=duration,
        replicas=len(job.pods),
        gpus=job.request[resources.GPU] // max(1, len(job.pods)),
        priority_class=job.priority_class,
    )


async def _flushed(loop: SchedulerLoop) -> Database:
    """The loop's store with everything the loop holds back written (it writes behind)."""
    await loop.flush()
    return loop.db


async def _results(db: Database, jobs: Sequence[TraceJob], end: float) -> list[JobResult]:
    """Every trace job's outcome, from the store's jobs and events."""
    by_key = {tj.key: tj for tj in jobs}
    async with db.read() as session:
        # Columns, not ORM objects (a whole trace is a hundred thousand rows).
        rows = {f"{r.namespace}/{r.name}": r for r in await replays.outcomes(session)}
        seeded = {
            r.id: _seeded(r)
            for r in await job_rows.by_ids(
                session, [r.id for key, r in rows.items() if key not in by_key]
            )
        }
        firsts: dict[int, dict[str, float]] = {}
        lasts: dict[int, dict[str, float]] = {}
        preempted: dict[int, int] = {}
        ran: dict[int, float] = {}
        since: dict[int, float] = {}
        for job_id, at, reason in await replays.event_log(session):
            firsts.setdefault(job_id, {}).setdefault(reason, at)
            lasts.setdefault(job_id, {})[reason] = at
            if reason == "Running":
                since[job_id] = at
            elif reason in _RUN_ENDS and job_id in since:
                ran[job_id] = ran.get(job_id, 0.0) + at - since.pop(job_id)
            if reason == "Preempted":
                preempted[job_id] = preempted.get(job_id, 0) + 1
        for job_id, at in since.items():  # still running at the end
            ran[job_id] = ran.get(job_id, 0.0) + end - at
        reasons = await replays.preemption_reasons(session)
    out: list[JobResult] = []
    for key, row in rows.items():
        tj = by_key.get(key) or seeded[row.id]
        first = firsts.get(row.id, {})
        last = lasts.get(row.id, {})
        ended = last.get("Succeeded", last.get("Failed"))
        out.append(
            JobResult(
                key=tj.key,
                queue=tj.queue,
                gpus=tj.total_gpus,
                submit=row.created_at,
                duration=tj.duration,
                admit=first.get("Admitted"),
                start=first.get("Running"),
                end=ended,
                state=row.state,
                cluster=row.cluster,
                mode=row.mode,
                preemptions=preempted.get(row.id, 0),
                gpu_seconds=tj.total_gpus * ran.get(row.id, 0.0),
                preempted_for=tuple(reasons.get(row.id, ())),
                past_deadline=tuple(r for r in PAST_DEADLINE if r in first),
            )
        )
    return out


async def replay(
    jobs: Sequence[TraceJob],
    tree_document: str,
    clusters_document: str,
    policy: str,
    *,
    until: float | None = None,
    sample_every: float = SAMPLE_EVERY,
    progress: Progress | None = None,
    workdir: Path | None = None,
    start: float = 0.0,
    seed: Seed | None = None,
    until_started: bool = False,
    wall_limit: float | None = None,
    observe: Observer | None = None,
) -> Replay:
    """Replay ``jobs`` under ``policy``; see the module docstring.

    ``start`` is the virtual time the replay begins at; ``seed`` writes jobs
    into the empty store before the loop starts (they are restored as the
    service restores its jobs after a restart: running ones at their recorded
    cells, waiting ones in order).  With ``until_started`` the replay ends as
    soon as every job has been submitted and none waits; ``wall_limit``
    (seconds of real time) ends it early, whatever is left.  ``observe`` is
    called with the replay's store and the time at every sample, while the
    loop is idle (it may read the store, not write it).

    Raises :class:`~fleet.sim.traces.TraceError` for a job whose queue is not
    a leaf of the tree, and :class:`~fleet.manifests.errors.SpecError` for a
    tree or cluster document that does not load.
    """
    started = time.perf_counter()
    horizon = math.inf if until is None else until
    tree, _ = convert.load_quota(policies.tree_text(policy, tree_document))
    clusters = convert.load_clusters(clusters_document)
    _check_queues(jobs, tree)
    placers = policies.placers(policy, clusters)
    node_gpus = _node_gpus(clusters)
    clock = VirtualClock(start)
    sims = {c.name: SimulatedCluster(c.name, clock) for c in clusters}
    members: dict[str, MemberCluster] = dict(sims)
    with tempfile.TemporaryDirectory(prefix="fleet-sim-", dir=workdir) as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'replay.db'}"
        db = await open_database(url, durability=Durability.FAST, inline=True)
        loop = SchedulerLoop(
            db,
            clock,
            tree,
            placers,
            members,
            interval=LOOP_INTERVAL,
            vc_sizes={c.name: convert.vc_gpus(c) for c in clusters},
        )
        loop.journal.write_behind = True  # the store is read only through _flushed
        loop.journal.decisions_behind = True  # and nothing restarts from it
        samples: list[Sample] = []
        try:
            if seed is not None:
                async with db.write() as session:
                    await seed(session)
            await loop.start()
            i, n = 0, len(jobs)
            next_sample = start
            ahead = _Ahead(db, jobs, start)
            while True:
                await _settle(loop, clock)
                now = clock.now()
                if now >= next_sample:
                    samples.append(_sample(loop, node_gpus, now))
                    next_sample = now + sample_every
                    if observe is not None:
                        await observe(await _flushed(loop), now)
                    if progress is not None:  # also while the last jobs run out
                        progress(i, n, now)
                if i < n and jobs[i].submit <= now:
                    accepted, i = await ahead.take(i, now, min(next_sample, horizon))
                    loop.submitted([a.job for a in accepted if a.job is not None])
                    if progress is not None:
                        progress(i, n, now)
                    continue
                state = loop.state
                if i >= n and not state.running and not state.stopping:
                    break
                if until_started and i >= n and not state.pending_count() and not state.stopping:
                    break
                if wall_limit is not None and time.perf_counter() - started > wall_limit:
                    break
                deadline = clock.next_deadline()
                target = min(next_sample, jobs[i].submit if i < n else math.inf)
                busy = bool(state.running or state.stopping)
                if busy and deadline is not None and deadline <= min(target, horizon):
                    await clock.advance_one()  # one wake-up at a time, in order
                    continue
                if target > horizon:
                    await clock.advance_to(horizon)
                    await _settle(loop, clock)
                    break
                await clock.advance_to(target)
            end = clock.now()
            await ahead.forget()
            results = await _results(await _flushed(loop), jobs, end)
        finally:
            await loop.stop()
            for member in sims.values():
                await member.close()
            await db.close()
    return Replay(
        policy=policy,
        jobs=tuple(results),
        samples=tuple(samples),
        queues=tuple(tree.leaves()),
        gpus=sum(node_gpus.values()),
        horizon=end,
        wall_s=time.perf_counter() - started,
        iterations=loop.iterations,
        min_gpus={q: tree.min_of(q)[resources.GPU] for q in tree.leaves()},
        weights={leaf: tree.fair_sharing(leaf)[1] for leaf in tree.leaves()},
    )


def run(
    jobs: Sequence[TraceJob],
    tree_document: str,
    clusters_document: str,
    policy: str,
    **kw: Any,
) -> Replay:
    """:func:`replay` in a fresh event loop (for the command line and benchmarks).

    Full collections follow the growth of the heap as in ``fleet serve``
    (:class:`fleet.service.collector.FollowGrowth`, unless one already
    does): a replay's heap grows with the trace, and each full collection
    would walk all of it.
    """
    collector = None
    if not any(isinstance(c, FollowGrowth) for c in gc.callbacks):
        collector = FollowGrowth()
        collector.install()
    try:
        return asyncio.run(replay(jobs, tree_document, clusters_document, policy, **kw))
    finally:
        if collector is not None:
            collector.remove()
