"""HiveD-style cell allocation for one member cluster (pure core).

Theory of operation: :mod:`.config` validates a HiveD cell config into frozen
specs; :mod:`.topology` links the physical cells into chains with levels;
:mod:`.allocator` keeps buddy free lists, VCs' owed virtual cells and the VC
safety count; :mod:`.placer` answers the scheduling cycle's questions as a
:class:`fleet.core.placement.Placer` (:class:`CellPlacer`).
"""

from fleet.core.cells.config import CellConfig, load_cell_config, load_hived_file_dict
from fleet.core.cells.placer import CellFit, CellPlacer, leaf_cells_needed
from fleet.core.cells.spec import CellConfigError

__all__ = [
    "CellConfig",
    "CellConfigError",
    "CellFit",
    "CellPlacer",
    "leaf_cells_needed",
    "load_cell_config",
    "load_hived_file_dict",
]
