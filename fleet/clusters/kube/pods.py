"""What a member's watch says about Fleet's pods, indexed by the job uid they carry.

Theory of operation: :class:`PodIndex` holds the pods of one member that name
Fleet's scheduler, by ``(namespace, name)``, and also by the value of their
``fleet.io/job-uid`` label, so that the pods of one job (to bind, to delete,
to know they are gone) are found without a walk over every pod; and the
bound pods by node, so that the pods still holding a node's GPUs are found
before another job's pod is bound to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleet.clusters.kube import objects

JSON = dict[str, Any]
Ident = tuple[str, str]


def ident(obj: JSON) -> Ident:
    """``(namespace, name)`` of an object."""
    meta = objects.meta(obj)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def uid_of(obj: JSON) -> str | None:
    """The Fleet job uid an object carries in its label, if any."""
    value = objects.labels(obj).get(objects.UID_LABEL)
    return str(value) if value else None


class PodIndex:
    """Pods by identity and by job uid; see the module docstring."""

    def __init__(self) -> None:
        self._pods: dict[Ident, JSON] = {}
        self._by_uid: dict[str, set[Ident]] = {}
        self._by_node: dict[str, set[Ident]] = {}

    def __len__(self) -> int:
        return len(self._pods)

    def replace(self, items: Iterable[JSON]) -> None:
        """Forget every pod and hold ``items`` (a fresh list)."""
        self._pods.clear()
        self._by_uid.clear()
        self._by_node.clear()
        for obj in items:
            self.put(obj)

    def put(self, obj: JSON) -> None:
        key = ident(obj)
        self.remove(key)
        self._pods[key] = obj
        uid = uid_of(obj)
        if uid is not None:
            self._by_uid.setdefault(uid, set()).add(key)
        node = objects.node_of(obj)
        if node:
            self._by_node.setdefault(node, set()).add(key)

    def remove(self, key: Ident) -> JSON | None:
        obj = self._pods.pop(key, None)
        uid = uid_of(obj) if obj is not None else None
        if uid is not None:
            keys = self._by_uid.get(uid, set())
            keys.discard(key)
            if not keys:
                self._by_uid.pop(uid, None)
        node = objects.node_of(obj) if obj is not None else ""
        if node:
            on_node = self._by_node.get(node, set())
            on_node.discard(key)
            if not on_node:
                self._by_node.pop(node, None)
        return obj

    def holding(self, node: str, gpus: Iterable[int], other_than: str) -> list[Ident]:
        """Pods of jobs other than ``other_than`` that still hold any of ``gpus`` on
        ``node``: bound there with those GPU indices, and not ended (a pod being
        deleted holds them until it is gone)."""
        wanted = set(gpus)
        out = []
        for key in sorted(self._by_node.get(node, ())):
            pod = self._pods[key]
            if uid_of(pod) == other_than or objects.ended(pod):
                continue
            if wanted & set(objects.gpu_indices(pod)):
                out.append(key)
        return out

    def of_uid(self, uid: str) -> list[tuple[Ident, JSON]]:
        """The pods of job ``uid``, in name order."""
        return [(k, self._pods[k]) for k in sorted(self._by_uid.get(uid, ()))]

    def get(self, key: Ident) -> JSON | None:
        return self._pods.get(key)

    def has_uid(self, uid: str) -> bool:
        return uid in self._by_uid

    def pending(self) -> list[JSON]:
        """Every pod not bound yet and not being deleted, in name order."""
        return [p for _, p in sorted(self._pods.items()) if objects.pending(p)]
