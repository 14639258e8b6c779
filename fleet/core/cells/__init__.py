"""HiveD-style cell allocation for one member cluster (pure core).

Theory of operation: :mod:`.config` validates a HiveD cell config into frozen
specs; :mod:`.topology` links the physical cells into chains with levels;
:mod:`.allocator` keeps buddy free lists, VCs' owed virtual cells and the VC
safety count; :mod:`.placer` answers the scheduling cycle's questions as a
:class:`fleet.core.placement.Placer` (:class:`CellPlacer`), a facade over the
placer's state (:mod:`.state`) and the modules that work on it: what a gang
needs (:mod:`.demands`), answering ``fit`` (:mod:`.fitting`) by searching a
VC (:mod:`.vc_search`) or the shared pool (:mod:`.shared_search`) and packing
pods under one cell (:mod:`.packing`), preemption (:mod:`.victims`), leaf
owners (:mod:`.ownership`), committing a fit (:mod:`.binding`), holding
recorded placements after a restart (:mod:`.restoring`), bad nodes
(:mod:`.health`) and the recounts behind ``check_invariants``
(:mod:`.invariants`).
"""

from fleet.core.cells.config import CellConfig, load_cell_config, load_hived_file_dict
from fleet.core.cells.demands import leaf_cells_needed
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.spec import CellConfigError
from fleet.core.cells.state import CellFit

__all__ = [
    "CellConfig",
    "CellConfigError",
    "CellFit",
    "CellPlacer",
    "leaf_cells_needed",
    "load_cell_config",
    "load_hived_file_dict",
]
