"""The service: the shell that runs the core against a database and member clusters.

Theory of operation: the pure core (:mod:`fleet.core`) decides; this package
runs it.  :mod:`~fleet.service.wiring` assembles one service from its
:mod:`~fleet.service.settings` (database, quota tree, members, placers) and
starts the scheduler loop (:mod:`~fleet.service.loop`), which feeds the core
the jobs :mod:`~fleet.service.intake` accepted and the reports of the members,
writes what the core decided through the store, and acts on the members, as
stages that return data: :mod:`~fleet.service.restart`,
:mod:`~fleet.service.inbox`, :mod:`~fleet.service.journal`,
:mod:`~fleet.service.effects` and :mod:`~fleet.service.views`.
:mod:`~fleet.service.admin` changes the quota tree, the clusters and the nodes
through the loop; :mod:`~fleet.service.failover` stores failover's clocks and
purges (its decisions are :mod:`fleet.core.failover`'s);
:mod:`~fleet.service.leadership` elects one leading replica on PostgreSQL;
:mod:`~fleet.service.telemetry` and :mod:`~fleet.service.collector` measure;
:mod:`~fleet.service.workers` runs CPU work in other processes;
:mod:`~fleet.service.columns` fixes the words and order of the queue and job
tables every view above uses (pure constants and formatting).  The HTTP API,
the simulator and the CLI sit above this package; the store, the member
backends and the YAML models below it.
"""
