"""Member calls that need nothing of a cluster's state: the probe and a kind's dependencies.

Theory of operation: :func:`probe` asks the member whether it answers, takes
Fleet's credentials and serves every workload kind it runs (the group's
resource list names the kind's plural, and the list of that resource
answers); it returns why not, as the member's readiness says it, or None.
:func:`delete` deletes an object, its dependents in the background (as
``kubectl delete`` does).  :func:`ensure` creates an object a job's object needs first (a TrainJob's
runtime), or merge-patches an existing one to the wanted content;
:func:`own` makes the job's object its owner, so that the member's garbage
collector deletes it with the job.  :class:`~.cluster.KubeCluster` calls
them; they keep nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from fleet.clusters.base import ClusterError
from fleet.clusters.kube import objects
from fleet.clusters.kube.client import AlreadyExists, KubeClient, NotFound, Refused
from fleet.manifests.kinds.base import Dependency, Kind

JSON = dict[str, Any]


async def probe(client: KubeClient, member: str, kinds: Sequence[Kind]) -> str | None:
    """Why the member is not ready (None: it answers and serves every kind in ``kinds``)."""
    kind = kinds[0]
    try:
        for kind in kinds:
            group = await client.request("GET", kind.api_path)
            resources = group.get("resources") or []
            plurals = {r.get("name") for r in resources if isinstance(r, dict)}
            if kind.plural not in plurals:
                raise NotFound(member, f"GET {kind.api_path}: no {kind.plural} resource", 404)
            list_path = f"{kind.api_path}/{kind.plural}"
            await client.request("GET", list_path, query=[("limit", "1")])
    except NotFound as e:
        group_name, _, version = kind.api_version.rpartition("/")
        crd = f"{kind.plural}.{group_name}" if group_name else kind.plural
        return (
            f"the {kind.kind} CRD ({crd}, version {version}) is not installed "
            f"({e.message}); install it, or leave {kind.kind} out of the member's "
            "spec.kinds"
        )
    except Refused as e:
        return f"the member refuses Fleet's credentials or rights: {e.message}"
    except ClusterError as e:
        return f"unreachable: {e.message}"
    return None


async def delete(client: KubeClient, path: str) -> None:
    """Delete the object at ``path``, its dependents in the background (gone already: fine)."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    with contextlib.suppress(NotFound):
        await client.request("DELETE", path, body=body)


async def ensure(client: KubeClient, dependency: Dependency) -> None:
    """Create a job's dependency, or patch an existing one to the wanted content."""
    try:
        await client.request("POST", dependency.path, body=dependency.body)
    except AlreadyExists:
        name = dependency.body["metadata"]["name"]
        await client.request(
            "PATCH",
            f"{dependency.path}/{name}",
            body=dependency.body,
            content_type="application/merge-patch+json",
        )


async def own(client: KubeClient, dependency: Dependency, owner: JSON) -> None:
    """Make the job's object ``owner`` the owner of its dependency (it goes with it)."""
    meta = objects.meta(owner)
    reference = {
        "apiVersion": owner.get("apiVersion"),
        "kind": owner.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }
    name = dependency.body["metadata"]["name"]
    patch = {"metadata": {"ownerReferences": [reference]}}
    with contextlib.suppress(NotFound):
        await client.request(
            "PATCH",
            f"{dependency.path}/{name}",
            body=patch,
            content_type="application/merge-patch+json",
        )
