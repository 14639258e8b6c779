"""A list-then-watch loop on one resource of one member, that keeps going.

Theory of operation (Kubernetes' informer pattern, by hand): a
:class:`Watcher` lists the resource, hands every object to its ``sync``
callback (the full current set: what is missing from it was deleted), then
watches from the list's resourceVersion with bookmarks on, handing each
ADDED/MODIFIED/DELETED object to ``event`` and remembering the newest
resourceVersion (bookmarks move it on without an object).  When the server
ends a watch (its timeout), the watcher resumes from that resourceVersion;
when it answers 410 Gone (too old), the watcher lists again.  Any other
error (a dropped connection, an API server that is down, a refusal) is
reported to ``failed`` and retried after a backoff that doubles up to a
limit, listing again; the first success after it is reported to
``recovered``.  Only
:meth:`Watcher.stop` ends it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from fleet.clock import Clock
from fleet.clusters.base import ClusterError
from fleet.clusters.kube.client import Gone, KubeClient

log = logging.getLogger("fleet.clusters.kube")

#: Seconds the server keeps one watch open before the watcher resumes it.
WATCH_SECONDS: Final = 60

JSON = dict[str, Any]
Sync = Callable[[list[JSON]], Awaitable[None]]
OnEvent = Callable[[str, JSON], Awaitable[None]]
OnFailure = Callable[[str, ClusterError], Awaitable[None]]
OnRecovery = Callable[[str], Awaitable[None]]


class Watcher:
    """Lists and watches ``path`` of one member; see the module docstring."""

    def __init__(
        self,
        client: KubeClient,
        clock: Clock,
        what: str,
        path: str,
        query: Sequence[tuple[str, str]],
        *,
        sync: Sync,
        event: OnEvent,
        failed: OnFailure,
        recovered: OnRecovery,
        backoff: tuple[float, float] = (0.2, 5.0),
    ) -> None:
        self.what = what
        self._client = client
        self._clock = clock
        self._path = path
        self._query = tuple(query)
        self._sync = sync
        self._event = event
        self._failed = failed
        self._recovered = recovered
        self._backoff = backoff
        self.resource_version: str | None = None
        self.relists = 0
        self.failing = False
        #: Set once the first list has been handed to ``sync``.
        self.synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(
            self._run(), name=f"watch {self._client.cluster} {self.what}"
        )

    async def stop(self) -> None:
        if self._task is None:
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None

    async def _run(self) -> None:
        delay = self._backoff[0]
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                await self._watch()
                delay = self._backoff[0]
            except Gone:
                log.info(
                    "%s: %s: resourceVersion too old, listing again",
                    self._client.cluster,
                    self.what,
                )
                self.resource_version = None
            except ClusterError as e:
                if not self.failing:
                    log.warning("%s: watch of %s failed: %s", self._client.cluster, self.what, e)
                self.failing = True
                self.resource_version = None  # list again: the first answer shows it works
                await self._failed(self.what, e)
                await self._clock.sleep(delay)
                delay = min(delay * 2, self._backoff[1])

    async def _ok(self) -> None:
        if self.failing:
            self.failing = False
            log.info("%s: watch of %s works again", self._client.cluster, self.what)
            await self._recovered(self.what)

    async def _list(self) -> None:
        data = await self._client.request("GET", self._path, query=self._query)
        items = [i for i in data.get("items") or [] if isinstance(i, dict)]
        self.resource_version = str((data.get("metadata") or {}).get("resourceVersion") or "")
        self.relists += 1
        await self._ok()
        await self._sync(items)
        self.synced.set()

    async def _watch(self) -> None:
        query = [
            *self._query,
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version or ""),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        async for line in self._client.stream(self._path, query, timeout=WATCH_SECONDS + 30):
            await self._ok()
            kind = line.get("type")
            obj = line.get("object")
            if not isinstance(obj, dict):
                continue
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Gone(self._client.cluster, f"{self.what}: {obj.get('message')}", 410)
                raise ClusterError(self._client.cluster, f"{self.what}: {obj.get('message')}")
            version = (obj.get("metadata") or {}).get("resourceVersion")
            if version:
                self.resource_version = str(version)
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                await self._event(str(kind), obj)
