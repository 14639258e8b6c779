"""The hub's ElasticQuotaTree and PropagationPolicies in.

Theory of operation: **policies.**  Every PropagationPolicy of the hub (both
API groups) is stored as a standing policy the way ``fleet apply -f
policy.yaml`` stores one (:func:`fleet.service.wiring.put_policies`), with
the hub object's uid as the annotation :data:`~fleet.hub.objects.HUB_UID`;
a hub policy deleted, or missing from a relist, is removed
(:func:`fleet.service.wiring.delete_policy`); a policy stored through the
HTTP door (no such annotation) is left alone.  After any change the jobs
Fleet refused are tried again (:meth:`fleet.hub.jobs.JobDoor.retry_refused`):
a job applied a moment before its policy then runs.

**The tree.**  The ElasticQuotaTree of namespace ``kube-system`` (ACK One's
rule: one tree, in ``kube-system``) is applied exactly like ``PUT
/api/v1/quota-tree`` (:func:`fleet.service.wiring.change_tree`: validated
whole; a refused tree leaves the tree in force).  Each generation gets the
condition ``Accepted`` (True, or False with every broken rule) and an Event
(``TreeApplied``, or a Warning ``InvalidTree``); a tree in another
namespace gets ``Accepted`` False and a Warning saying which one Fleet
follows.  A tree equal to the one in force (a relist, a restart) is not
applied again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import yaml

from fleet.hub import objects
from fleet.hub.events import Recorder
from fleet.hub.objects import JSON, Resource
from fleet.manifests.errors import SpecError
from fleet.service import wiring

log = logging.getLogger("fleet.hub")


class PolicyDoor:
    """The hub's PropagationPolicies, stored; see the module docstring."""

    def __init__(self, svc: wiring.Service, changed: Callable[[], None]) -> None:
        self.svc = svc
        self.changed = changed

    def _stored_from_hub(self, api_version: str) -> dict[str, JSON]:
        return {
            key: doc
            for key, doc in self.svc.policies.items()
            if doc.get("apiVersion") == api_version and objects.hub_uid(doc)
        }

    async def sync(self, resource: Resource, items: list[JSON]) -> None:
        present = {objects.key_of(o) for o in items}
        for key in self._stored_from_hub(resource.api_version):
            if key not in present:
                namespace, _, name = key.partition("/")
                await wiring.delete_policy(self.svc, namespace, name)
        await self._put(items)

    async def event(self, resource: Resource, kind: str, obj: JSON) -> None:
        if kind == "DELETED":
            key = objects.key_of(obj)
            if key in self._stored_from_hub(resource.api_version):
                namespace, _, name = key.partition("/")
                await wiring.delete_policy(self.svc, namespace, name)
                self.changed()
            return
        await self._put([obj])

    async def _put(self, items: list[JSON]) -> None:
        """Store the policies of ``items`` that changed, each on its own: one that does
        not read as a PropagationPolicy is logged and left out."""
        stored = False
        for obj in items:
            document = objects.policy_document(obj)
            document["metadata"]["annotations"] = {
                objects.HUB_UID: str(objects.meta(obj).get("uid") or "")
            }
            if self.svc.policies.get(objects.key_of(obj)) == document:
                continue
            try:
                await wiring.put_policies(self.svc, [document], "hub")
            except ValueError as e:
                log.warning("hub: PropagationPolicy %s not stored: %s", objects.key_of(obj), e)
                continue
            stored = True
        if stored:
            self.changed()


class TreeDoor:
    """The hub's ElasticQuotaTree, applied; see the module docstring."""

    def __init__(
        self, svc: wiring.Service, recorder: Recorder, changed: Callable[[], None]
    ) -> None:
        self.svc = svc
        self.recorder = recorder
        self.changed = changed
        #: key -> the generation last answered
        self.answered: dict[str, int] = {}

    async def sync(self, items: list[JSON]) -> None:
        for obj in sorted(items, key=objects.key_of):
            await self.event("ADDED", obj)

    async def event(self, kind: str, obj: JSON) -> None:
        if kind == "DELETED":
            self.answered.pop(objects.key_of(obj), None)
            return  # the tree in force stays: Fleet never runs without one
        meta = objects.meta(obj)
        key = objects.key_of(obj)
        generation = int(meta.get("generation") or 0)
        if self.answered.get(key) == generation:
            return
        self.answered[key] = generation
        if meta.get("namespace") != objects.TREE_NAMESPACE:
            why = (
                f"Fleet follows the ElasticQuotaTree of namespace {objects.TREE_NAMESPACE} "
                "only; this one is not applied"
            )
            await self._answer(obj, generation, False, "Ignored", why)
            return
        text = yaml.safe_dump(objects.tree_document(obj), sort_keys=False)
        if text == self.svc.tree_document:
            await self._answer(obj, generation, True, "Applied", "the tree in force", event=False)
            return
        try:
            result, warnings = await wiring.change_tree(self.svc, text, f"hub:{key}")
        except SpecError as e:
            why = "; ".join(str(i) for i in e.issues)
            log.warning("hub: ElasticQuotaTree %s refused: %s", key, why)
            await self._answer(obj, generation, False, "InvalidTree", why)
            return
        effect = result.effect
        told = f"applied as version {result.version}"
        if effect.moved:
            told += f"; {len(effect.moved)} job(s) moved to another queue"
        if effect.over_limit:
            told += f"; {len(effect.over_limit)} queue(s) over a limit admit nothing new"
        if warnings:
            told += "; " + "; ".join(warnings)
        if result.overpromised:
            told += "; it promises more than the member clusters hold: " + "; ".join(
                str(s) for s in result.overpromised
            )
        log.info("hub: ElasticQuotaTree %s %s", key, told)
        await self._answer(obj, generation, True, "TreeApplied", told)
        self.changed()

    async def _answer(
        self, obj: JSON, generation: int, ok: bool, reason: str, message: str, *, event: bool = True
    ) -> None:
        condition = {
            "type": "Accepted",
            "status": "True" if ok else "False",
            "reason": reason,
            "message": message[:4096],
            "observedGeneration": generation,
            "lastTransitionTime": objects.rfc3339(self.svc.clock.now()),
        }
        await self.recorder.status(
            objects.TREE_RESOURCE,
            obj,
            {"observedGeneration": generation, "conditions": [condition]},
        )
        if event:
            kind = "Normal" if ok else "Warning"
            await self.recorder.event(objects.TREE_RESOURCE, obj, kind, reason, message)
