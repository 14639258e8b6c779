"""When will a waiting job start?  The simulator run forward from the live state.

Theory of operation: :func:`forecast` reads the service's store
(:mod:`fleet.store.replays`) — the jobs that hold cells (with their
placements) and the jobs that wait (in order) — and writes copies of them
into a replay's empty store (:func:`fleet.sim.engine.replay` with a
``seed``), so that the replay's loop restores them exactly as the service
restores itself after a restart.  Each job runs in the simulated members for
what it is expected to take:

* its ``fleet.io/expected-duration`` annotation (a duration such as ``2h``),
  counted from when it started for a running job;
* else the median run of the last :data:`HISTORY` jobs of its queue that
  finished;
* else :data:`DEFAULT_EXPECTED`.

A running job is expected to run on for what is left of its declared
duration; past it (overdue), or without one, for the median of what the
queue's recent runs that lasted longer than it has run so far still took
(what is left of a run, given how long it has lasted: a job that has run for
hours is not expected to end "now"); when fewer than :data:`MIN_LONGER`
recent runs lasted that long, for what is left of the queue's median run, or
once past it, for half what it has run so far (:func:`remaining`).

No new submission is assumed.  The replay runs on a virtual clock from the
store's present time, in a worker thread with an event loop of its own (the
service's loop keeps serving; in the service, in a process of its own:
:mod:`fleet.sim.worker`), until every waiting job has started, or the
``horizon`` of virtual time or the ``wall_limit`` of real time is reached,
and at most ``max_jobs`` waiting jobs (the first in order) are considered;
a job that does not start within those bounds gets no estimate.  Each
estimate says what it assumes, and whether every run time it rests on was
declared.

A point is not enough: :class:`Calibration` keeps how far earlier estimates
were from the starts that followed (the error over the estimated wait, at
least :data:`ERROR_SCALE_FLOOR`), and gives each new estimate the range
between the 10th and 90th percentiles of those errors, never narrower than
:data:`NARROWEST` (:data:`DEFAULT_RANGE` until :data:`MIN_SAMPLES` starts
were seen), separately for estimates on
declared run times and on queue histories.  :func:`shown` is what a reader
sees at a later moment: never a time in the past; a job whose estimated
start has passed is shown as overdue, starting any moment, with the range
growing as long as it stays overdue.

:class:`Estimator` refreshes a forecast in the background every
``interval`` seconds of the service's clock, when jobs wait, and waits
longer after a long forecast, so that forecasts take at most a tenth of the
service's time (:data:`SHARE`); the API shows its latest as
``estimatedStart`` (through :func:`shown`).  It also refreshes when an
estimate has fallen due, even if nothing else changed.  With another quota tree
(``tree_document``) the same forecast answers "what would this change do"
(``POST /api/v1/quota-tree?dryRun=Simulate``, ``fleet simulate --from-live``).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import json
import logging
import statistics
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from fleet.clock import Clock
from fleet.clusters.sim import DURATION_ANNOTATION, parse_duration
from fleet.core import wording
from fleet.sim import engine
from fleet.sim.engine import EXPECTED_ANNOTATION
from fleet.sim.worker import ForecastWorker, reachable_from_another_process
from fleet.store import replays
from fleet.store.database import Database, Session, open_database
from fleet.store.models import JobRow

log = logging.getLogger("fleet.sim.forecast")

#: Seconds a job is assumed to run when neither it nor its queue's history says.
DEFAULT_EXPECTED: Final = 3600.0
#: Finished jobs per queue whose median run is a job's expected run.
HISTORY: Final = 50
#: Default bounds of one forecast.
HORIZON: Final = 7 * 24 * 3600.0
MAX_JOBS: Final = 1000
WALL_LIMIT: Final = 20.0
#: The share of the service's time the background estimates may take: after a
#: forecast that took T seconds the next one waits at least T / SHARE - T.
SHARE: Final = 0.1
#: Seconds an estimate's error is measured against at least (an estimated wait
#: shorter than this counts as this long).
ERROR_SCALE_FLOOR: Final = 300.0
#: The narrowest range, however close earlier estimates were: what was seen is
#: a sample, and the next start may fall outside it.
NARROWEST: Final = (-0.25, 0.5)
#: Errors (over the scale) of the range shown before enough starts were seen, by
#: whether the estimate rests on declared run times: the narrowest, else from
#: half the wait sooner to the wait again later.
DEFAULT_RANGE: Final = {True: NARROWEST, False: (-0.5, 1.0)}
#: Starts seen before the range follows them, and the most kept.
MIN_SAMPLES: Final = 20
KEEP_SAMPLES: Final = 2000
#: Estimates kept per waiting job until it starts (the most recent).
KEEP_PER_JOB: Final = 4
HOLDING: Final = ("Admitted", "Dispatched", "Running")
WAITING: Final = ("Queued", "Preempted")


@dataclass(frozen=True, slots=True)
class Estimate:
    """When a waiting job would start (None: not within the forecast's bounds), and why.

    ``earliest`` and ``latest`` bound the range it is expected in (None: not
    ranged yet); ``declared``: every run time the forecast rests on was
    declared; ``overdue``: the start has passed and the job still waits.
    """

    start: float | None
    assumes: str
    earliest: float | None = None
    latest: float | None = None
    declared: bool = False
    overdue: bool = False


@dataclass(frozen=True, slots=True)
class Forecast:
    """One run of the simulator forward from the live state."""

    at: float
    horizon: float
    #: waiting job -> its estimate
    estimates: Mapping[str, Estimate] = field(default_factory=dict)
    #: running job -> how many times the forecast preempts it
    preempted: Mapping[str, int] = field(default_factory=dict)
    #: what every estimate assumes
    assumes: str = ""
    #: waiting job -> its row's id
    ids: Mapping[str, int] = field(default_factory=dict)


def _annotation(manifest: Mapping[str, Any], name: str) -> str | None:
    metadata = manifest.get("metadata") or {}
    value = (metadata.get("annotations") or {}).get(name)
    return value if isinstance(value, str) else None


Runs = Mapping[str, Sequence[float]]


def _declared(manifest: Mapping[str, Any]) -> float | None:
    """The run time ``manifest`` declares (None: none, or not a duration)."""
    text = _annotation(manifest, EXPECTED_ANNOTATION)
    if text is not None:
        with contextlib.suppress(ValueError):
            return parse_duration(text)
    return None


def _expected(manifest: Mapping[str, Any], queue: str, runs: Runs) -> tuple[float, str, bool]:
    """How long a job of ``queue`` submitted as ``manifest`` is expected to run, why, and
    whether that was declared."""
    seconds = _declared(manifest)
    if seconds is not None:
        return seconds, f"runs {wording.duration(seconds)} ({EXPECTED_ANNOTATION})", True
    recent = runs.get(queue)
    if recent:
        seconds = statistics.median(recent)
        why = (
            f"runs {wording.duration(seconds)} (median of queue {queue}'s last {len(recent)} runs)"
        )
        return seconds, why, False

    why = f"runs {wording.duration(DEFAULT_EXPECTED)} (no duration declared, no history)"
    return DEFAULT_EXPECTED, why, False


#: Recent runs longer than a running job's that :func:`remaining` needs.
MIN_LONGER: Final = 3


def remaining(ran: float, declared: float | None, runs: Sequence[float]) -> float:
    """Seconds a job that has run ``ran`` seconds is expected to run on (module docstring).

    ``declared``: its declared run time (None: none); ``runs``: its queue's
    recent runs, sorted.
    """
    if declared is not None and declared > ran:
        return declared - ran
    longer = runs[bisect.bisect_right(runs, ran) :]
    if len(longer) >= MIN_LONGER:
        return max(1.0, statistics.median(longer) - ran)
    expected = statistics.median(runs) if runs else DEFAULT_EXPECTED
    if declared is None and expected > ran:
        return expected - ran
    return max(1.0, ran / 2)


async def _runs(session: Session) -> dict[str, tuple[float, ...]]:
    """Queue -> its last finished jobs' runs (at most :data:`HISTORY`), sorted."""
    finished = await replays.last_finished(session, HISTORY * 20)
    queue_of: dict[int, str] = {}
    taken: dict[str, int] = {}
    for job_id, queue in finished:
        if taken.get(queue, 0) < HISTORY:
            queue_of[job_id] = queue
            taken[queue] = taken.get(queue, 0) + 1
    if not queue_of:
        return {}
    events = await replays.run_events(session, sorted(queue_of))
    started: dict[int, float] = {}
    runs: dict[str, list[float]] = {}
    for job_id, at, reason in events:
        if reason == "Running":
            started[job_id] = at
        elif job_id in started:
            runs.setdefault(queue_of[job_id], []).append(at - started.pop(job_id))
    return {q: tuple(sorted(r)) for q, r in sorted(runs.items()) if r}


#: Rows of running jobs read at a time.
_PART: Final = 500


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _with_duration(manifest: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``manifest`` (a fresh copy: changed in place), to run ``seconds`` in a simulated member."""
    metadata = manifest.setdefault("metadata", {})
    annotations = metadata.get("annotations")
    metadata["annotations"] = dict(annotations) if isinstance(annotations, Mapping) else {}
    metadata["annotations"][DURATION_ANNOTATION] = f"{max(1, round(seconds * 1000))}ms"
    return manifest


def _copy(row: Any, state: str, manifest: dict[str, Any], now: float) -> JobRow:
    """A copy of ``row`` (read by :mod:`fleet.store.replays`, its documents as JSON text,
    decoded here in the worker thread) for the replay's store, in ``state``."""
    holding = state in HOLDING
    return JobRow(
        id=row.id,
        uid=row.uid,
        namespace=row.namespace,
        name=row.name,
        spec_hash=row.spec_hash,
        manifest=manifest,
        policy=_json(row.policy),
        record=_json(row.record),
        queue=row.queue,
        priority_class=row.priority_class,
        priority=row.priority,
        state=state,
        units=(_json(row.units) or []) if holding else [],
        cluster=row.cluster if holding else None,
        mode=row.mode if holding else None,
        reason="",
        suspended=False,
        created_at=row.created_at,
        updated_at=now,
    )


def _seeded(
    holding: Sequence[Any],  # copies read by fleet.store.replays
    waiting: Sequence[Any],
    since: Mapping[int, float],
    runs: Runs,
    now: float,
) -> tuple[list[JobRow], dict[str, str], bool]:
    """The rows a forecast's replay starts from, what each waiting job's estimate
    assumes, and whether every run time they rest on was declared."""
    seeded: list[JobRow] = []
    declared_all = True
    for row in holding:
        manifest = json.loads(row.manifest)
        declared = _declared(manifest)
        declared_all = declared_all and declared is not None
        ran = now - since.get(row.id, now)
        left = remaining(ran, declared, runs.get(row.queue, ()))
        seeded.append(_copy(row, row.state, _with_duration(manifest, left), now))
    assumes: dict[str, str] = {}
    for row in waiting:
        manifest = json.loads(row.manifest)
        expected, why, declared_one = _expected(manifest, row.queue, runs)
        declared_all = declared_all and declared_one
        assumes[f"{row.namespace}/{row.name}"] = why
        seeded.append(_copy(row, "Queued", _with_duration(manifest, expected), now))
    return seeded, assumes, declared_all


async def forecast(
    db: Database,
    tree_document: str,
    clusters_document: str,
    now: float,
    *,
    horizon: float = HORIZON,
    max_jobs: int = MAX_JOBS,
    wall_limit: float | None = WALL_LIMIT,
    worker: ForecastWorker | None = None,
) -> Forecast:
    """Run the simulator forward from the jobs in ``db`` (see the module docstring).

    With a ``worker`` the whole forecast runs in the worker's process
    (:mod:`fleet.sim.worker`), which reads ``db`` by its URL.
    """
    if worker is not None and reachable_from_another_process(db.url):
        return await worker.call(
            _forecast_by_url,
            db.url,
            tree_document,
            clusters_document,
            now,
            horizon,
            max_jobs,
            wall_limit,
        )
    async with db.read() as session:
        waiting = await replays.waiting_copies(session, WAITING, max_jobs)
        if not waiting:
            return Forecast(now, horizon, assumes="no job waits")
        # In parts, so that the event loop serves requests between them.
        holding = await replays.holding_copies(session, HOLDING, _PART)
        since: dict[int, float] = {}
        if holding:
            since = await replays.running_since(session, HOLDING)
        runs = await _runs(session)
    seeded, assumes, declared = await asyncio.to_thread(_seeded, holding, waiting, since, runs, now)
    ids = {f"{row.namespace}/{row.name}": row.id for row in waiting}

    async def seed(session: Session) -> None:
        session.add_all(seeded)

    # The replay runs in a worker thread on an event loop of its own: it never
    # waits for long, and the service's loop (and clock) must keep going.
    result = await asyncio.to_thread(
        engine.run,
        [],
        tree_document,
        clusters_document,
        "fleet",
        start=now,
        until=now + horizon,
        sample_every=horizon,
        seed=seed,
        until_started=True,
        wall_limit=wall_limit,
    )
    starts = {j.key: j.start for j in result.jobs}
    estimates = {
        key: Estimate(starts.get(key), why, declared=declared) for key, why in assumes.items()
    }
    preempted = {
        j.key: j.preemptions for j in result.jobs if j.preemptions and j.key not in assumes
    }
    summary = (
        f"simulated from {len(holding)} running and {len(waiting)} waiting jobs, no new "
        f"submissions; running jobs end after their {EXPECTED_ANNOTATION}, else (or once "
        "past it) after the median of their queue's recent runs that lasted longer, else "
        f"{wording.duration(DEFAULT_EXPECTED)}; bounded by {wording.duration(horizon)} of "
        "simulated time"
    )
    return Forecast(now, horizon, estimates, preempted, summary, ids)


def _forecast_by_url(
    url: str,
    tree_document: str,
    clusters_document: str,
    now: float,
    horizon: float,
    max_jobs: int,
    wall_limit: float | None,
) -> Forecast:
    """:func:`forecast` of the database at ``url``, on an event loop of its own (in a worker)."""

    async def run() -> Forecast:
        db = await open_database(url, migrate=False)
        try:
            return await forecast(
                db,
                tree_document,
                clusters_document,
                now,
                horizon=horizon,
                max_jobs=max_jobs,
                wall_limit=wall_limit,
            )
        finally:
            await db.close()

    return asyncio.run(run())


# The range around an estimate, and what a reader sees later -------------------------------


def _quantile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Calibration:
    """How far earlier estimates were from actual starts (module docstring).

    :meth:`record` remembers a forecast's estimates; :meth:`learn` reads,
    from the store, the first start of every remembered job since it was
    estimated and keeps the error; :meth:`ranged` gives a forecast's
    estimates their ranges.
    """

    def __init__(self) -> None:
        #: job id -> (declared, when estimated, estimated start), the latest few
        self._open: dict[int, deque[tuple[bool, float, float]]] = {}
        #: declared -> errors over the scale, the latest KEEP_SAMPLES
        self._errors: dict[bool, deque[float]] = {
            True: deque(maxlen=KEEP_SAMPLES),
            False: deque(maxlen=KEEP_SAMPLES),
        }

    def samples(self, declared: bool) -> int:
        return len(self._errors[declared])

    def bounds(self, declared: bool) -> tuple[float, float]:
        """The errors (over the scale) at the range's ends."""
        errors = self._errors[declared]
        if len(errors) < MIN_SAMPLES:
            return DEFAULT_RANGE[declared]
        ordered = sorted(errors)
        return min(_quantile(ordered, 0.1), NARROWEST[0]), max(
            _quantile(ordered, 0.9), NARROWEST[1]
        )

    def ranged(self, found: Forecast) -> Forecast:
        """``found`` with every estimate's range."""
        estimates: dict[str, Estimate] = {}
        for key, e in found.estimates.items():
            if e.start is None:
                estimates[key] = e
                continue
            low, high = self.bounds(e.declared)
            scale = max(e.start - found.at, ERROR_SCALE_FLOOR)
            earliest = max(found.at, min(e.start, e.start + low * scale))
            latest = max(e.start, e.start + high * scale)
            estimates[key] = dataclasses.replace(e, earliest=earliest, latest=latest)
        return dataclasses.replace(found, estimates=estimates)

    def record(self, found: Forecast) -> None:
        """Remember ``found``'s estimates, to compare with the starts that follow."""
        for key, e in found.estimates.items():
            job_id = found.ids.get(key)
            if e.start is not None and job_id is not None:
                kept = self._open.setdefault(job_id, deque(maxlen=KEEP_PER_JOB))
                kept.append((e.declared, found.at, e.start))

    def learn_starts(self, starts: Mapping[int, float], now: float, horizon: float) -> None:
        """Keep the errors of the remembered estimates of jobs that started (job id ->
        first start since), and forget estimates older than ``horizon``."""
        for job_id in sorted(self._open):
            kept = self._open[job_id]
            start = starts.get(job_id)
            for declared, at, estimate in kept:
                if start is not None and start >= at:
                    scale = max(estimate - at, ERROR_SCALE_FLOOR)
                    self._errors[declared].append((start - estimate) / scale)
            if start is not None or all(now - at > horizon for _, at, _ in kept):
                del self._open[job_id]

    async def learn(self, db: Database, now: float, horizon: float = HORIZON) -> None:
        """:meth:`learn_starts` with the starts read from ``db``."""
        if not self._open:
            return
        since = min(at for kept in self._open.values() for _, at, _ in kept)
        async with db.read() as session:
            events = await replays.run_events(session, sorted(self._open))
        starts: dict[int, float] = {}
        for job_id, at, reason in events:
            if reason == "Running" and at >= since and job_id not in starts:
                starts[job_id] = at
        self.learn_starts(starts, now, horizon)


def shown(estimate: Estimate, now: float) -> Estimate:
    """``estimate`` as shown at ``now`` (module docstring): a start that has passed is
    overdue, now, with a range as wide as before and growing with the delay."""
    if estimate.start is None:
        return estimate
    if estimate.start > now:
        earliest = estimate.earliest
        return dataclasses.replace(
            estimate, earliest=None if earliest is None else max(earliest, now)
        )
    latest = estimate.latest if estimate.latest is not None else estimate.start
    spread = max(latest - estimate.start, now - estimate.start, 60.0)
    return dataclasses.replace(estimate, start=now, earliest=now, latest=now + spread, overdue=True)


Documents = Callable[[], tuple[str, str]]


class Estimator:
    """Keeps a recent :class:`Forecast` of the live service (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        documents: Documents,
        *,
        interval: float,
        changed: Callable[[], object] | None = None,
        run: Callable[..., Awaitable[Forecast]] = forecast,
        worker: ForecastWorker | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.documents = documents
        self.interval = interval
        #: A value that changes when the live state does (None: always refresh).
        self.changed = changed
        self.latest: Forecast | None = None
        self._run = run
        #: where forecasts run (None: in a thread of this process)
        self.worker = worker
        self.calibration = Calibration()
        self._seen: object = object()
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> Forecast:
        tree, clusters = self.documents()
        kw = {} if self.worker is None else {"worker": self.worker}
        now = self.clock.now()
        found = await self._run(self.db, tree, clusters, now, **kw)
        await self.calibration.learn(self.db, now)
        self.latest = self.calibration.ranged(found)
        self.calibration.record(self.latest)
        return self.latest

    def _due(self) -> bool:
        """Whether an estimate of the latest forecast has fallen due."""
        if self.latest is None:
            return False
        now = self.clock.now()
        return any(e.start is not None and e.start <= now for e in self.latest.estimates.values())

    async def _loop(self) -> None:
        while True:
            marker = self.changed() if self.changed is not None else object()
            took = 0.0
            if marker != self._seen or self._due():
                started = self.clock.now()
                try:
                    await self.refresh()
                    self._seen = marker
                except asyncio.CancelledError:
                    raise
                except Exception:  # an estimate is a convenience; never stop the service
                    log.exception("could not estimate start times; trying again later")
                took = self.clock.now() - started
            # A forecast shares the machine (in a thread: the process and its GIL)
            # with the API and the loop: a long one makes the next one wait longer.
            await self.clock.sleep(max(self.interval, took / SHARE - took))

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="fleet-start-estimates")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def estimate_of(latest: Forecast | None, key: str, now: float) -> Estimate | None:
    """The latest estimate for waiting job ``key`` as shown at ``now`` (None: none yet)."""
    if latest is None:
        return None
    found = latest.estimates.get(key)
    return None if found is None else shown(found, now)


# What would this quota change do? --------------------------------------------------------


Change = Literal["sooner", "later", "same", "starts", "no longer starts"]


@dataclass(frozen=True, slots=True)
class JobChange:
    """One waiting job's estimated start under the tree in force and the proposed one."""

    job: str
    queue: str
    current: float | None
    proposed: float | None

    @property
    def change(self) -> Change:
        """sooner, later, same, starts (only with the proposal), no longer starts."""
        if self.current is None and self.proposed is None:
            return "same"
        if self.current is None:
            return "starts"
        if self.proposed is None:
            return "no longer starts"
        if self.proposed < self.current:
            return "sooner"
        return "later" if self.proposed > self.current else "same"


@dataclass(frozen=True, slots=True)
class QuotaChange:
    """What replacing the quota tree would do, by two forecasts from the same live state."""

    at: float
    horizon: float
    jobs: tuple[JobChange, ...]
    #: running job -> (preemptions under the tree in force, under the proposed one)
    preempted: Mapping[str, tuple[int, int]]
    #: leaf queue -> (mean expected wait now, with the proposal); None: no job starts
    waits: Mapping[str, tuple[float | None, float | None]]
    assumes: str


class UnknownQueues(ValueError):
    """Jobs whose queues are not leaves of the proposed tree."""


def _mean_wait(at: float, starts: Sequence[float | None]) -> float | None:
    known = [s - at for s in starts if s is not None]
    return round(statistics.fmean(known), 3) if known else None


async def compare(
    db: Database,
    current_tree: str,
    proposed_tree: str,
    proposed_leaves: Sequence[str],
    clusters_document: str,
    now: float,
    *,
    horizon: float = 24 * 3600.0,
    wall_limit: float | None = WALL_LIMIT / 2,
    worker: ForecastWorker | None = None,
) -> QuotaChange:
    """Forecast under the tree in force and under ``proposed_tree``, and compare.

    Raises :class:`UnknownQueues` when a job that runs or waits belongs to a
    queue that is not a leaf of the proposed tree.
    """
    async with db.read() as session:
        queues = await replays.queues_of(session, (*HOLDING, *WAITING))
        homeless = [f"{ns}/{n} ({q})" for ns, n, q in queues if q not in set(proposed_leaves)]
    if homeless:
        shown = ", ".join(homeless[:10]) + (
            f" and {len(homeless) - 10} more" if len(homeless) > 10 else ""
        )
        raise UnknownQueues(
            f"the proposed tree has no leaf for the queue of job(s) {shown}; "
            f"its leaves: {', '.join(proposed_leaves)}"
        )
    kw: dict[str, Any] = {"horizon": horizon, "wall_limit": wall_limit, "worker": worker}
    before = await forecast(db, current_tree, clusters_document, now, **kw)
    after = await forecast(db, proposed_tree, clusters_document, now, **kw)
    queue_of: dict[str, str] = {}
    async with db.read() as session:
        for ns, n, q in await replays.queues_of(session, WAITING):
            queue_of[f"{ns}/{n}"] = q
    jobs = tuple(
        JobChange(
            key,
            queue_of.get(key, ""),
            estimate.start,
            after.estimates[key].start if key in after.estimates else None,
        )
        for key, estimate in before.estimates.items()
    )
    preempted = {
        key: (before.preempted.get(key, 0), after.preempted.get(key, 0))
        for key in sorted({*before.preempted, *after.preempted})
    }
    waits: dict[str, tuple[float | None, float | None]] = {}
    for queue in sorted({j.queue for j in jobs}):
        mine = [j for j in jobs if j.queue == queue]
        waits[queue] = (
            _mean_wait(now, [j.current for j in mine]),
            _mean_wait(now, [j.proposed for j in mine]),
        )
    return QuotaChange(now, horizon, jobs, preempted, waits, after.assumes)
