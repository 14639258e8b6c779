"""Builders for quota trees and requests, with defaults so a test shows only what matters.

``node(...)`` writes a tree the way its YAML reads (quantities as strings);
``tree(root)`` fills in field paths like the spec loader would and builds it.
``Ledger`` admits and releases jobs with increasing ``seq`` the way the
scheduling cycle does: classify first, then admit with the verdict.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping

from fleet.core.charges import Charge
from fleet.core.jobs import Mode
from fleet.core.quota import QuotaBlock, QuotaNodeSpec, QuotaTree
from fleet.core.resources import MAX_JOBS, Resources

Quantities = Mapping[str, str | int]


def res(quantities: Quantities | None = None, /, **kw: str | int) -> Resources:
    """A resource vector from YAML-like quantities; keyword names use ``_`` for ``-``."""
    values: dict[str, str | int] = dict(quantities or {})
    values.update({k.replace("_", "-"): v for k, v in kw.items()})
    return Resources.parse(values)


def req(quantities: Quantities | None = None, /, **kw: str | int) -> Resources:
    """A job's quota request: the given resources plus one ``kube-queue/max-jobs``."""
    return res(quantities, **kw) + {MAX_JOBS: 1}


def node(
    name: str,
    *children: QuotaNodeSpec,
    min: Quantities | None = None,
    max: Quantities | None = None,
    namespaces: tuple[str, ...] = (),
) -> QuotaNodeSpec:
    return QuotaNodeSpec(
        name=name,
        min=res(min),
        max=None if max is None else res(max),
        namespaces=namespaces,
        children=children,
    )


def with_paths(root: QuotaNodeSpec, path: str = "spec.root") -> QuotaNodeSpec:
    """The tree with every node's ``path`` set as the spec loader sets it."""
    children = tuple(
        with_paths(child, f"{path}.children[{i}]") for i, child in enumerate(root.children)
    )
    return dataclasses.replace(root, path=path, children=children)


def tree(root: QuotaNodeSpec) -> QuotaTree:
    return QuotaTree.build(with_paths(root))


def flat_tree(*leaves: QuotaNodeSpec, capacity: Quantities | None = None) -> QuotaTree:
    """A root (min = max = ``capacity``, default 100 cpu) over the given leaves."""
    cap = capacity if capacity is not None else {"cpu": 100}
    return tree(node("root", *leaves, min=cap, max=cap))


def ack_tree() -> QuotaTree:
    """ACK's walkthrough: 40 cpu; a and b (min 20, max 40); four leaves (min 10, max 20)."""
    leaf = {"min": {"cpu": 10}, "max": {"cpu": 20}}
    mid = {"min": {"cpu": 20}, "max": {"cpu": 40}}
    return tree(
        node(
            "root",
            node("a", node("a.1", **leaf), node("a.2", **leaf), **mid),
            node("b", node("b.1", **leaf), node("b.2", **leaf), **mid),
            min={"cpu": 40},
            max={"cpu": 40},
        )
    )


class Ledger:
    """Admits jobs into a tree as the cycle would, numbering them in submission order."""

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self._seq = itertools.count()
        self.queue_of: dict[str, str] = {}

    def admit(
        self,
        queue: str,
        request: Resources,
        *,
        priority: int = 10,
        preemptible: bool = True,
        key: str | None = None,
        expect: Mode | None = None,
    ) -> str:
        """Classify and admit; fail the test if the verdict is a block (or not ``expect``)."""
        seq = next(self._seq)
        key = key or f"{queue}/job-{seq}"
        verdict = self.tree.classify(queue, request, priority=priority, preemptible=preemptible)
        assert not isinstance(verdict, QuotaBlock), verdict.reason
        if expect is not None:
            assert verdict is expect, f"{key}: {verdict} is not {expect}"
        self.tree.admit(Charge(key, key, queue, priority, seq, preemptible, verdict, request))
        self.queue_of[key] = queue
        return key

    def release(self, *keys: str) -> None:
        for key in keys:
            self.tree.release(key)
            del self.queue_of[key]

    def count(self, queue: str) -> int:
        return sum(1 for q in self.queue_of.values() if q == queue)
