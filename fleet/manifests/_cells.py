"""Validation of a MemberCluster's ``spec.cells`` (HiveD cell config).

Theory of operation: the cell config belongs to the core's allocator
(:mod:`fleet.core.cells.config`), which owns its rules and reports the first
problem as a :class:`~fleet.core.cells.spec.CellConfigError` with a dotted
field path.  This module only turns that error into a ``(path, message)``
problem, so the spec layer never duplicates the allocator's rules.  The one
check of its own is a size limit (:data:`MAX_LEAF_CELLS`), made before the
allocator expands the physical cells: a mistyped ``childCellNumber`` must be
an error, not an exhausted memory.  The allocator's messages quote config
values in full; a long one is cut to a short prefix here
(:func:`fleet.manifests.errors.shorten_quoted`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from fleet.core.cells import config
from fleet.core.cells.spec import CellConfig, CellConfigError
from fleet.manifests.errors import MAX_QUOTED, Problem, shorten, shorten_quoted


def load(cells: Mapping[str, Any], path: str = "spec.cells") -> CellConfig:
    """The validated cell config; raises CellConfigError."""
    return config.load_cell_config(cells, path=path)


#: Leaf cells (GPUs) one member cluster may have.  The allocator expands every
#: physical cell, so a typo such as ``childCellNumber: 80000000`` must be refused
#: before it is expanded (it would exhaust memory).
MAX_LEAF_CELLS: Final = 100_000


def _leaf_count(cell_types: Mapping[Any, Any], name: object, seen: frozenset[object]) -> int:
    """Leaf cells under one cell of type ``name`` (1 for a leaf), capped above the limit.

    Malformed entries count as leaves: the allocator reports them properly.
    """
    spec = cell_types.get(name) if isinstance(name, str) else None
    if not isinstance(spec, Mapping) or name in seen:
        return 1
    number = spec.get("childCellNumber")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        return 1
    below = _leaf_count(cell_types, spec.get("childCellType"), seen | {name})
    return min(number * below, MAX_LEAF_CELLS + 1)


def size_problems(cells: Mapping[str, Any], path: str = "spec.cells") -> list[Problem]:
    """A problem if the physical cells would expand to more than MAX_LEAF_CELLS leaves."""
    pc = cells.get("physicalCluster")
    if not isinstance(pc, Mapping):
        return []
    cell_types, physical = pc.get("cellTypes"), pc.get("physicalCells")
    if not isinstance(cell_types, Mapping) or not isinstance(physical, list):
        return []
    total = 0
    for i, cell in enumerate(physical):
        if not isinstance(cell, Mapping):
            continue
        name = cell.get("cellType")
        count = _leaf_count(cell_types, name, frozenset())
        total += count
        if total > MAX_LEAF_CELLS:
            limit = f"{MAX_LEAF_CELLS:_}"
            if count > MAX_LEAF_CELLS:  # the exact figure, not the capped one
                count = _exact_leaf_count(cell_types, name)
                what = f"cell type {shorten(str(name))} has {count} leaf cells"
            else:
                what = f"physicalCells[0..{i}] have more than {limit} leaf cells"
            msg = f"{what}; a member cluster may have at most {limit} (check childCellNumber)"
            return [(f"{path}.physicalCluster.physicalCells[{i}]", msg)]
    return []


def _exact_leaf_count(cell_types: Mapping[Any, Any], name: object) -> int:
    count, seen = 1, set()
    while isinstance(name, str) and name not in seen:
        spec = cell_types.get(name)
        if not isinstance(spec, Mapping):
            break
        number = spec.get("childCellNumber")
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            break
        seen.add(name)
        count *= number
        name = spec.get("childCellType")
    return count


def problems(cells: Mapping[str, Any], path: str = "spec.cells") -> list[Problem]:
    """Problems in a HiveD cell config, with paths under ``path``."""
    too_big = size_problems(cells, path)
    if too_big:
        return too_big
    try:
        load(cells, path)
    except CellConfigError as e:
        message = e.message
        for text in _long_strings(cells):
            message = shorten_quoted(message, text)
        return [(e.path, message)]
    return []


def _long_strings(value: object) -> Iterator[str]:
    """Every string key or value longer than MAX_QUOTED in a YAML tree, longest first."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if len(item) > MAX_QUOTED:
                found.add(item)
        elif isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    # Longest first: a long value that contains a shorter one is cut before it.
    yield from sorted(found, key=len, reverse=True)
