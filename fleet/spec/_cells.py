"""Validation of a MemberCluster's ``spec.cells`` (HiveD cell config).

Theory of operation: the cell config belongs to the core's allocator
(``fleet.core.cells``), which owns its rules; this module only turns that
loader's error into a ``(path, message)`` problem.  Until the core's loader
exists it checks the top-level shape that every HiveD config has
(``physicalCluster`` with ``cellTypes`` and ``physicalCells``; optional
``virtualClusters``), so nothing here ever fails to import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.spec.errors import Problem

_TOP_LEVEL = frozenset({"physicalCluster", "virtualClusters"})
_PHYSICAL = frozenset({"skuTypes", "cellTypes", "physicalCells"})


def problems(cells: Mapping[str, Any], path: str = "spec.cells") -> list[Problem]:
    """Problems in a HiveD cell config, with paths under ``path``."""
    # TODO(lead): call fleet.core.cells.config.load_cell_config(cells, path=path) and map
    # CellConfigError(.path, message) to (e.path, str(e)) once that module exists.
    out: list[Problem] = []
    for key in sorted(set(cells) - _TOP_LEVEL):
        out.append((f"{path}.{key}", "unknown field; expected physicalCluster, virtualClusters"))
    physical = cells.get("physicalCluster")
    if not isinstance(physical, Mapping):
        out.append((f"{path}.physicalCluster", "required: a mapping"))
        return out
    for key in sorted(set(physical) - _PHYSICAL):
        out.append((f"{path}.physicalCluster.{key}", "unknown field"))
    if not isinstance(physical.get("cellTypes"), Mapping):
        out.append((f"{path}.physicalCluster.cellTypes", "required: a mapping"))
    if not isinstance(physical.get("physicalCells"), list):
        out.append((f"{path}.physicalCluster.physicalCells", "required: a list"))
    if "skuTypes" in physical and not isinstance(physical["skuTypes"], Mapping):
        out.append((f"{path}.physicalCluster.skuTypes", "must be a mapping"))
    vcs = cells.get("virtualClusters")
    if vcs is not None and not isinstance(vcs, Mapping):
        out.append((f"{path}.virtualClusters", "must be a mapping"))
    return out
