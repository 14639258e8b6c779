"""The hub's jobs in: finalizer, submission, cancel; one key at a time.

Theory of operation (a controller's work queue, by hand): the watchers of
every workload kind hand each object to :meth:`JobDoor.seen`, which keeps
the newest object per ``namespace/name`` and queues its key; a fixed number
of workers (:data:`WORKERS`) take keys, each key by one worker at a time (a
key queued again while it is handled is handled again after), so the hub's
objects are reconciled in parallel but never twice at once.  Handling a key:

1. **Deleted** (``deletionTimestamp`` set, Fleet's finalizer on it): the
   job's current run, when it is this object's (the stored document's
   :data:`~fleet.hub.objects.HUB_UID` is the object's uid) and has not
   ended, is cancelled the way ``DELETE /api/v1/jobs`` cancels it (a stored
   intent: the loop deletes it in its member), then the finalizer is removed
   and the API server lets the object go.  An object gone without the
   finalizer (deleted before Fleet saw it) is cancelled the same way.
2. **New or changed**: an object that no stored policy selects is left
   alone, as Karmada leaves it (no finalizer, no status; in a namespace a
   quota-tree leaf takes, a ``NoPolicy`` Event says so once, when no policy
   came within :data:`NO_POLICY_GRACE` seconds); otherwise the
   finalizer is put on first, then the object is
   submitted (:func:`fleet.hub.objects.job_document`) through the same
   parsing and checks as ``POST /api/v1/submissions`` and stored by the same
   intake; the policy that governs it is a stored one (a hub's
   PropagationPolicies are stored as they are seen, :mod:`fleet.hub.config`).
   A submission is idempotent: the object's uid is in its document, so a
   relist after a restart finds the same job, and a job that ended is not
   run again.  Each (uid, generation) is submitted once per process.
3. **Refused**: a document Fleet refuses (a field path and why), a job that
   no policy selects yet, or a name another job holds gets the condition
   ``Invalid`` and a Warning Event with the reasons; nothing runs.  Refused
   and unselected keys are tried again when the policies or the quota tree change (a policy
   applied after its job is the common case of ``kubectl apply -f dir/``).

Nothing is lost while Fleet is down: what was created meanwhile is in the
first list, what was deleted meanwhile still holds the finalizer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from fleet.api.problems import ProblemError
from fleet.api.submissions import Submitted, new_jobs
from fleet.clusters.base import ClusterError
from fleet.clusters.kube.client import AlreadyExists, Invalid, KubeClient, NotFound
from fleet.core.lifecycle import JobState
from fleet.hub import objects
from fleet.hub.events import Recorder
from fleet.hub.objects import JSON, Resource
from fleet.service import intake, wiring
from fleet.store import jobs as job_rows

log = logging.getLogger("fleet.hub")

#: Keys handled at once: each waits on the hub (the finalizer) and on the intake's commit,
#: so under a burst this bounds the door's rate (bench/bench_hub.py); with the watches and
#: the Recorder's writes it stays under the client's 100 connections.
WORKERS: Final = 48
#: Seconds a job no policy selects waits before an Event says so.
NO_POLICY_GRACE: Final = 2.0
#: The states of a job that has ended.
_ENDED: Final = frozenset(
    {JobState.SUCCEEDED.value, JobState.FAILED.value, JobState.CANCELLED.value}
)

Parse = Callable[[bytes], Awaitable[list[Submitted]]]


@dataclass(slots=True)
class HubJob:
    """The newest object seen under one key, and what Fleet did with it."""

    resource: Resource
    obj: JSON
    #: (uid, generation) submitted (None: not yet)
    submitted: tuple[str, int] | None = None
    #: why Fleet refused it ("" when it did not)
    refused: str = ""
    #: no policy selected it when it was last handled, and whether an Event said so
    unselected: bool = False
    told_unselected: bool = False
    #: the uid of the HTTP-door job it shows, when Fleet made it for one ("": a user's)
    mirror: str = ""


class JobDoor:
    """Hub jobs in, Fleet jobs out; see the module docstring."""

    def __init__(
        self,
        svc: wiring.Service,
        client: KubeClient,
        recorder: Recorder,
        parse: Parse,
        *,
        workers: int = WORKERS,
    ) -> None:
        #: whether a stored policy selects a hub object
        self.selected: Callable[[JSON], bool] = lambda obj: True
        #: whether a leaf of the quota tree takes a namespace
        self.owned: Callable[[str], bool] = lambda namespace: True
        self.svc = svc
        self.client = client
        self.recorder = recorder
        self.parse = parse
        self.jobs: dict[str, HubJob] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._busy: set[str] = set()
        self._again: set[str] = set()
        #: key -> objects that left the hub without Fleet's finalizer
        self._left: dict[str, JSON] = {}
        self._workers = [
            asyncio.create_task(self._work(), name=f"fleet-hub-jobs-{i}") for i in range(workers)
        ]
        #: jobs submitted (a new run or the same), for the benchmark's log
        self.submitted = 0

    async def stop(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    def idle(self) -> bool:
        return not self._queued and not self._busy

    # Watch callbacks ----------------------------------------------------------------------

    def watching(
        self, resource: Resource
    ) -> tuple[Callable[[list[JSON]], Awaitable[None]], Callable[[str, JSON], Awaitable[None]]]:
        """The ``sync`` and ``event`` callbacks of ``resource``'s watcher."""

        async def sync(items: list[JSON]) -> None:
            present = {objects.key_of(o) for o in items}
            for key, job in list(self.jobs.items()):
                if job.resource == resource and key not in present:
                    self._gone(key, job)
            for obj in items:
                self.seen(resource, obj)

        async def event(kind: str, obj: JSON) -> None:
            if kind == "DELETED":
                job = self.jobs.get(objects.key_of(obj))
                if job is not None and job.resource == resource:
                    self._gone(objects.key_of(obj), job)
                return
            self.seen(resource, obj)

        return sync, event

    def seen(self, resource: Resource, obj: JSON) -> None:
        key = objects.key_of(obj)
        job = self.jobs.get(key)
        if job is None or job.resource != resource:
            self.jobs[key] = HubJob(resource, obj)
        else:
            job.obj = obj
        self._enqueue(key)

    def _gone(self, key: str, job: HubJob) -> None:
        """The object left the hub (without waiting for Fleet): cancel what it ran."""
        del self.jobs[key]
        self._left[key] = job.obj
        self._enqueue(key)

    def retry_refused(self) -> None:
        """Try the refused and unselected jobs again (policies or the quota tree changed)."""
        for key, job in self.jobs.items():
            if job.refused or job.unselected:
                job.submitted = None
                self._enqueue(key)

    # Workers ------------------------------------------------------------------------------

    def _enqueue(self, key: str) -> None:
        if key in self._busy:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._busy.add(key)
            try:
                await self._handle(key)
            except ClusterError as e:
                log.warning("hub: %s: %s (tried again on its next change)", key, e)
            except Exception:
                log.exception("hub: %s could not be handled", key)
            finally:
                self._busy.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self._enqueue(key)

    async def _handle(self, key: str) -> None:
        job = self.jobs.get(key)
        left = self._left.get(key)
        if left is not None and (
            job is None or objects.meta(job.obj).get("uid") != objects.meta(left).get("uid")
        ):
            await self._cancel(key, self._left.pop(key))
        if job is None:
            return
        obj = job.obj
        meta = objects.meta(obj)
        uid = str(meta.get("uid") or "")
        if objects.deleting(obj):
            if objects.FINALIZER in objects.finalizers(obj):
                await self._cancel(key, obj)
                await self._finalizer(job, present=False)
            return
        if objects.mirror_of(obj):
            # Fleet made it for a job of the HTTP door: shown, never submitted.
            job.mirror = await self._shows(key, obj)
            if job.mirror:
                return
        if not self.selected(obj):
            # Karmada's rule: an object no policy selects is not Fleet's (yet).  Its
            # policy may be on its way (one `kubectl apply` of both): told after a grace.
            if not job.unselected:
                job.unselected = True
                asyncio.get_running_loop().call_later(NO_POLICY_GRACE, self._enqueue, key)
            elif not job.told_unselected and self.owned(str(meta.get("namespace") or "")):
                job.told_unselected = True
                why = (
                    f"no PropagationPolicy of namespace {meta.get('namespace')} selects this "
                    f"{obj.get('kind')}; Fleet runs it once one does"
                )
                await self.recorder.event(job.resource, obj, "Normal", "NoPolicy", why)
            return
        job.unselected = False
        if objects.FINALIZER not in objects.finalizers(obj) and not await self._finalizer(
            job, present=True
        ):
            return
        generation = (uid, int(meta.get("generation") or 0))
        if job.submitted == generation:
            return
        job.submitted = generation
        refused = await self._submit(job)
        if refused and refused != job.refused:
            await self.recorder.refused(job.resource, job.obj, refused)
        job.refused = refused

    async def _finalizer(self, job: HubJob, *, present: bool) -> bool:
        """Put on or take off Fleet's finalizer; False when the object changed meanwhile
        (its next event brings it back) or is gone."""
        meta = objects.meta(job.obj)
        path = job.resource.object_path(str(meta.get("namespace")), str(meta.get("name")))
        try:
            updated = await self.client.request(
                "PATCH",
                path,
                body=objects.finalizer_patch(job.obj, present),
                content_type="application/json-patch+json",
            )
        except (NotFound, Invalid, AlreadyExists):
            return False
        job.obj = updated
        return True

    async def _submit(self, job: HubJob) -> str:
        """Submit ``job``'s object; why Fleet refused it ("" when it took it)."""
        import json

        document = objects.job_document(job.obj)
        try:
            submitted = await self.parse(json.dumps(document).encode())
        except ProblemError as e:
            return _problem_text(e)
        try:
            await self.svc.intake.accept(new_jobs(submitted), None)
        except intake.NameTaken as e:
            return str(e)
        self.submitted += 1
        return ""

    async def _cancel(self, key: str, obj: JSON) -> None:
        """Cancel the current run of ``key`` when the hub object ``obj`` stands for it."""
        namespace, _, name = key.partition("/")
        async with self.svc.db.read() as session:
            row = await job_rows.by_name(session, namespace, name)
        if row is None or row.state in _ENDED or not objects.stands_for(obj, row.uid, row.manifest):
            return
        await wiring.cancel(self.svc, row.id, key)
        log.info("hub: %s deleted on the hub: its job is cancelled", key)

    async def _shows(self, key: str, obj: JSON) -> str:
        """The uid of the HTTP-door run ``obj`` shows ("": none, a user's own object)."""
        namespace, _, name = key.partition("/")
        async with self.svc.db.read() as session:
            row = await job_rows.by_name(session, namespace, name)
        if row is None or not objects.stands_for(obj, row.uid, row.manifest):
            return ""
        return row.uid


def _problem_text(error: ProblemError) -> str:
    """A refusal's reasons, one per field error: ``path: message``."""
    problem = error.problem
    lines: list[str] = []
    for item in problem.errors:
        lines.append(f"{item.path}: {item.message}" if item.path else item.message)
    if not lines:
        lines.append(problem.detail or problem.title)
    return "; ".join(lines)
