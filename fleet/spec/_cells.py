"""Validation of a MemberCluster's ``spec.cells`` (HiveD cell config).

Theory of operation: the cell config belongs to the core's allocator
(:mod:`fleet.core.cells.config`), which owns its rules and reports the first
problem as a :class:`~fleet.core.cells.spec.CellConfigError` with a dotted
field path.  This module only turns that error into a ``(path, message)``
problem, so the spec layer never duplicates the allocator's rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.core.cells import config
from fleet.core.cells.spec import CellConfigError
from fleet.spec.errors import Problem


def load(cells: Mapping[str, Any], path: str = "spec.cells") -> config.CellConfig:
    """The validated cell config; raises CellConfigError."""
    return config.load_cell_config(cells, path=path)


def problems(cells: Mapping[str, Any], path: str = "spec.cells") -> list[Problem]:
    """Problems in a HiveD cell config, with paths under ``path``."""
    try:
        load(cells, path)
    except CellConfigError as e:
        return [(e.path, e.message)]
    return []
