"""Workload kinds: every training job kind Fleet runs, one module per kind.

Theory of operation: a kind module holds two halves of one kind, behind the
interface of :mod:`.base` (Kueue's GenericJob is the model).

* The *document* half is a tolerant pydantic model (a subclass of
  :class:`~.base.WorkloadModel`) that reads what Fleet needs: the pod sets
  (roles, counts, each pod's requests, the gang's minimum per set and in
  total), the queue and priority class fields, elasticity where the kind has
  it.  :mod:`fleet.manifests.convert` turns it into a core
  :class:`~fleet.core.jobs.Job`: the core sees pod sets, never a kind.
* The *member* half (a :class:`~.base.Kind`) is pure functions over JSON:
  the object Fleet creates in a member from the submitted one (pod counts and
  pod templates, which :mod:`fleet.clusters.kube.objects` decorates with
  Fleet's labels, scheduler and planned nodes), the merge patch of a resize,
  the member object's phase from its status, and which planned pod a member
  pod is.

:mod:`.registry` lists the kinds; the rest of Fleet reaches a kind only
through it.
"""
