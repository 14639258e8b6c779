"""The hub: a Kubernetes API server as Fleet's second front door.

With ``fleet serve --hub-kubeconfig FILE`` users apply ElasticQuotaTree,
PropagationPolicies and their jobs (every workload kind Fleet runs) to a hub
cluster with kubectl, as on ACK One's fleet, Karmada or MultiKueue's manager,
and see there what Fleet does with them: a ``Queue`` object per quota-tree
node in ``kube-queue``, each job's status (Fleet's conditions, then its
member's), and Events (the binding, waiting reasons, preemption, failover,
refusals).  The HTTP API and CLI work beside it on the same store.

- :mod:`fleet.hub.objects`: the hub's objects as plain JSON (pure): what is
  read from them, what is written on them.
- :mod:`fleet.hub.jobs`: hub jobs in: finalizer, submission, cancel.
- :mod:`fleet.hub.config`: the hub's PropagationPolicies (stored) and
  ElasticQuotaTree (applied).
- :mod:`fleet.hub.status`: statuses, Events and Queue objects out.
- :mod:`fleet.hub.events`: the one writer on the hub, bounded in flight.
- :mod:`fleet.hub.controller`: the watches, in order, run while this replica
  schedules.
"""
