"""Load and validate a HiveD cell config (``spec.cells`` or a raw HiveD file).

Theory of operation: the input is the plain mapping HiveD and OpenPAI write
(``physicalCluster.{skuTypes, cellTypes, physicalCells}`` and
``virtualClusters``); other top-level keys of a raw HiveD file
(``kubeApiServerAddress`` ...) are ignored.  Parsing happens in three passes:

1. *cell types*: every ``childCellType`` that is not itself a cell type is a
   leaf cell type (with ``skuTypes`` it must be a skuType); cycles and chains
   with two node levels are rejected; levels are counted from the leaf (= 1).
2. *physical cells* are expanded into full trees like HiveD's defaulting:
   a cell's full address is its parent's address, ``/``, its own address; a
   missing address defaults to the cell's index among the cells of the same
   level in the same node (below node level) or the same top-level cell
   (above it), and a top-level cell's to its index in ``physicalCells``.  A
   node-level cell's own address is the Kubernetes node name; a leaf's own
   address (when it is an integer) is its GPU index on the node.  Children of a
   node-level cell (and below) may be omitted and are then inferred; above
   node level every child must be listed.
3. *virtual clusters*: ``cellType`` paths ``CHAIN.T1.T2`` must follow the
   cell tree from a chain (a cell type used by a top-level physical cell);
   pinned cell ids must exist and be used once.  Finally the assignment is
   counted per chain per level with the allocator's own buddy arithmetic, so a
   config that could not honour every VC's cells ("illegal initial VC
   assignment: insufficient physical cells") is rejected up front.

A leaf skuType without a GPU (``gpu`` absent or 0, as OpenPAI writes a
``CPU`` skuType) makes a *CPU-only node pool*: the top-level physical cells of
its chains are kept apart (``CellConfig.cpu_cells``), their nodes' cpu and
memory take the pods that ask for no GPU, and a virtual cluster may not own
their cells (a queue's cpu and memory are guaranteed by the quota tree).

A skuType may give its GPU's attributes as node labels (``labels: {key:
value}``: a label key and a label value as Kubernetes writes them, a number
read as its decimal text); a GPU skuType's labels always name its product
(``nvidia.com/gpu.product``), the skuType's name unless they say otherwise.

The result is a :class:`fleet.core.cells.spec.CellConfig`.  Every error is a
:class:`CellConfigError` whose ``path`` is the dotted field path under ``path``
(default ``spec.cells``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.core import resources
from fleet.core.cells.spec import (
    GPU_PRODUCT_LABEL,
    CellConfig,
    CellConfigError,
    CellType,
    PhysicalCellSpec,
    SkuType,
    VirtualCellSpec,
    VirtualClusterSpec,
)
from fleet.core.digits import parse_digits
from fleet.core.resources import QuantityError

__all__ = ["label_problem", "load_cell_config", "load_hived_file_dict"]


def load_hived_file_dict(data: Mapping[str, Any]) -> CellConfig:
    """Load a raw HiveD config file's dict (extra top-level keys are ignored)."""
    return load_cell_config(data, path="")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _mapping(value: Any, path: str, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CellConfigError(path, f"{what} must be a mapping")
    return value


def _int(value: Any, path: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CellConfigError(path, f"must be an integer, got {value!r}")
    if value < minimum:
        raise CellConfigError(path, f"must be at least {minimum}, got {value}")
    return value


def load_cell_config(data: Mapping[str, Any], path: str = "spec.cells") -> CellConfig:
    """Parse and validate a HiveD cell config; raise :class:`CellConfigError`."""
    data = _mapping(data, path or "<root>", "the cell config")
    pc_path = _join(path, "physicalCluster")
    if "physicalCluster" not in data:
        raise CellConfigError(pc_path, "required")
    pc = _mapping(data["physicalCluster"], pc_path, "physicalCluster")
    skus = _parse_skus(pc.get("skuTypes"), _join(pc_path, "skuTypes"))
    cell_types, leaf_order = _parse_cell_types(
        pc.get("cellTypes"), _join(pc_path, "cellTypes"), skus
    )
    cpu_leaves = [leaf for leaf in leaf_order if leaf in skus and skus[leaf].gpu == 0]
    tops, chains = _parse_physical(
        pc.get("physicalCells"), _join(pc_path, "physicalCells"), cell_types
    )
    # CPU-only node pools: top-level cells whose leaf skuType has no GPU.
    cpu_tops = [t for t in tops if cell_types[t.cell_type].leaf_type in cpu_leaves]
    gpu_tops = [t for t in tops if cell_types[t.cell_type].leaf_type not in cpu_leaves]
    cpu_chains = [c for c in chains if cell_types[c].leaf_type in cpu_leaves]
    chains = [c for c in chains if c not in cpu_chains]
    vcs = _parse_vcs(
        data.get("virtualClusters"),
        _join(path, "virtualClusters"),
        cell_types,
        chains,
        gpu_tops,
        cpu_chains,
    )
    config = CellConfig(
        sku_types=skus,
        cell_types=cell_types,
        physical_cells=tuple(gpu_tops),
        vcs=vcs,
        leaf_types=tuple(leaf for leaf in leaf_order if leaf not in cpu_leaves),
        chains=tuple(chains),
        cpu_cells=tuple(cpu_tops),
        cpu_leaf_types=tuple(cpu_leaves),
    )
    _check_assignment(config, _join(path, "virtualClusters"))
    return config


# -- pass 1: sku and cell types ---------------------------------------------------------------


def _parse_skus(raw: Any, path: str) -> dict[str, SkuType]:
    if raw is None:
        return {}
    raw = _mapping(raw, path, "skuTypes")
    out: dict[str, SkuType] = {}
    for name, spec in raw.items():
        spath = _join(path, str(name))
        spec = _mapping(spec, spath, f"skuType {name}")
        amounts: dict[str, int] = {}
        for key, resource in (
            ("gpu", resources.GPU),
            ("cpu", resources.CPU),
            ("memory", resources.MEMORY),
        ):
            if spec.get(key) is None:
                amounts[key] = 0
                continue
            try:
                amounts[key] = resources.parse_quantity(resource, spec[key])
            except QuantityError as e:
                raise CellConfigError(_join(spath, key), str(e)) from e
        if not any(amounts.values()):
            raise CellConfigError(spath, f"skuType {name} has no gpu, cpu or memory")
        labels = _parse_labels(spec.get("labels"), _join(spath, "labels"))
        if amounts["gpu"] and GPU_PRODUCT_LABEL not in labels:
            labels[GPU_PRODUCT_LABEL] = str(name)
        out[str(name)] = SkuType(
            str(name),
            amounts["gpu"],
            amounts["cpu"],
            amounts["memory"],
            tuple(sorted(labels.items())),
        )
    return out


#: A label key's name part and a label value (Kubernetes' qualified name and label
#: value: alphanumerics, ``-``, ``_`` and ``.`` inside, at most 63 characters).
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
#: A label key's prefix: a DNS subdomain.
_LABEL_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def label_problem(key: object, value: object) -> str | None:
    """Why ``key: value`` is not a Kubernetes label (a number value as its text), or None."""
    prefix, _, name = str(key).rpartition("/")
    if (
        not isinstance(key, str)
        or not _LABEL_NAME.fullmatch(name)
        or (prefix and (len(prefix) > 253 or not _LABEL_PREFIX.fullmatch(prefix)))
        or (not prefix and "/" in key)
    ):
        return f"{key!r} is not a label key"
    if isinstance(value, bool) or not isinstance(value, str | int):
        return f"a label value is a string, got {value!r}"
    text = str(value)
    if text and not _LABEL_NAME.fullmatch(text):
        return f"{text!r} is not a label value"
    return None


def _parse_labels(raw: Any, path: str) -> dict[str, str]:
    """A skuType's ``labels``: label keys to label values (a number as its text)."""
    if raw is None:
        return {}
    raw = _mapping(raw, path, "labels")
    out: dict[str, str] = {}
    for key, value in raw.items():
        problem = label_problem(key, value)
        if problem is not None:
            raise CellConfigError(_join(path, str(key)), problem)
        out[key] = str(value)
    return out


def _parse_cell_types(
    raw: Any, path: str, skus: Mapping[str, SkuType]
) -> tuple[dict[str, CellType], list[str]]:
    if raw is None:
        raise CellConfigError(path, "required")
    raw = _mapping(raw, path, "cellTypes")
    specs: dict[str, tuple[str, int, bool]] = {}
    for name, spec in raw.items():
        tpath = _join(path, str(name))
        spec = _mapping(spec, tpath, f"cell type {name}")
        child = spec.get("childCellType")
        if not isinstance(child, str) or not child:
            raise CellConfigError(
                _join(tpath, "childCellType"), f"cell type {name} needs a childCellType"
            )
        number = _int(spec.get("childCellNumber"), _join(tpath, "childCellNumber"), 1)
        node_level = spec.get("isNodeLevel", False)
        if node_level is None:
            node_level = False
        if not isinstance(node_level, bool):
            raise CellConfigError(_join(tpath, "isNodeLevel"), "must be true or false")
        specs[str(name)] = (child, number, node_level)
    # Leaf types: children that are not cell types themselves.
    leaf_order: list[str] = []
    for name, (child, _, _) in specs.items():
        if child in specs:
            continue
        if skus and child not in skus:
            raise CellConfigError(
                _join(_join(path, name), "childCellType"),
                f"cell type {name}: unknown child cell type {child} "
                "(neither a cellType nor a skuType)",
            )
        if child not in leaf_order:
            leaf_order.append(child)
    out: dict[str, CellType] = {
        leaf: CellType(leaf, None, 0, False, 1, leaf) for leaf in leaf_order
    }

    def resolve(name: str, seen: tuple[str, ...]) -> CellType:
        if name in out:
            return out[name]
        if name in seen:
            cycle = " -> ".join((*seen[seen.index(name) :], name))
            raise CellConfigError(
                _join(_join(path, seen[-1]), "childCellType"), f"cycle in cell types: {cycle}"
            )
        child, number, node_level = specs[name]
        sub = resolve(child, (*seen, name))
        if node_level and _has_node_level(sub, out):
            raise CellConfigError(
                _join(_join(path, name), "isNodeLevel"),
                f"cell type {name} is node level but its child {child} "
                "already contains a node level",
            )
        ct = CellType(name, child, number, node_level, sub.level + 1, sub.leaf_type)
        out[name] = ct
        return ct

    for name in specs:
        resolve(name, ())
    return out, leaf_order


def _has_node_level(ct: CellType, types: Mapping[str, CellType]) -> bool:
    cur: CellType | None = ct
    while cur is not None:
        if cur.is_node_level:
            return True
        cur = types[cur.child] if cur.child is not None else None
    return False


# -- pass 2: physical cells ------------------------------------------------------------------


class _Expander:
    def __init__(self, cell_types: Mapping[str, CellType]) -> None:
        self.types = cell_types
        self.addresses: dict[str, str] = {}  # full address -> path
        self.leaves: dict[tuple[str, int], str] = {}  # (node, index) -> path
        self.pinned: dict[str, str] = {}  # id -> path
        self.counters: dict[tuple[str, int], int] = {}

    def _next(self, scope: str, level: int) -> int:
        key = (scope, level)
        n = self.counters.get(key, 0)
        self.counters[key] = n + 1
        return n

    def expand(
        self,
        raw: Any,
        ct: CellType,
        path: str,
        parent: str | None,
        node: str | None,
        scope: str,
        default_address: str,
    ) -> PhysicalCellSpec:
        if raw is None:
            raw = {}
        raw = _mapping(raw, path, "a physical cell")
        given_type = raw.get("cellType")
        if given_type is not None and parent is not None and given_type != ct.name:
            raise CellConfigError(
                _join(path, "cellType"), f"expected cell type {ct.name} here, got {given_type}"
            )
        address = raw.get("cellAddress")
        if address is not None and not isinstance(address, bool | str | int | float):
            raise CellConfigError(_join(path, "cellAddress"), "must be a string")
        own = str(address) if address is not None and address != "" else default_address
        if ct.is_node_level:
            if address is None or address == "":
                raise CellConfigError(
                    _join(path, "cellAddress"),
                    f"node-level cell of type {ct.name} needs a cellAddress (its node name)",
                )
            node = own
            scope = f"node:{parent}/{own}"
        full = own if parent is None else f"{parent}/{own}"
        if full in self.addresses:
            raise CellConfigError(
                _join(path, "cellAddress"),
                f"duplicate cell address {full} (also at {self.addresses[full]})",
            )
        self.addresses[full] = path
        pinned = raw.get("pinnedCellId")
        if pinned is not None and pinned != "":
            pinned = str(pinned)
            if pinned in self.pinned:
                raise CellConfigError(
                    _join(path, "pinnedCellId"),
                    f"duplicate pinnedCellId {pinned} (also at {self.pinned[pinned]})",
                )
            self.pinned[pinned] = path
        else:
            pinned = None
        raw_children = raw.get("cellChildren")
        children: list[PhysicalCellSpec] = []
        leaf_index: int | None = None
        if ct.child is None:
            if raw_children:
                raise CellConfigError(
                    _join(path, "cellChildren"), f"leaf cell of type {ct.name} cannot have children"
                )
            assert node is not None
            counter = self._next(scope, 0)
            given = parse_digits(own)
            leaf_index = counter if given is None else given
            if (node, leaf_index) in self.leaves:
                raise CellConfigError(
                    _join(path, "cellAddress"),
                    f"duplicate leaf cell {leaf_index} on node {node} "
                    f"(also at {self.leaves[(node, leaf_index)]})",
                )
            self.leaves[(node, leaf_index)] = path
        else:
            child_type = self.types[ct.child]
            if raw_children is None or raw_children == []:
                if node is None:
                    raise CellConfigError(
                        _join(path, "cellChildren"),
                        f"cell {full} of type {ct.name} must list its {ct.child_number} "
                        f"{ct.child} children (node names are not inferred)",
                    )
                raw_children = [None] * ct.child_number
            if not isinstance(raw_children, list):
                raise CellConfigError(_join(path, "cellChildren"), "must be a list")
            if len(raw_children) != ct.child_number:
                raise CellConfigError(
                    _join(path, "cellChildren"),
                    f"cell {full} of type {ct.name} has {len(raw_children)} children, "
                    f"cell type says childCellNumber {ct.child_number}",
                )
            for i, child in enumerate(raw_children):
                cpath = f"{path}.cellChildren[{i}]"
                default = str(self._next(scope, child_type.level))
                children.append(self.expand(child, child_type, cpath, full, node, scope, default))
        return PhysicalCellSpec(
            cell_type=ct.name,
            address=full,
            node=node,
            leaf_index=leaf_index,
            pinned_id=pinned,
            children=tuple(children),
            path=path,
        )


def _parse_physical(
    raw: Any, path: str, cell_types: Mapping[str, CellType]
) -> tuple[list[PhysicalCellSpec], list[str]]:
    if not isinstance(raw, list) or not raw:
        raise CellConfigError(path, "required: a non-empty list of physical cells")
    expander = _Expander(cell_types)
    tops: list[PhysicalCellSpec] = []
    chains: list[str] = []
    for i, cell in enumerate(raw):
        cpath = f"{path}[{i}]"
        cell = _mapping(cell, cpath, "a physical cell")
        name = cell.get("cellType")
        if not isinstance(name, str) or name not in cell_types:
            raise CellConfigError(_join(cpath, "cellType"), f"unknown cell type {name!r}")
        ct = cell_types[name]
        if not _has_node_level(ct, cell_types):
            raise CellConfigError(
                _join(cpath, "cellType"),
                f"top-level cell of type {name} is below node level (no isNodeLevel cell type "
                "at or above it)",
            )
        tops.append(expander.expand(cell, ct, cpath, None, None, f"top:{i}", str(i)))
        if name not in chains:
            chains.append(name)
    return tops, chains


# -- pass 3: virtual clusters ------------------------------------------------------------------


def _parse_vcs(
    raw: Any,
    path: str,
    cell_types: Mapping[str, CellType],
    chains: Sequence[str],
    tops: Sequence[PhysicalCellSpec],
    cpu_chains: Sequence[str] = (),
) -> dict[str, VirtualClusterSpec]:
    if raw is None:
        return {}
    raw = _mapping(raw, path, "virtualClusters")
    pinned_ids: dict[str, str] = {}

    def collect(cell: PhysicalCellSpec) -> None:
        if cell.pinned_id is not None:
            pinned_ids[cell.pinned_id] = cell.address
        for child in cell.children:
            collect(child)

    for top in tops:
        collect(top)
    used_pins: dict[str, str] = {}
    out: dict[str, VirtualClusterSpec] = {}
    for vc_name, spec in raw.items():
        vc = str(vc_name)
        vpath = _join(path, vc)
        spec = _mapping(spec if spec is not None else {}, vpath, f"virtual cluster {vc}")
        cells: list[VirtualCellSpec] = []
        raw_cells = spec.get("virtualCells") or []
        if not isinstance(raw_cells, list):
            raise CellConfigError(_join(vpath, "virtualCells"), "must be a list")
        for i, vcell in enumerate(raw_cells):
            cpath = f"{vpath}.virtualCells[{i}]"
            vcell = _mapping(vcell, cpath, "a virtual cell")
            type_path = vcell.get("cellType")
            if not isinstance(type_path, str) or not type_path:
                raise CellConfigError(_join(cpath, "cellType"), f"VC {vc}: cellType required")
            parts = type_path.split(".")
            chain = parts[0]
            if chain not in cell_types:
                raise CellConfigError(
                    _join(cpath, "cellType"), f"VC {vc}: unknown cell type {chain}"
                )
            if chain in cpu_chains:
                raise CellConfigError(
                    _join(cpath, "cellType"),
                    f"VC {vc}: {chain} is a CPU-only node pool (its skuType has no GPU); "
                    "virtual clusters own GPU cells, and a queue's cpu and memory are "
                    "guaranteed by the quota tree's min",
                )
            if chain not in chains:
                raise CellConfigError(
                    _join(cpath, "cellType"),
                    f"VC {vc}: no top-level physical cell has cell type {chain}",
                )
            for parent, child in itertools.pairwise(parts):
                if cell_types[parent].child != child:
                    raise CellConfigError(
                        _join(cpath, "cellType"),
                        f"VC {vc}: {child} is not the child cell type of {parent} in {type_path}",
                    )
            number = _int(vcell.get("cellNumber", 0), _join(cpath, "cellNumber"), 0)
            cells.append(VirtualCellSpec(chain, parts[-1], number, cpath))
        raw_pins = spec.get("pinnedCells") or []
        if not isinstance(raw_pins, list):
            raise CellConfigError(_join(vpath, "pinnedCells"), "must be a list")
        pins: list[str] = []
        for i, pin in enumerate(raw_pins):
            ppath = f"{vpath}.pinnedCells[{i}].pinnedCellId"
            pin = _mapping(pin, f"{vpath}.pinnedCells[{i}]", "a pinned cell")
            pid = pin.get("pinnedCellId")
            if not isinstance(pid, str) or pid not in pinned_ids:
                raise CellConfigError(ppath, f"VC {vc}: unknown pinnedCellId {pid!r}")
            if pid in used_pins:
                raise CellConfigError(
                    ppath, f"VC {vc}: pinned cell {pid} is already pinned by VC {used_pins[pid]}"
                )
            used_pins[pid] = vc
            pins.append(pid)
        out[vc] = VirtualClusterSpec(vc, tuple(cells), tuple(pins))
    return out


def _check_assignment(config: CellConfig, path: str) -> None:
    # Imported on first use: the buddy count is the allocator's, and importing the
    # loader (as the YAML models do) need not load the allocator.
    from fleet.core.cells import allocator, topology

    topo = topology.Topology(config)
    alloc = allocator.Allocator(topo, config)
    # Report the highest level first: a shortage there is the cause of any below.
    shortages = sorted(
        ((-level, chain, vc, count))
        for vc, doomed in alloc.doomed_by_chain_level().items()
        for (chain, level), count in doomed.items()
    )
    if not shortages:
        return
    neg_level, chain, vc, count = shortages[0]
    level = -neg_level
    ct = topo.chain_types[chain][level - 1]
    where = next(
        (c.path for c in config.vcs[vc].cells if c.chain == chain and c.cell_type == ct.name),
        _join(path, vc),
    )
    raise CellConfigError(
        where,
        f"illegal initial VC assignment: insufficient physical cells: VC {vc} is owed "
        f"{count} more {ct.name} cell(s) (level {level}) in chain {chain} than the "
        "physical cells can provide",
    )
