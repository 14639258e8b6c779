"""Fleet's view out to the hub: each job's status and Events, and the Queue objects.

Theory of operation: :class:`StatusWriter` follows the loop's published views
(:meth:`fleet.service.loop.SchedulerLoop.next_view`).  Each view names the
jobs that changed since the one before (``LoopView.recent``); the writer
reads those of them that are hub jobs from the store in one statement per
namespace (:func:`fleet.store.jobs.current_by_names`), builds each status
(:func:`fleet.hub.objects.job_status`) and writes the ones that differ from
what it wrote last.  A view that came too late to say what changed, and
every :attr:`StatusWriter.refresh` seconds anyway, makes a full pass over
every hub job.  Statuses are written only for the run the hub object made
(the stored document's hub uid is the object's).

Events come from Fleet's own event log, read from where the writer left it
(:func:`fleet.store.jobs.events_after`; at start, from the newest entry: a
restarted Fleet does not repeat the Events it wrote before): ``Admitted``
becomes ``ScheduleBindingSucceed`` with the member and the pods per role,
``Preempted`` a Warning ``Preempted``, a job queued again (a dispatch the
member refused, a failover, a stop) a Warning ``Requeued``, the end
``Succeeded`` or a Warning ``Failed``; and a waiting reason, when it
changes, a ``Pending`` Event.  A pass's status writes and Events go out
together (the :class:`~fleet.hub.events.Recorder` bounds them), and the next
pass starts when they are answered: under a burst, one pass covers every job
that changed meanwhile, so a job that went Queued, Admitted and Dispatched
between two passes gets one status write.

:class:`QueueWriter` keeps one ``Queue`` object per quota-tree node in
``kube-queue`` (:func:`fleet.hub.objects.queue_object`): it creates the
missing ones, deletes those of nodes that are gone (found by their label)
and writes each one's status (min, max, used, borrowed, admitted, pending)
when it changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Collection, Mapping
from typing import Any, Final

from fleet.clusters.base import ClusterError
from fleet.clusters.kube.client import AlreadyExists, KubeClient, NotFound
from fleet.core.view import LoopView, QueueView
from fleet.hub import objects
from fleet.hub.events import Recorder
from fleet.hub.jobs import HubJob, JobDoor
from fleet.hub.objects import JSON, JobFacts
from fleet.service import wiring
from fleet.store import jobs as job_rows
from fleet.store.models import JobRow

log = logging.getLogger("fleet.hub")

#: Seconds between full passes over every hub job.
REFRESH_SECONDS: Final = 30.0
#: States in which the member's object's status is shown under Fleet's.
_MEMBER_STATES: Final = frozenset({"Dispatched", "Running", "Succeeded", "Failed"})
#: Event log entries read at once.
EVENTS_PAGE: Final = 500


def changed_since(view: LoopView, after: int) -> set[str] | None:
    """Jobs that changed in the views after version ``after`` (None: not known)."""
    if not view.recent or view.recent[0][0] > after + 1:
        return None
    return {key for version, keys in view.recent if version > after for key in keys}


class StatusWriter:
    """Writes hub jobs' statuses and Events; see the module docstring."""

    def __init__(
        self,
        svc: wiring.Service,
        door: JobDoor,
        recorder: Recorder,
        queues: QueueWriter,
        *,
        refresh: float = REFRESH_SECONDS,
        wait: float = 1.0,
    ) -> None:
        self.svc = svc
        self.door = door
        self.recorder = recorder
        self.queues = queues
        self.refresh = refresh
        self.wait = wait
        #: key -> the status last written
        self.written: dict[str, JSON] = {}
        #: key -> the Fleet run (uid) the written status is of
        self.runs: dict[str, str] = {}
        #: key -> state -> when the writer first saw the job in it
        self.since: dict[str, dict[str, float]] = {}
        #: key -> the waiting reason last told in an Event
        self.reasons: dict[str, str] = {}
        self.event_id = 0
        self.version = 0
        self._last_full = -1e18
        self._pending: set[str] = set()
        #: uids of the HTTP-door runs Fleet made (or found) hub objects for
        self.mirrored: set[str] = set()

    def kick(self, keys: Collection[str]) -> None:
        """Write the status of ``keys`` in the next pass (newly submitted)."""
        self._pending.update(keys)

    async def run(self) -> None:
        async with self.svc.db.read() as session:
            self.event_id = await job_rows.last_event_id(session)
        while True:
            try:
                await self.once()
            except ClusterError as e:
                log.warning("hub: writing statuses: %s", e)
            except Exception:
                log.exception("hub: writing statuses failed")
                await asyncio.sleep(1.0)

    async def once(self) -> None:
        """Wait for the next view (at most :attr:`wait` s), then write what changed."""
        view = await self.svc.loop.next_view(self.version, self.wait)
        now = self.svc.clock.now()
        changed = changed_since(view, self.version) if view.version > self.version else set()
        full = changed is None or now - self._last_full >= self.refresh
        if full:
            self._last_full = now
            keys: set[str] = set(self.door.jobs)
        else:
            assert changed is not None
            keys = {k for k in changed if k in self.door.jobs}
        # Jobs Fleet made hub objects for wait until the watch has brought them back.
        ready = {k for k in self._pending if self._shown(k)}
        keys |= ready
        self._pending -= ready
        # The HTTP door's jobs: those that changed, or every live one when that is not known.
        await self._mirror(None if changed is None else set(changed) - set(self.door.jobs))
        self.version = view.version
        writes: list[Awaitable[bool]] = []
        try:
            rows = await self._statuses(keys, view, writes)
            await self._events(view, rows, writes)
        finally:
            # The pass's statuses and Events go out together (the Recorder bounds them),
            # those already made even when reading the event log failed.
            if writes:
                await asyncio.gather(*writes)
        await self.queues.write(view)

    def _shown(self, key: str) -> bool:
        job = self.door.jobs.get(key)
        return job is not None and bool(job.submitted or job.mirror)

    # Jobs of the HTTP door ----------------------------------------------------------------

    async def _mirror(self, keys: Collection[str] | None) -> None:
        """Make a hub object for each live job of the HTTP door among ``keys`` (None:
        every live job) that has none: the job is then visible through both doors."""
        if keys is not None and not keys:
            return
        async with self.svc.db.read() as session:
            if keys is None:
                rows = await job_rows.in_states(session, job_rows.LIVE_STATES)
            else:
                found = await job_rows.current_by_names(
                    session, [(k.partition("/")[0], k.partition("/")[2]) for k in keys]
                )
                rows = [r for r in found.values() if r.state in job_rows.LIVE_STATES]
        made = []
        creates: list[Awaitable[bool]] = []
        for row in rows:
            key = f"{row.namespace}/{row.name}"
            if key in self.door.jobs or row.uid in self.mirrored or objects.hub_uid(row.manifest):
                continue
            resource = objects.RESOURCE_OF.get(
                (str(row.manifest.get("apiVersion")), str(row.manifest.get("kind")))
            )
            if resource is None:
                continue
            self.mirrored.add(row.uid)
            made.append(key)
            creates.append(
                self.recorder.create(resource, objects.mirror_object(row.manifest, row.uid))
            )
        if creates:
            await asyncio.gather(*creates)  # the Recorder bounds them
        self._pending.update(made)

    # Statuses -----------------------------------------------------------------------------

    def _hub_jobs(self, keys: Collection[str]) -> dict[str, HubJob]:
        out: dict[str, HubJob] = {}
        for key in keys:
            job = self.door.jobs.get(key)
            if job is None or job.refused or (job.submitted is None and not job.mirror):
                continue
            if objects.deleting(job.obj):
                continue
            out[key] = job
        return out

    async def _rows(self, keys: Collection[str]) -> dict[str, JobRow]:
        if not keys:
            return {}
        pairs = [tuple(k.split("/", 1)) for k in keys]
        async with self.svc.db.read() as session:
            return await job_rows.current_by_names(session, [(a, b) for a, b in pairs])

    async def _statuses(
        self, keys: Collection[str], view: LoopView, writes: list[Awaitable[bool]]
    ) -> dict[str, JobRow]:
        """The rows of ``keys``; adds the writes of their changed statuses to ``writes``."""
        jobs = self._hub_jobs(keys)
        rows = await self._rows(jobs)
        for key, job in jobs.items():
            row = rows.get(key)
            if row is None or not objects.stands_for(job.obj, row.uid, row.manifest):
                continue
            if self.runs.get(key) != row.uid:
                self.runs[key] = row.uid
                self.since[key] = {}
                self.written.pop(key, None)
            since = self.since.setdefault(key, {})
            since.setdefault(row.state, row.updated_at)
            reason = view.reasons.get(key, row.reason) if row.state == "Queued" else row.reason
            member = None
            if row.cluster and row.state in _MEMBER_STATES:
                backend = self.svc.loop.members.get(row.cluster)
                member = backend.status_of(key) if backend is not None else None
            facts = JobFacts(row.state, row.queue, row.cluster, reason or "", since, member)
            status = objects.job_status(facts)
            if self.written.get(key) == status:
                continue
            self.written[key] = status
            writes.append(self.recorder.status(job.resource, job.obj, status))
            if row.state == "Queued" and reason and self.reasons.get(key) != reason:
                self.reasons[key] = reason
                told = self.recorder.event(job.resource, job.obj, "Normal", "Pending", reason)
                writes.append(told)
        for key in [k for k in self.written if k not in self.door.jobs]:
            self._forget(key)
        return rows

    def _forget(self, key: str) -> None:
        self.written.pop(key, None)
        self.runs.pop(key, None)
        self.since.pop(key, None)
        self.reasons.pop(key, None)

    # Events -------------------------------------------------------------------------------

    async def _events(
        self, view: LoopView, rows: Mapping[str, JobRow], writes: list[Awaitable[bool]]
    ) -> None:
        """Adds the Events of the event log's new entries to ``writes``."""
        while True:
            async with self.svc.db.read() as session:
                page = await job_rows.events_after(session, self.event_id, EVENTS_PAGE)
            if not page:
                return
            self.event_id = page[-1].id
            mine = [e for e in page if f"{e.namespace}/{e.name}" in self.door.jobs]
            missing = {f"{e.namespace}/{e.name}" for e in mine} - set(rows)
            if missing:
                rows = {**rows, **await self._rows(missing)}
            for entry in mine:
                key = f"{entry.namespace}/{entry.name}"
                job = self.door.jobs[key]
                row = rows.get(key)
                if row is None or row.uid != entry.job_uid:
                    continue
                if not objects.stands_for(job.obj, row.uid, row.manifest):
                    continue
                told = _event_of(entry, row)
                if told is not None:
                    writes.append(self.recorder.event(job.resource, job.obj, *told))
            if len(page) < EVENTS_PAGE:
                return


def _event_of(entry: job_rows.LoggedEvent, row: JobRow) -> tuple[str, str, str] | None:
    """(type, reason, message) of the hub Event for a logged event, or None."""
    if entry.reason == "Admitted":
        cluster = row.cluster or entry.message.partition("admitted to ")[2].partition(" ")[0]
        pods = [str(p[0]) for unit in row.units or [] for p in unit.get("pods") or []]
        return "Normal", "ScheduleBindingSucceed", objects.binding_message(cluster, pods)
    if entry.reason == "Preempted":
        return "Warning", "Preempted", entry.message
    if entry.reason == "Queued" and not entry.message.startswith("queued in "):
        return "Warning", "Requeued", entry.message
    if entry.reason == "Succeeded":
        return "Normal", "Succeeded", entry.message or "the job succeeded in its member"
    if entry.reason == "Failed":
        return "Warning", "Failed", entry.message
    if entry.reason in ("Grew", "Shrunk"):
        return ("Normal" if entry.type == "Normal" else "Warning"), entry.reason, entry.message
    return None


class QueueWriter:
    """One Queue object per quota-tree node; see the module docstring."""

    def __init__(self, client: KubeClient, recorder: Recorder) -> None:
        self.client = client
        self.recorder = recorder
        #: node -> Queue object name, of the objects that exist
        self.names: dict[str, str] = {}
        #: node -> the status last written
        self.written: dict[str, JSON] = {}
        self._last: tuple[QueueView, ...] | None = None
        self._listed = False

    async def _list(self) -> None:
        data = await self.client.request(
            "GET",
            objects.QUEUE_RESOURCE.collection_path(objects.QUEUE_NAMESPACE),
            query=[("labelSelector", objects.QUEUE_NODE_LABEL)],
        )
        for item in data.get("items") or []:
            meta = objects.meta(item)
            node = str((meta.get("labels") or {}).get(objects.QUEUE_NODE_LABEL) or "")
            self.names[node] = str(meta.get("name"))
        self._listed = True

    async def write(self, view: LoopView) -> None:
        if view.queues == self._last:
            return
        if not self._listed:
            await self._list()
        by_name = {q.name: q for q in view.queues}
        wanted: dict[str, tuple[str, list[str], QueueView]] = {}
        for q in view.queues:
            path = _path(q.name, by_name)
            wanted[q.name] = (objects.queue_name(path), path, q)
        base = objects.QUEUE_RESOURCE.collection_path(objects.QUEUE_NAMESPACE)
        for node in [n for n in self.names if n not in wanted]:
            with contextlib.suppress(NotFound):
                await self.client.request("DELETE", f"{base}/{self.names[node]}")
            del self.names[node]
            self.written.pop(node, None)
        for node, (name, path, q) in wanted.items():
            if self.names.get(node) not in (None, name):
                with contextlib.suppress(NotFound):
                    await self.client.request("DELETE", f"{base}/{self.names[node]}")
                del self.names[node]
            if node not in self.names:
                body = objects.queue_object(name, node, path)
                with contextlib.suppress(AlreadyExists):
                    await self.client.request("POST", base, body=body)
                self.names[node] = name
                self.written.pop(node, None)
            status = objects.queue_status(q.min, q.max, q.used, q.borrowed, q.admitted, q.pending)
            if self.written.get(node) == status:
                continue
            obj: dict[str, Any] = {"metadata": {"name": name, "namespace": objects.QUEUE_NAMESPACE}}
            if await self.recorder.status(objects.QUEUE_RESOURCE, obj, status):
                self.written[node] = status
        self._last = view.queues


def _path(node: str, by_name: Mapping[str, QueueView]) -> list[str]:
    path = [node]
    seen = {node}
    parent = by_name[node].parent
    while parent is not None and parent in by_name and parent not in seen:
        path.append(parent)
        seen.add(parent)
        parent = by_name[parent].parent
    return list(reversed(path))
