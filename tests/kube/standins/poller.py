"""The polling thread of every stand-in controller, and the requests they all make, for tests.

Theory of operation: a stand-in controller (:mod:`tests.kube.operator` and the
modules of this package) plays a controller that cannot run here by polling
the API server as its admin.  :class:`Poller` is that loop: from
:meth:`~Poller.start` to :meth:`~Poller.stop` a daemon thread runs the
subclass's :meth:`~Poller.step` every ``interval`` seconds, skips passes
while paused (:meth:`~Poller.pause`), and keeps what a pass raised of the API
server's errors and of a half-written object's (:class:`ApiError`,
``OSError``, ``ValueError``, ``KeyError``) in :attr:`~Poller.errors` instead
of dying: the API server may be stopped on purpose, and tests read the
errors when something does not happen.

Its other methods are the requests every stand-in makes as a controller
does: create an object, or read it when it was made already (409); delete
one at once (grace 0, as a kubelet finishes a pod's deletion), nothing when
it is gone; merge-patch an object or a pod's status.  :func:`pod_from` and
:func:`owner_ref` build the bodies a controller writes for the pods it makes,
:func:`training_condition` the conditions Kubeflow's operators set on a job.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from abc import ABC, abstractmethod
from typing import Any, Self

from tests.kube.controlplane import Admin, ApiError

MERGE = "application/merge-patch+json"


def now() -> str:
    """The time as Kubernetes writes it in conditions (seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def training_condition(kind: str, reason: str, message: str) -> dict[str, str]:
    """A Kubeflow training job's condition ``kind``, True from now, as its operator writes it."""
    at = now()
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
        "lastUpdateTime": at,
    }


def owner_ref(
    obj: dict[str, Any], api_version: str, kind: str, *, block: bool = False
) -> dict[str, Any]:
    """The controller's owner reference to ``obj`` (with ``blockOwnerDeletion`` if ``block``)."""
    meta = obj["metadata"]
    ref: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }
    if block:
        ref["blockOwnerDeletion"] = True
    return ref


def pod_from(
    template: dict[str, Any],
    name: str,
    namespace: str,
    *,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
    owned_by: dict[str, Any],
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The pod a controller makes of a pod template: the template's labels and
    annotations with the controller's own over them, owned by ``owned_by``, and
    the template's spec (or ``spec``, the controller's version of it)."""
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(meta.get("labels") or {}), **labels},
            "annotations": {**(meta.get("annotations") or {}), **(annotations or {})},
            "ownerReferences": [owned_by],
        },
        "spec": template["spec"] if spec is None else spec,
    }


class Poller(ABC):
    """Runs :meth:`step` in a thread every ``interval`` seconds; see the module docstring."""

    def __init__(self, admin: Admin, interval: float = 0.1) -> None:
        self.admin = admin
        self.interval = interval
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def pause(self, paused: bool = True) -> None:
        if paused:
            self._paused.set()
        else:
            self._paused.clear()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self._paused.is_set():
                continue
            try:
                self.step()
            except (ApiError, OSError, ValueError, KeyError) as e:
                self.errors.append(f"{type(e).__name__}: {e}")

    @abstractmethod
    def step(self) -> None:
        """One pass over what the controller watches."""

    # Requests ------------------------------------------------------------------------

    def _create(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create ``body`` in ``collection``, or read it when it exists already."""
        try:
            return dict(self.admin.request("POST", collection, body))
        except ApiError as e:
            if e.status != 409:
                raise
            return dict(self.admin.get(f"{collection}/{body['metadata']['name']}"))

    def _delete(self, path: str, *, grace: int | None = 0) -> None:
        """Delete the object at ``path`` (``grace`` None: its own grace period), if it is there."""
        body = None
        if grace is not None:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace}
        with contextlib.suppress(ApiError):
            self.admin.request("DELETE", path, body)

    def _finish_deletions(self, pods: list[dict[str, Any]]) -> None:
        """As a kubelet does: end the deletion of the pods that are being deleted."""
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                self._delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")

    def _merge_patch(self, path: str, body: dict[str, Any]) -> None:
        self.admin.request("PATCH", path, body, content_type=MERGE)

    def _pod_status(self, pod: dict[str, Any], status: dict[str, Any]) -> None:
        """Set ``status`` of the pod as its kubelet would (nothing if the pod is gone)."""
        meta = pod["metadata"]
        with contextlib.suppress(ApiError):
            self._merge_patch(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                {"status": status},
            )
