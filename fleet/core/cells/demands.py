"""What a gang asks of the cells: leaf cells per pod, leaf types to try, lowest level.

Theory of operation: a pod's request becomes a number of leaf cells — its GPUs
without ``skuTypes``, with them the largest of ``ceil(gpu/sku.gpu)``,
``ceil(cpu/sku.cpu)`` and ``ceil(memory/sku.memory)`` (None: a pod asking GPUs
of a CPU-only sku does not fit).  A gang's *demands* are ``(pod index, leaf
cells)`` pairs, largest first, which is the order every packing places pods in.
The leaf types tried are the job's (:attr:`~fleet.core.jobs.Job.gpu_types`:
its one type, or its several in its order) or every leaf type in order of
first appearance; chains come from the topology.  Because cells of one level
of a chain all hold the same number of leaves, the lowest level that can hold
``n`` leaves is a lookup in the allocator's per-level weights — a bound that
the cycle (``lowest_level``) and the searches use without packing anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fleet.core import resources
from fleet.core.cells.spec import SkuType
from fleet.core.cells.state import PlacerState
from fleet.core.jobs import Job, Pod


def leaf_cells_needed(request: resources.Amounts, sku: object | None) -> int | None:
    """Leaf cells a pod needs: its GPUs, or with a skuType the max ratio over gpu/cpu/memory.

    Each resource is divided by its own amount in the sku; a resource the sku has
    none of is ignored, except GPUs: a pod asking GPUs of a sku without any does
    not fit (None).
    """
    gpus = request.get(resources.GPU, 0)
    if sku is None:
        return gpus
    if not isinstance(sku, SkuType):
        raise TypeError(f"sku must be a SkuType or None, not {type(sku).__name__}")
    need = 0
    for name, per in (
        (resources.GPU, sku.gpu),
        (resources.CPU, sku.cpu),
        (resources.MEMORY, sku.memory),
    ):
        amount = request.get(name, 0)
        if amount <= 0:
            continue
        if per <= 0:
            if name == resources.GPU:
                return None
            continue
        need = max(need, math.ceil(amount / per))
    return need


def demands(
    state: PlacerState, pods: Sequence[Pod], leaf_type: str
) -> list[tuple[int, int]] | None:
    """(pod index, leaf cells) sorted by leaf cells, largest first (None: a pod cannot fit)."""
    sku = state.config.sku_types.get(leaf_type)
    out: list[tuple[int, int]] = []
    for i, pod in enumerate(pods):
        n = leaf_cells_needed(pod.request, sku)
        if n is None:
            return None
        out.append((i, n))
    out.sort(key=lambda d: -d[1])
    return out


def leaf_types(state: PlacerState, job: Job) -> list[str]:
    """Leaf types ``job`` may use here, in the order they are tried."""
    chains = state.topo.leaf_chains
    wanted = job.gpu_types
    types = list(wanted) if wanted else list(state.config.leaf_types)
    return [t for t in types if chains.get(t)]


def lowest_level_in(state: PlacerState, chain: str, need: int) -> int:
    """The lowest level of ``chain`` whose cells hold ``need`` leaves (top + 1 if none)."""
    weights = state.alloc.weight[chain]
    for level in range(1, len(weights)):
        if weights[level] >= need:
            return level
    return len(weights)


def lowest_level(state: PlacerState, job: Job, pods: Sequence[Pod]) -> int:
    """A lower bound on the ``Fit.level`` this gang can get here (cheap, no search).

    The lowest common cell of a placement holds all its leaf cells, so its level is
    at least that of the smallest cell type (of any chain the job may use) with
    that many leaves; pods needing no leaf cells get level 0.
    """
    best: int | None = None
    for leaf_type in leaf_types(state, job):
        sku = state.config.sku_types.get(leaf_type)
        need = 0
        for pod in pods:
            n = leaf_cells_needed(pod.request, sku)
            if n is None:
                break
            need += n
        else:
            if need == 0:
                return 0
            for chain in state.topo.leaf_chains[leaf_type]:
                level = max(0, lowest_level_in(state, chain, need) - 1)
                if best is None or level < best:
                    best = level
    return 0 if best is None else best
