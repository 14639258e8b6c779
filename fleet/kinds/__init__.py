"""Workload kinds: every training job kind Fleet runs, one module per kind.

Theory of operation: a kind module reads one kind's documents (its schema,
checked strictly, and the meaning of its fields) and says what the core
needs of it as :class:`~fleet.core.jobs.ReplicaGroup` pod sets, what object
Fleet creates for it in a member, how that object's status maps back to
Fleet's states and how a resize is written.  The core sees pod sets, never a
kind; the manifests and the members reach a kind only through
:mod:`fleet.kinds.registry`.
"""
