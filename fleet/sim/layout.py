"""``fleet simulate gen-clusters``: member clusters and a quota tree sized from a trace.

Theory of operation: a trace's capacity hints give each tenant (queue) a
number of 8-GPU nodes; the layout is one simulated member cluster whose HiveD
cell config has 8-GPU nodes grouped in racks of :data:`RACK_NODES` nodes, one
virtual cluster per queue owning that many nodes (``RACK.NODE`` cells, bound
lazily by buddy allocation), and an ElasticQuotaTree with one leaf per queue:
``min`` is its nodes' GPUs, ``max`` twice that (at most the whole cluster) so
that idle quota can be borrowed, and the root holds every GPU.  The racks are
filled up to a whole rack; nodes that no queue owns form the shared pool.

* ``philly``: the nodes of each VC come from ``philly_vc_nodes_helios.csv``
  beside the jobs file (the Helios authors' estimate).  A VC of the trace that
  the file does not list (51b7ef) gets one node per 8 GPUs of its largest
  job, at least one.
* ``openb``: the nodes are those of ``openb_node_list_gpu_node.csv`` beside
  the pod list, grouped by GPU model and GPUs per node (one pool per group);
  each synthetic tenant owns an equal share of every pool (rounded down; the
  rest is shared).

With ``nodes=True`` (``gen-clusters --nodes``) the member describes itself
instead, as a member whose cells are built from Node labels
(:mod:`fleet.manifests.topology`): ``spec.topology`` with one level
(:data:`RACK_LABEL` for Philly's racks, :data:`POOL_LABEL` for openb's pools),
``spec.nodes`` labelled with it (and openb's GPU model as
``nvidia.com/gpu.product``), and each virtual cluster as requests of whole
nodes.  Built, it gives the same cells as the hand-written form.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from fleet.sim import traces
from fleet.sim.traces import NODE_GPUS, TraceError, TraceJob

#: Nodes of one rack in generated Philly clusters.
RACK_NODES: Final = 8
#: The half-life of fair share's memory in the trees gen-clusters writes (Kueue's
#: and Slurm's examples use a day or more).
FAIR_HALF_LIFE: Final = "24h"
PHILLY_NODES_FILE: Final = "philly_vc_nodes_helios.csv"
OPENB_NODES_FILE: Final = "openb_node_list_gpu_node.csv"
#: Level labels of the generated nodes (``--nodes``).
RACK_LABEL: Final = "topology.fleet.io/rack"
POOL_LABEL: Final = "topology.fleet.io/pool"
GPU_PRODUCT: Final = "nvidia.com/gpu.product"


@dataclass(frozen=True, slots=True)
class Layout:
    """What ``gen-clusters`` writes: ``clusters.yaml`` and ``quota.yaml`` texts."""

    clusters: str
    quota: str


def _dump(header: str, documents: Sequence[Mapping[str, Any]]) -> str:
    body = yaml.safe_dump_all(documents, sort_keys=False, default_flow_style=None, width=100)
    return "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + body


def _quota(name: str, leaves: Mapping[str, int], total: int, header: str) -> str:
    """The ElasticQuotaTree: one leaf per queue, min its GPUs, max twice that, and fair
    share with a day's memory (:data:`FAIR_HALF_LIFE`) on the root."""
    children = [
        {
            "name": queue,
            "min": {"nvidia.com/gpu": gpus},
            "max": {"nvidia.com/gpu": min(total, 2 * gpus) if gpus else total},
            "namespaces": [queue],
        }
        for queue, gpus in leaves.items()
    ]
    tree = {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": name},
        "spec": {
            "root": {
                "name": "root",
                "min": {"nvidia.com/gpu": total},
                "max": {"nvidia.com/gpu": total},
                "fairSharing": {"halfLife": FAIR_HALF_LIFE},
                "children": children,
            }
        },
    }
    return _dump(header, [tree])


def philly_node_counts(text: str, where: str) -> dict[str, int]:
    """VC -> nodes from ``philly_vc_nodes_helios.csv``."""
    out: dict[str, int] = {}
    for line, row in traces._rows(text, where, ("vc", "node num")):
        vc = row["vc"].strip()
        if not vc:
            raise TraceError(f"{where}: line {line}: column vc: empty")
        out[vc] = traces._whole(row, "node num", where, line, minimum=1)
    return out


def _member(
    name: str, cells: dict[str, Any] | None, described: dict[str, Any] | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"simulated": True}
    if described is not None:
        spec.update(described)
    else:
        spec["cells"] = cells
    return {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": name, "labels": {"trace": name}},
        "spec": spec,
    }


def philly(
    jobs: Sequence[TraceJob], node_counts: Mapping[str, int], source: str, nodes: bool = False
) -> Layout:
    """The Philly layout (module docstring); ``source`` names the files in the headers."""
    sizes = {f"vc-{traces._label(vc)}": n for vc, n in node_counts.items()}
    largest: dict[str, int] = {}
    for job in jobs:
        largest[job.queue] = max(largest.get(job.queue, 0), job.total_gpus)
    for queue in sorted(largest.keys() - sizes.keys()):
        sizes[queue] = max(1, math.ceil(largest[queue] / NODE_GPUS))
    queues = dict(sorted(sizes.items()))
    owned = sum(queues.values())
    racks = math.ceil(owned / RACK_NODES)
    total = racks * RACK_NODES * NODE_GPUS
    guessed = sorted(largest.keys() - {f"vc-{traces._label(v)}" for v in node_counts})
    sized = f"; {', '.join(guessed)} sized from its largest job" if guessed else ""
    header = (
        f"Generated by `fleet simulate gen-clusters --format philly` from {source}.\n"
        f"{owned} 8-GPU nodes owned by {len(queues)} virtual clusters "
        f"(Helios' node counts{sized}),\n"
        f"in {racks} racks of {RACK_NODES} nodes ({racks * RACK_NODES - owned} shared)."
    )
    cells = {
        "physicalCluster": {
            "skuTypes": {"GPU": {"gpu": 1}},
            "cellTypes": {
                "NODE": {
                    "childCellType": "GPU",
                    "childCellNumber": NODE_GPUS,
                    "isNodeLevel": True,
                },
                "RACK": {"childCellType": "NODE", "childCellNumber": RACK_NODES},
            },
            "physicalCells": [
                {
                    "cellType": "RACK",
                    "cellChildren": [
                        {"cellAddress": f"philly-node-{r * RACK_NODES + n:04d}"}
                        for n in range(RACK_NODES)
                    ],
                }
                for r in range(racks)
            ],
        },
        "virtualClusters": {
            queue: {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": n}]}
            for queue, n in queues.items()
        },
    }
    described = {
        "topology": {"levels": [RACK_LABEL]},
        "nodes": [
            {
                "name": f"philly-node-{r * RACK_NODES + n:04d}",
                "labels": {RACK_LABEL: f"rack-{r:03d}"},
                "capacity": {"nvidia.com/gpu": NODE_GPUS},
            }
            for r in range(racks)
            for n in range(RACK_NODES)
        ],
        "virtualClusters": {queue: {"requests": [{"nodes": n}]} for queue, n in queues.items()},
    }
    cluster = _member("philly", cells, described if nodes else None)
    leaves = {queue: n * NODE_GPUS for queue, n in queues.items()}
    return Layout(_dump(header, [cluster]), _quota("philly", leaves, total, header))


@dataclass(frozen=True, slots=True)
class _NodeGroup:
    model: str
    gpus: int
    names: tuple[str, ...]


def openb_nodes(text: str, where: str) -> list[_NodeGroup]:
    """GPU nodes of ``openb_node_list_gpu_node.csv`` grouped by model and GPUs per node."""
    groups: dict[tuple[str, int], list[str]] = {}
    for line, row in traces._rows(text, where, ("sn", "gpu", "model")):
        gpus = traces._whole(row, "gpu", where, line, minimum=0)
        model = traces._label(row["model"]).upper()
        if gpus == 0:
            continue
        if model == "X":
            raise TraceError(f"{where}: line {line}: column model: empty")
        groups.setdefault((model, gpus), []).append(traces._label(row["sn"]))
    return [_NodeGroup(m, g, tuple(names)) for (m, g), names in sorted(groups.items())]


def openb(groups: Sequence[_NodeGroup], source: str, nodes: bool = False) -> Layout:
    """The openb layout (module docstring)."""
    if not groups:
        raise TraceError(f"{source}: no GPU node")
    tenants = [f"tenant-{i}" for i in range(traces.OPENB_TENANTS)]
    skus: dict[str, dict[str, int]] = {}
    cell_types: dict[str, dict[str, Any]] = {}
    physical: list[dict[str, Any]] = []
    vcs: dict[str, list[dict[str, Any]]] = {t: [] for t in tenants}
    node_list: list[dict[str, Any]] = []
    requests: dict[str, list[dict[str, Any]]] = {t: [] for t in tenants}
    owned = dict.fromkeys(tenants, 0)
    total = 0
    for group in groups:
        skus[group.model] = {"gpu": 1}
        node = f"{group.model}-{group.gpus}GPU-NODE"
        pool = f"{group.model}-{group.gpus}GPU-POOL"
        cell_types[node] = {
            "childCellType": group.model,
            "childCellNumber": group.gpus,
            "isNodeLevel": True,
        }
        cell_types[pool] = {"childCellType": node, "childCellNumber": len(group.names)}
        physical.append(
            {"cellType": pool, "cellChildren": [{"cellAddress": n} for n in group.names]}
        )
        total += group.gpus * len(group.names)
        labels = {POOL_LABEL: pool.lower(), GPU_PRODUCT: group.model}
        node_list.extend(
            {"name": n, "labels": labels, "capacity": {"nvidia.com/gpu": group.gpus}}
            for n in group.names
        )
        share = len(group.names) // len(tenants)
        if share:
            for t in tenants:
                vcs[t].append({"cellType": f"{pool}.{node}", "cellNumber": share})
                selector = {"matchLabels": {POOL_LABEL: pool.lower()}}
                requests[t].append({"nodes": share, "nodeSelector": selector})
                owned[t] += share * group.gpus
    header = (
        f"Generated by `fleet simulate gen-clusters --format openb` from {source}.\n"
        f"{sum(len(g.names) for g in groups)} GPU nodes ({total} GPUs) in {len(groups)} pools "
        f"by GPU model and size; {len(tenants)} synthetic tenants\n"
        "(the trace has none) each own an equal share of every pool."
    )
    cells = {
        "physicalCluster": {
            "skuTypes": skus,
            "cellTypes": cell_types,
            "physicalCells": physical,
        },
        "virtualClusters": {t: {"virtualCells": cells} for t, cells in vcs.items() if cells},
    }
    described = {
        "topology": {"levels": [POOL_LABEL]},
        "nodes": node_list,
        "virtualClusters": {t: {"requests": asks} for t, asks in requests.items() if asks},
    }
    cluster = _member("openb", cells, described if nodes else None)
    return Layout(_dump(header, [cluster]), _quota("openb", owned, total, header))


def generate(trace: Path, fmt: str, nodes: bool = False) -> Layout:
    """The layout for trace file ``trace`` of format ``fmt`` (its capacity file beside it);
    ``nodes``: members described by labelled nodes (module docstring)."""
    if fmt == "philly":
        where = trace.parent / PHILLY_NODES_FILE
        jobs = traces.read_philly(_text(trace), str(trace))
        counts = philly_node_counts(_text(where), str(where))
        return philly(jobs, counts, f"{trace.name} and {where.name}", nodes)
    if fmt == "openb":
        where = trace.parent / OPENB_NODES_FILE
        return openb(openb_nodes(_text(where), str(where)), where.name, nodes)
    raise TraceError(f"gen-clusters reads philly or openb traces, not {fmt!r}")


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: cannot be read: {e}") from None
