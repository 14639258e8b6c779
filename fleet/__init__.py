"""Fleet: multi-cluster queueing and quota federation for GPU training jobs.

Theory of operation: :mod:`fleet.core` is the pure scheduling core (no I/O, no
clock); :mod:`fleet.manifests` reads the YAML objects into core values and
:mod:`fleet.cli` is the ``fleet`` command.  Package ``__init__`` files hold
only a docstring: names are imported from the modules that define them.  The
one exception is below: before any module of the core is imported, the
compiled core is put in place when its build is current
(:mod:`fleet.compiled_core`).
"""

from fleet.compiled_core import install

install()
