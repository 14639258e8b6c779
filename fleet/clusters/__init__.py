"""Member cluster backends behind one small async interface.

:mod:`.base` holds the interface (:class:`~fleet.clusters.base.MemberCluster`),
what is sent to a member (:class:`~fleet.clusters.base.DispatchedJob`), the
events a member reports and the error family; :mod:`.sim` runs jobs in
process on an injected clock (simulated clusters and the trace simulator).
"""
