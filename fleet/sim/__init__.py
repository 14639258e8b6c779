"""The trace-driven simulator: the service's own loop, store and ``sim`` members on a virtual clock.

:mod:`.traces` reads job traces, :mod:`.layout` sizes clusters and quota
from a trace, :mod:`.load` measures and rescales a trace's offered load on
them, :mod:`.policies` turns a policy name into a configuration of
the core, :mod:`.engine` replays a trace through
:class:`fleet.service.loop.SchedulerLoop`, and :mod:`.report` writes what came out.
:mod:`.backlog` builds the benchmarks' synthetic quota tree and gangs.
"""
