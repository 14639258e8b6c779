"""Cell configs and cell placers for tests and benchmarks, so that each shows only what matters.

Theory of operation: :func:`rack_config` writes a HiveD cell config (the
``spec.cells`` of a member cluster) of racks of nodes of GPUs, optionally in
PCIe pairs, with virtual clusters owed cells by type path and nodes pinned to
a VC; :func:`cell_placer` builds a
:class:`~fleet.core.cells.placer.CellPlacer` over one.  Node addresses follow
a format (``r{r}n{n}`` unless told), so a benchmark can name its nodes as it
always has and replay the same decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer


def rack_config(
    racks: int,
    nodes: int,
    gpus: int,
    vcs: Mapping[str, Sequence[tuple[str, int]]] | None = None,
    *,
    pairs: bool = False,
    pinned: Mapping[str, tuple[int, int]] | None = None,
    sku: Mapping[str, Any] | None = None,
    address: str = "r{r}n{n}",
) -> dict[str, Any]:
    """``racks`` racks of ``nodes`` nodes ``r{r}n{n}`` of ``gpus`` GPUs.

    ``vcs``: VC -> [(cell type path such as ``RACK.NODE``, number)].  ``pairs``:
    GPUs sit in PAIR cells of two (``gpus`` must be even).  ``pinned``: VC ->
    (rack, node) of a node it pins (pinned cell id ``pin-{vc}``).  ``address``:
    the nodes' addresses, formatted with ``r`` (rack) and ``n`` (node in rack).
    """
    types: dict[str, Any] = {}
    if pairs:
        types["PAIR"] = {"childCellType": "GPU", "childCellNumber": 2}
        types["NODE"] = {"childCellType": "PAIR", "childCellNumber": gpus // 2, "isNodeLevel": True}
    else:
        types["NODE"] = {"childCellType": "GPU", "childCellNumber": gpus, "isNodeLevel": True}
    types["RACK"] = {"childCellType": "NODE", "childCellNumber": nodes}
    pins = {where: vc for vc, where in (pinned or {}).items()}
    physical = []
    for r in range(racks):
        children = []
        for n in range(nodes):
            child: dict[str, Any] = {"cellAddress": address.format(r=r, n=n)}
            if (r, n) in pins:
                child["pinnedCellId"] = f"pin-{pins[(r, n)]}"
            children.append(child)
        physical.append({"cellType": "RACK", "cellChildren": children})
    pc: dict[str, Any] = {"cellTypes": types, "physicalCells": physical}
    if sku is not None:
        pc["skuTypes"] = {"GPU": dict(sku)}
    virtual: dict[str, Any] = {}
    for vc, cells in (vcs or {}).items():
        virtual[vc] = {"virtualCells": [{"cellType": t, "cellNumber": n} for t, n in cells]}
    for vc in pinned or {}:
        virtual.setdefault(vc, {})["pinnedCells"] = [{"pinnedCellId": f"pin-{vc}"}]
    return {"physicalCluster": pc, "virtualClusters": virtual}


def cell_placer(cluster: str = "c1", **config: Any) -> CellPlacer:
    """A :class:`CellPlacer` over :func:`rack_config` (``racks``, ``nodes``, ``gpus``, ...)."""
    return CellPlacer(cluster, load_cell_config(rack_config(**config)))


#: Level label keys of :func:`labelled_member`'s nodes.
RACK_LABEL = "topology.fleet.io/rack"
GROUP_LABEL = "topology.fleet.io/gpu-group"


def labelled_member(
    racks: int,
    nodes: int,
    gpus: int,
    vcs: Mapping[str, Sequence[dict[str, Any]]] | None = None,
    *,
    pairs: bool = False,
    address: str = "r{r}n{n}",
    labels: Mapping[str, str] | None = None,
    name: str = "c1",
) -> dict[str, Any]:
    """A simulated MemberCluster document that describes :func:`rack_config`'s racks by
    their nodes' labels (``spec.topology`` and ``spec.nodes``) instead of cells.

    ``vcs``: VC -> its requests (``{nodes: N, within: RACK_LABEL}`` ...).  Built,
    it gives the same cells as :func:`rack_config` (other type names).
    """
    node_list = []
    for r in range(racks):
        for n in range(nodes):
            node_labels = {RACK_LABEL: f"r{r:05d}", **(labels or {})}
            if pairs:
                node_labels[GROUP_LABEL] = "2"
            node_list.append(
                {
                    "name": address.format(r=r, n=n),
                    "labels": node_labels,
                    "capacity": {"nvidia.com/gpu": gpus},
                }
            )
    topology: dict[str, Any] = {"levels": [RACK_LABEL]}
    if pairs:
        topology["gpuGroup"] = GROUP_LABEL
    spec: dict[str, Any] = {"simulated": True, "topology": topology, "nodes": node_list}
    if vcs:
        spec["virtualClusters"] = {vc: {"requests": list(asks)} for vc, asks in vcs.items()}
    return {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": name},
        "spec": spec,
    }
