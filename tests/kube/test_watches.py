"""The list-then-watch loop against a real API server: resume, 410 Gone, a dropped connection."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from fleet.clock import RealClock
from fleet.clusters.base import ClusterError
from fleet.clusters.kube.client import connect
from fleet.clusters.kube.kubeconfig import KubeconfigPolicy
from fleet.clusters.kube.watches import Watcher
from tests.kube.controlplane import ADMIN_TOKEN, ApiError, ControlPlane

pytestmark = pytest.mark.slow


class Seen:
    def __init__(self) -> None:
        self.synced: list[list[str]] = []
        self.events: list[tuple[str, str]] = []
        self.failures: list[str] = []
        self.recoveries = 0

    async def sync(self, items: list[dict[str, Any]]) -> None:
        self.synced.append(sorted(i["metadata"]["name"] for i in items))

    async def event(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((kind, obj["metadata"]["name"]))

    async def failed(self, what: str, error: ClusterError) -> None:
        self.failures.append(error.message)

    async def recovered(self, what: str) -> None:
        self.recoveries += 1


async def until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


def configmap(plane: ControlPlane, name: str) -> None:
    plane.admin.request(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}},
    )


async def test_a_too_old_resource_version_lists_again_and_a_dropped_connection_is_retried(
    members: dict[str, ControlPlane],
) -> None:
    plane = members["beta"]
    client = await connect(
        "beta", plane.kubeconfig(ADMIN_TOKEN), "beta", KubeconfigPolicy(plane.dir)
    )
    seen = Seen()
    watcher = Watcher(
        client,
        RealClock(),
        "configmaps",
        "/api/v1/namespaces/default/configmaps",
        [],
        sync=seen.sync,
        event=seen.event,
        failed=seen.failed,
        recovered=seen.recovered,
        backoff=(0.1, 0.5),
    )
    configmap(plane, "before")
    old = plane.admin.get("/api/v1/namespaces/default/configmaps")["metadata"]["resourceVersion"]
    configmap(plane, "later")
    configmap(plane, "more")
    plane.compact_etcd()  # the history after `old` is gone
    # Resume from a resourceVersion the server no longer has: 410 Gone, list again.
    watcher.resource_version = old
    watcher.start()
    try:
        await until(lambda: seen.synced, "a list after 410 Gone")
        assert watcher.relists == 1
        assert {"before", "later", "more"} <= set(seen.synced[0])
        configmap(plane, "during")
        await until(lambda: ("ADDED", "during") in seen.events, "the watch goes on")

        plane.stop_apiserver()
        await until(lambda: seen.failures, "the dropped connection reported")
        assert watcher.failing
        plane.start_apiserver()
        configmap(plane, "after")
        await until(lambda: seen.recoveries == 1, "the watch back")
        await until(
            lambda: (
                any("after" in names for names in seen.synced) or ("ADDED", "after") in seen.events
            ),
            "what happened while it was away",
        )
        assert not watcher.failing
    finally:
        await watcher.stop()
        await client.close()
        for name in ("before", "later", "more", "during", "after"):
            with contextlib.suppress(ApiError):  # not created: the test failed before
                plane.admin.request("DELETE", f"/api/v1/namespaces/default/configmaps/{name}")
