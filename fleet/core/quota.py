"""The hierarchical quota tree (ElasticQuotaTree semantics) and its usage.

API CONTRACT (implementation to be filled in; signatures are fixed because the
scheduling cycle, the spec loader and the CLI call them):

    QuotaNodeSpec            frozen input node (built by fleet.spec from YAML)
    QuotaError(ValueError)   .path (dotted field path), .node, message names node+resource
    QuotaBlock               why a request does not fit; .reason is human readable
    QuotaTree.build(root) -> QuotaTree   (validates; .warnings lists non-fatal issues)
    tree.classify(queue, request, priority=, preemptible=) -> Mode | QuotaBlock
    tree.admit(key, queue, request, mode, priority=, seq=, preemptible=)
    tree.release(key)
    tree.reclaim_victims(queue, request) -> list[str] | None
    tree.queue_victims(queue, request, priority) -> list[str] | None
    tree.set_node(name, min=, max=, namespaces=)
    tree.check_invariants()
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.core.resources import ZERO, Resources


@dataclass(frozen=True, slots=True)
class QuotaNodeSpec:
    """One node of an ElasticQuotaTree as written (already parsed to exact values).

    ``max`` of None means the node sets no limit of its own; a ``max`` that
    names some resources limits only those.  ``path`` is the field path of the
    node in its document (``spec.root.children[0]``) for error messages.
    """

    name: str
    min: Resources = ZERO
    max: Resources | None = None
    namespaces: tuple[str, ...] = ()
    children: tuple[QuotaNodeSpec, ...] = ()
    path: str = "spec.root"
