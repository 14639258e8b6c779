"""HiveD-style cell allocation for one member cluster (pure core).

Theory of operation: :mod:`.config` validates a HiveD cell config into frozen
specs; :mod:`.topology` links the physical cells into chains with levels;
:mod:`.allocator` keeps buddy free lists, VCs' owed virtual cells and the VC
safety count; :mod:`.placer` answers the scheduling cycle's questions as a
:class:`fleet.core.placement.Placer` (:class:`.placer.CellPlacer`), a facade over the
placer's state (:mod:`.state`) and the modules that work on it: what a gang
needs (:mod:`.demands`), answering ``fit`` (:mod:`.fitting`) by searching a
VC (:mod:`.vc_search`) or the shared pool (:mod:`.shared_search`) and packing
pods under one cell (:mod:`.packing`), preemption (:mod:`.victims`), leaf
owners (:mod:`.ownership`), committing a fit (:mod:`.binding`), holding
recorded placements after a restart (:mod:`.restoring`), bad nodes
(:mod:`.health`) and the recounts behind ``check_invariants``
(:mod:`.invariants`).

This file only documents the package: import each name from the module that
defines it, so that importing one module (the loader, say) does not load the
allocator and the placer.
"""
