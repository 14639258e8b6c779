"""The policies a replay compares: four configurations of the same core, never code paths.

Theory of operation: a policy is a quota tree text and one placer per member
cluster; the scheduler loop, the cycle and the members are the same for all.
The placers are built by the one builder of placers,
:mod:`fleet.manifests.placers`, as the service builds them.

* ``fleet``: the quota tree as given and the HiveD-style cell allocator
  (:class:`~fleet.core.cells.placer.CellPlacer`): guaranteed work inside each
  queue's virtual cluster, borrowing up to ``max`` and opportunistic jobs on
  idle cells anywhere, reclaimed when the owner needs them.
* ``capacity``: the same quota tree without fair share's memory (as
  ``fleet-no-memory``), and the capacity-only placer
  (:class:`~fleet.core.capacity.CapacityPlacer`) over the same nodes: no
  topology, no virtual clusters; a gang fits wherever enough GPUs are free
  (the HiveD paper's YARN-CS baseline).
* ``private``: every leaf's ``max`` is lowered to its ``min`` for each
  resource ``min`` names (no borrowing; limits ``min`` does not name, such as
  ``kube-queue/max-jobs``, stay), with the cell allocator: each tenant alone
  on the partition its virtual cluster and ``min`` give it — the world
  HiveD's paper compares against.  A leaf without ``min`` keeps its ``max``:
  the tree has no way to say "at most zero" (a zero limit reads as no limit).
  Opportunistic jobs are not charged to ``max`` and still run on idle
  cells, as in HiveD.
* ``fleet-no-memory``: ``fleet`` with fair share's memory off (as ``capacity``
  has it: YARN's capacity scheduler orders queues by what they use now): every tree
  node that has ``fairSharing`` gets ``halfLife: 0`` (no decayed usage: the
  order among siblings follows what they hold at the instant), weights
  kept; a node without ``fairSharing`` is left as it is.  On a tree that
  sets no ``fairSharing`` it is ``fleet``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from fleet.core.placement import Placer
from fleet.manifests import placers as placer_builder
from fleet.manifests.models import MemberClusterModel

POLICIES: Final = ("fleet", "capacity", "private", "fleet-no-memory")
#: The half-life that turns fair share's memory off.
NO_MEMORY: Final = "0s"


class PolicyError(ValueError):
    """An unknown policy, or a tree the policy cannot be derived from."""


def check(names: Sequence[str]) -> list[str]:
    """The policy names, each known and given once; PolicyError otherwise."""
    out: list[str] = []
    for name in names:
        if name not in POLICIES:
            raise PolicyError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
        if name in out:
            raise PolicyError(f"policy {name!r} is given twice")
        out.append(name)
    if not out:
        raise PolicyError(f"no policy given; known: {', '.join(POLICIES)}")
    return out


def tree_text(policy: str, text: str) -> str:
    """The quota tree document ``policy`` runs with (module docstring)."""
    if policy == "private":
        change = _cap_leaves
    elif policy in ("fleet-no-memory", "capacity"):
        change = _forget
    else:
        return text
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "ElasticQuotaTree":
            root = (doc.get("spec") or {}).get("root")
            if isinstance(root, dict):
                change(root)
    return yaml.safe_dump_all(docs, sort_keys=False)


def _forget(node: dict[str, Any]) -> None:
    sharing = node.get("fairSharing")
    if isinstance(sharing, dict):
        node["fairSharing"] = {**sharing, "halfLife": NO_MEMORY}
    for child in node.get("children") or []:
        if isinstance(child, dict):
            _forget(child)


def _cap_leaves(node: dict[str, Any]) -> None:
    children = node.get("children") or []
    if not children:
        floor = node.get("min") or {}
        if isinstance(floor, dict) and floor:
            limit = node.get("max")
            node["max"] = {**(limit if isinstance(limit, dict) else {}), **floor}
        return
    for child in children:
        if isinstance(child, dict):
            _cap_leaves(child)


def placers(policy: str, clusters: Sequence[MemberClusterModel]) -> Mapping[str, Placer]:
    """One placer per member cluster for ``policy``."""
    return placer_builder.placers(clusters, "capacity" if policy == "capacity" else "cells")
