"""A member's HiveD cells built from its Nodes' labels, and virtual clusters from requests.

Theory of operation: a MemberCluster may describe its topology instead of
listing cells (``spec.topology``): the ordered label keys of its levels,
widest first (zone, block, rack; the node is always the last level), the
label that groups GPUs inside a node, and a label selector of the nodes that
count.  :func:`physical_cluster` turns a list of nodes (:class:`Node`: name,
labels, capacity; a simulated member's ``spec.nodes``, a real member's Node
objects) into the ``physicalCluster`` mapping a hand-written config would
hold, so the allocator's own loader (:mod:`fleet.core.cells.config`) checks
and expands it exactly as it does a hand-written one.

- **GPU types.**  A node's GPUs are ``nvidia.com/gpu`` of the product its
  label ``nvidia.com/gpu.product`` names (``fleet.io/gpu-type`` if absent,
  else ``GPU``); a node with several products lists each as its own resource
  ``gpu.fleet.io/<product>`` (then ``nvidia.com/gpu`` is their total and is
  not read), and each becomes its own cell type, its GPU indices following
  the first product's.  A product is one leaf cell type (its name made safe
  for cell type paths, ``-2`` added when two products read alike; its typed
  quota is ``gpu.fleet.io/<that name>``) whose skuType holds one GPU, the smallest share of
  cpu and memory per GPU among its nodes, and the ``nvidia.com/gpu.*`` labels
  all its nodes agree on (``nvidia.com/gpu.memory`` in MiB, the family...):
  the attributes a job's node affinity is matched against.
- **Levels.**  Nodes are grouped by the value of each level's label, widest
  first; a node without a level's label is a group of its own at that level.
  A cell type is a product, a level and a shape: cells of one type hold the
  same number of children of one type, as HiveD's buddy allocation needs,
  so a group whose children differ in shape (a rack of 3 nodes beside racks
  of 4) becomes one cell per shape.  Type names read
  ``<product>-<level><GPUs>`` (``H100-rack32``); the cells of the widest level
  are the top-level cells, addressed by their label value (``~2``, ``~3``
  when a value recurs), and node-level cells by the node's name.
- **GPU groups.**  ``gpuGroup`` names a label whose value is the number of
  GPUs in each NVLink or NUMA group of the node (a divisor of its GPU
  count); the groups become a level between the node and its GPUs.
- **CPU-only nodes** count only when the topology's ``nodeSelector`` is given
  and selects them (without one, the nodes with GPUs count: a control plane
  node must not take jobs' pods); each is a node-level cell of one leaf whose
  skuType has its whole cpu and memory (:mod:`fleet.core.cells.spec`'s
  CPU-only node pools).

Virtual clusters are requests in the member's own terms (:class:`Request`):
``nodes: N`` (node-level cells) or ``gpus: N`` (leaf cells), of the chains
whose every node the request's ``nodeSelector`` selects, optionally
``within`` one cell of a level (then exactly one cell of that level holding
N nodes or GPUs).  :func:`virtual_clusters` turns them into HiveD virtual
cells with the allocator's buddy count per chain (a cell of a level is free,
or split from a free cell above), chains in order, each request taking what
it can from the first chains; what cannot be held is an :class:`Unmet`
with its reason, which a strict caller (a simulated member's own node list,
``PUT /api/v1/clusters``, ``fleet check``) raises as a
:class:`~fleet.core.cells.spec.CellConfigError` at the request's path, and a
real member's watch reports while the VC keeps what could be held.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleet.core import resources
from fleet.core.cells import config as loader
from fleet.core.cells.spec import CellConfig, CellConfigError, VirtualClusterSpec

GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_TYPE_LABEL: Final = "fleet.io/gpu-type"
GPU_LABEL_PREFIX: Final = "nvidia.com/gpu."
#: The product of GPUs whose node names none.
UNNAMED_PRODUCT: Final = "GPU"
#: A level key that names the node itself (the node is always the last level).
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"

Selector = Callable[[Mapping[str, str]], bool]


@dataclass(frozen=True, slots=True)
class Node:
    """One node as the topology reads it (capacity: parsed amounts by resource)."""

    name: str
    labels: Mapping[str, str]
    capacity: resources.Resources
    path: str = ""  # where it was given (``spec.nodes[3]``), for errors


@dataclass(frozen=True, slots=True)
class Topology:
    """``spec.topology``: level label keys widest first, GPU group label, node selector."""

    levels: tuple[str, ...] = ()
    gpu_group: str | None = None
    #: None: the nodes with GPUs; a selector: the nodes it selects, CPU-only ones too.
    node_selector: Selector | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a virtual cluster (exactly one of ``nodes`` and ``gpus``)."""

    nodes: int | None
    gpus: int | None
    selector: Selector | None
    within: str | None
    path: str


@dataclass(frozen=True, slots=True)
class Unmet:
    """What a VC request asked and what the member could hold of it, and why."""

    vc: str
    path: str
    asked: str
    held: int
    reason: str

    def message(self) -> str:
        return f"virtual cluster {self.vc} asks {self.asked}: {self.reason}"


@dataclass(slots=True)
class _Cell:
    type: str
    address: str
    children: list[_Cell]
    nodes: list[Node]  # the nodes under it (one for node level and below)
    leaves: int
    level: str  # the level's name: a label key, "node", "group" or "gpu"
    first_gpu: int = 0  # node level: index of its first GPU

    def to_raw(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cellType": self.type, "cellAddress": self.address}
        if self.children:
            out["cellChildren"] = [c.to_raw() for c in self.children]
        return out


@dataclass(slots=True)
class Built:
    """A built physical cluster: the loader's mapping, and its cells for VC requests."""

    physical: dict[str, Any]
    tops: list[_Cell] = field(default_factory=list)
    #: chain (top cell type) -> cell types from the top down to the leaf
    chain_types: dict[str, list[str]] = field(default_factory=dict)
    #: cell type -> its level name, child count, leaves and nodes per cell
    shape: dict[str, tuple[str, int, int, int]] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.tops


_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_-]+")


def type_name(text: str) -> str:
    """A product or label made safe for a cell type name (no ``.``: it joins type paths)."""
    return _UNSAFE.sub("-", text).strip("-") or UNNAMED_PRODUCT


def level_name(key: str) -> str:
    """The short name of a level label key (``topology.kubernetes.io/zone`` -> ``zone``)."""
    tail = key.rsplit("/", 1)[-1]
    return type_name(tail.rsplit(".", 1)[-1] or tail)


def gpu_sets(node: Node) -> list[tuple[str, int]]:
    """``(product, GPUs)`` of a node: its ``gpu.fleet.io/<product>`` resources, or
    ``nvidia.com/gpu`` of its labelled product."""
    typed = sorted(
        (name.removeprefix(resources.TYPED_GPU_PREFIX), amount)
        for name, amount in node.capacity.items()
        if name.startswith(resources.TYPED_GPU_PREFIX) and amount > 0
    )
    if typed:
        return typed
    gpus = node.capacity.get(resources.GPU, 0)
    if gpus <= 0:
        return []
    product = node.labels.get(GPU_PRODUCT_LABEL) or node.labels.get(GPU_TYPE_LABEL)
    return [(product or UNNAMED_PRODUCT, gpus)]


def counted(topology: Topology, nodes: Iterable[Node]) -> list[Node]:
    """The nodes that count, sorted by name."""
    out: list[Node] = []
    for node in nodes:
        if topology.node_selector is None:
            if gpu_sets(node):
                out.append(node)
        elif topology.node_selector(node.labels):
            out.append(node)
    return sorted(out, key=lambda n: n.name)


class _Types:
    """Cell types by structure, named on first use (deterministic for one node list)."""

    def __init__(self) -> None:
        self.raw: dict[str, dict[str, Any]] = {}
        self.by_shape: dict[tuple[str, str, int, bool], str] = {}
        self.shape: dict[str, tuple[str, int, int, int]] = {}

    def get(
        self, base: str, level: str, child: str, number: int, leaves: int, nodes: int, node: bool
    ) -> str:
        key = (level, child, number, node)
        name = self.by_shape.get(key)
        if name is not None:
            return name
        stem = f"{base}-{level_name(level)}"
        name = f"{stem}{leaves}"
        n = 1
        while name in self.raw:
            n += 1
            name = f"{stem}{leaves}-{n}"
        self.raw[name] = {"childCellType": child, "childCellNumber": number}
        if node:
            self.raw[name]["isNodeLevel"] = True
        self.by_shape[key] = name
        self.shape[name] = (level, number, leaves, nodes)
        return name


def physical_cluster(topology: Topology, nodes: Sequence[Node]) -> Built:
    """The ``physicalCluster`` mapping of the nodes that count (see the module docstring).

    Problems of single nodes (a GPU group that does not divide the GPUs, GPUs
    without cpu or memory) are collected in ``Built.problems`` and the node is
    built without that detail (groups) or left out (no cpu/memory share).
    """
    levels = tuple(k for k in topology.levels if k != HOSTNAME_LABEL)
    built = Built(physical={})
    types = _Types()
    skus: dict[str, dict[str, Any]] = {}
    per_product: dict[str, list[tuple[Node, int, int]]] = {}  # product -> (node, gpus, first)
    shares: dict[str, list[tuple[int, int]]] = {}
    cpu_nodes: list[Node] = []
    for node in counted(topology, nodes):
        sets = gpu_sets(node)
        if not sets:
            cpu_nodes.append(node)
            continue
        total = sum(n for _, n in sets)
        first = 0
        for product, gpus in sets:
            per_product.setdefault(product, []).append((node, gpus, first))
            shares.setdefault(product, []).append(
                (
                    node.capacity.get(resources.CPU, 0) // total,
                    node.capacity.get(resources.MEMORY, 0) // total,
                )
            )
            first += gpus
    tops: list[_Cell] = []
    leaves: set[str] = set()
    for product in sorted(per_product):
        leaf = stem = type_name(product)
        n = 1
        while leaf in leaves:  # two products made alike by type_name ("A100.40GB", "A100-40GB")
            n += 1
            leaf = f"{stem}-{n}"
        leaves.add(leaf)
        cpu = min(c for c, _ in shares[product])
        memory = min(m for _, m in shares[product])
        sku: dict[str, Any] = {"gpu": 1, "labels": _shared_labels(product, per_product[product])}
        if cpu > 0:
            sku["cpu"] = f"{cpu}m"
        if memory > 0:
            sku["memory"] = memory
        skus[leaf] = sku
        cells = [
            _node_cell(built, types, topology, leaf, node, gpus, first)
            for node, gpus, first in per_product[product]
        ]
        tops.extend(_group(types, leaf, levels, 0, cells))
    for node in cpu_nodes:
        cpu = node.capacity.get(resources.CPU, 0)
        memory = node.capacity.get(resources.MEMORY, 0)
        if cpu <= 0 and memory <= 0:
            built.problems.append((node.path, f"node {node.name} has no GPU, cpu or memory"))
            continue
        sku_name = type_name(f"CPU-{cpu}m-{memory}")
        skus.setdefault(sku_name, {"cpu": f"{cpu}m", "memory": memory})
        ctype = types.get(sku_name, "node", sku_name, 1, 1, 1, True)
        leaf_cell = _Cell(sku_name, "0", [], [node], 1, "gpu")
        tops.append(_Cell(ctype, node.name, [leaf_cell], [node], 1, "node"))
    _unique_addresses(tops)
    built.tops = tops
    built.shape = types.shape
    built.physical = {
        "skuTypes": skus,
        "cellTypes": types.raw,
        "physicalCells": [top.to_raw() for top in tops],
    }
    for top in tops:
        if top.type not in built.chain_types:
            chain: list[str] = []
            cell: _Cell | None = top
            while cell is not None:
                chain.append(cell.type)
                cell = cell.children[0] if cell.children else None
            built.chain_types[top.type] = chain
    return built


def _shared_labels(product: str, nodes: Sequence[tuple[Node, int, int]]) -> dict[str, str]:
    """The ``nvidia.com/gpu.*`` labels every node of a product agrees on, and the product."""
    shared: dict[str, str] | None = None
    for node, _, _ in nodes:
        mine = {k: v for k, v in node.labels.items() if k.startswith(GPU_LABEL_PREFIX)}
        if len(gpu_sets(node)) > 1:  # several products: the labels describe none of them
            mine = {}
        shared = mine if shared is None else {k: v for k, v in shared.items() if mine.get(k) == v}
    out = dict(sorted((shared or {}).items()))
    out[GPU_PRODUCT_LABEL] = product
    return out


def _node_cell(
    built: Built, types: _Types, topology: Topology, leaf: str, node: Node, gpus: int, first: int
) -> _Cell:
    group = 0
    if topology.gpu_group is not None and topology.gpu_group in node.labels:
        text = node.labels[topology.gpu_group]
        size = int(text) if text.isdigit() else 0
        if 1 <= size <= gpus and gpus % size == 0:
            group = size
        else:
            built.problems.append(
                (
                    f"{node.path}.labels.{topology.gpu_group}" if node.path else node.name,
                    f"node {node.name}: GPU group size {text!r} must be a whole number "
                    f"dividing its {gpus} GPUs ({leaf}); the node is built without groups",
                )
            )
    leaves = [_Cell(leaf, str(first + i), [], [node], 1, "gpu") for i in range(gpus)]
    if group and group < gpus:
        gtype = types.get(leaf, "group", leaf, group, group, 1, False)
        groups = [
            _Cell(gtype, str(i), leaves[i * group : (i + 1) * group], [node], group, "group")
            for i in range(gpus // group)
        ]
        ntype = types.get(leaf, "node", gtype, len(groups), gpus, 1, True)
        return _Cell(ntype, node.name, groups, [node], gpus, "node", first)
    ntype = types.get(leaf, "node", leaf, gpus, gpus, 1, True)
    return _Cell(ntype, node.name, leaves, [node], gpus, "node", first)


def _group(
    types: _Types, leaf: str, levels: Sequence[str], depth: int, cells: list[_Cell]
) -> list[_Cell]:
    """The cells of level ``depth`` over node cells ``cells`` (sorted by node name)."""
    if depth == len(levels):
        return cells
    key = levels[depth]
    groups: dict[str, list[_Cell]] = {}
    for cell in cells:
        value = cell.nodes[0].labels.get(key)
        groups.setdefault(value if value else f"{cell.address}", []).append(cell)
    out: list[_Cell] = []
    for value in sorted(groups):
        children = _group(types, leaf, levels, depth + 1, groups[value])
        by_type: dict[str, list[_Cell]] = {}
        for child in children:
            by_type.setdefault(child.type, []).append(child)
        for ctype, kids in by_type.items():
            leaves = sum(k.leaves for k in kids)
            nodes = [n for k in kids for n in k.nodes]
            ptype = types.get(leaf, key, ctype, len(kids), leaves, len(nodes), False)
            out.append(_Cell(ptype, value, kids, nodes, leaves, key))
    return out


def _unique_addresses(cells: list[_Cell]) -> None:
    """Make sibling addresses unique (``value~2``...), recursively above node level."""
    seen: dict[str, int] = {}
    for cell in cells:
        if cell.level in ("node", "group", "gpu"):
            continue
        n = seen.get(cell.address, 0) + 1
        seen[cell.address] = n
        if n > 1:
            cell.address = f"{cell.address}~{n}"
        _unique_addresses(cell.children)


# -- virtual clusters as requests -----------------------------------------------------------


def virtual_clusters(
    built: Built, requests: Mapping[str, Sequence[Request]]
) -> tuple[dict[str, Any], list[Unmet]]:
    """HiveD ``virtualClusters`` for the requests, and what could not be held."""
    free: dict[str, list[int]] = {}
    for chain, chain_types in built.chain_types.items():
        counts = [0] * len(chain_types)
        counts[0] = sum(1 for top in built.tops if top.type == chain)
        free[chain] = counts
    out: dict[str, Any] = {}
    short: list[Unmet] = []
    for vc, asks in requests.items():
        cells: dict[str, int] = {}
        for ask in asks:
            taken, reason = _hold(built, free, ask, cells)
            want = 1 if ask.within else (ask.nodes or ask.gpus or 0)
            if taken < want:
                short.append(Unmet(vc, ask.path, _asked(ask), taken, reason))
        out[vc] = {
            "virtualCells": [{"cellType": path, "cellNumber": n} for path, n in cells.items()]
        }
    return out, short


def _asked(ask: Request) -> str:
    what = f"{ask.nodes} node(s)" if ask.nodes is not None else f"{ask.gpus} GPU(s)"
    return what + (f" within one {level_name(ask.within)}" if ask.within else "")


def _take(free: list[int], numbers: Sequence[int], index: int, k: int) -> bool:
    """Take ``k`` free cells at ``index`` (0 = top) of a chain, splitting cells above."""
    if free[index] >= k:
        free[index] -= k
        return True
    if index == 0:
        return False
    need = k - free[index]
    per = numbers[index - 1]  # children of one cell above
    parents = math.ceil(need / per)
    if not _take(free, numbers, index - 1, parents):
        return False
    free[index] += parents * per - k
    return True


def _hold(
    built: Built, free: dict[str, list[int]], ask: Request, cells: dict[str, int]
) -> tuple[int, str]:
    """Take virtual cells for one request; how many units were held, and why not more."""
    want = ask.nodes if ask.nodes is not None else ask.gpus
    assert want is not None
    why: list[str] = []
    held = 0
    for chain, chain_types in built.chain_types.items():
        if held >= (1 if ask.within else want):
            break
        chain_nodes = [n for top in built.tops if top.type == chain for n in top.nodes]
        leaf = chain_types[-1]
        if leaf not in built.physical["skuTypes"] or not built.physical["skuTypes"][leaf].get(
            "gpu"
        ):
            continue  # CPU-only nodes
        if ask.selector is not None:
            picked = sum(1 for n in chain_nodes if ask.selector(n.labels))
            if picked == 0:
                continue
            if picked < len(chain_nodes):
                why.append(
                    f"the nodeSelector selects {picked} of the {len(chain_nodes)} nodes of "
                    f"cell type {chain} (a request takes a chain's cells where its nodes all match)"
                )
                continue
        numbers = [built.shape[t][1] for t in chain_types[:-1]]
        if ask.within:
            index = next(
                (
                    i
                    for i, t in enumerate(chain_types)
                    if built.shape.get(t, ("",))[0] == ask.within
                ),
                None,
            )
            if index is None:
                why.append(f"cell type {chain} has no {level_name(ask.within)} level")
                continue
            _, _, leaves, nodes = built.shape[chain_types[index]]
            size = nodes if ask.nodes is not None else leaves
            if size != want:
                unit = "nodes" if ask.nodes is not None else "GPUs"
                why.append(f"each {level_name(ask.within)} of {leaf} holds {size} {unit}")
                continue
            count = 1
        else:
            index = (
                next(i for i, t in enumerate(chain_types) if built.shape.get(t, ("",))[0] == "node")
                if ask.nodes is not None
                else len(chain_types) - 1
            )
            count = want - held
        got = 0
        counts = free[chain]
        while got < count:  # as many as this chain can still give, one by one
            trial = list(counts)
            if not _take(trial, numbers, index, 1):
                break
            counts[:] = trial
            got += 1
        if got < count:
            why.append(f"cell type {chain} has {got} more free")
        if got:
            path = ".".join(chain_types[: index + 1])
            cells[path] = cells.get(path, 0) + got
            held += got
    if not why:
        why.append("no cell type has nodes the request selects")
    return held, "; ".join(why)


# -- one member's cell config ---------------------------------------------------------------


def empty_config(vcs: Iterable[str]) -> CellConfig:
    """The cell config of a member whose nodes are not known yet (or count none)."""
    return CellConfig(
        sku_types={},
        cell_types={},
        physical_cells=(),
        vcs={vc: VirtualClusterSpec(vc, (), ()) for vc in vcs},
        leaf_types=(),
        chains=(),
    )


def node_keys(topology: Topology, nodes: Sequence[Node]) -> dict[str, tuple[object, ...]]:
    """Node -> what places it in the cells: its level values, GPU products and group.

    A node that counts in both of two builds with the same key keeps its GPU
    indices, and a job running there can be held again; a node whose key
    changed (relabelled, other GPUs) or that no longer counts has left.
    """
    levels = tuple(k for k in topology.levels if k != HOSTNAME_LABEL)
    group = topology.gpu_group
    return {
        node.name: (
            tuple(node.labels.get(k) for k in levels),
            tuple(gpu_sets(node)),
            node.labels.get(group) if group is not None else None,
            node.capacity.get(resources.CPU, 0),
            node.capacity.get(resources.MEMORY, 0),
        )
        for node in counted(topology, nodes)
    }


def cell_config(
    topology: Topology,
    nodes: Sequence[Node],
    requests: Mapping[str, Sequence[Request]],
    *,
    cells: Mapping[str, Any] | None = None,
    strict: bool,
    path: str = "spec",
) -> tuple[CellConfig, list[Unmet]]:
    """The member's cell config: hand-written ``cells`` where given, built elsewhere.

    ``cells.physicalCluster`` wins over the topology, ``cells.virtualClusters``
    over ``requests``.  ``strict``: a node problem or a request that cannot be
    held raises :class:`CellConfigError` at its path; otherwise the shortfalls
    are returned and the VCs hold what they can.
    """
    hand = dict(cells or {})
    if "physicalCluster" in hand:
        physical = hand["physicalCluster"]
        built = None
    else:
        built = physical_cluster(topology, nodes)
        if strict and built.problems:
            where, message = built.problems[0]
            raise CellConfigError(where, message)
        physical = built.physical
    short: list[Unmet] = []
    if "virtualClusters" in hand:
        vcs = hand["virtualClusters"]
    elif built is not None:
        vcs, short = virtual_clusters(built, requests)
    else:
        vcs = {}
        if requests:
            first = next(iter(requests.values()))
            where = first[0].path if first else f"{path}.virtualClusters"
            raise CellConfigError(
                where,
                "virtual cluster requests need spec.topology; with hand-written "
                "spec.cells.physicalCluster, write spec.cells.virtualClusters",
            )
    if strict and short:
        raise CellConfigError(short[0].path, short[0].message())
    if built is not None and built.empty:
        return empty_config(vcs), short
    config = loader.load_cell_config(
        {"physicalCluster": physical, "virtualClusters": vcs}, path=f"{path}.cells"
    )
    return config, short
