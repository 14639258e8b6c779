"""The shape of a quota tree: its nodes, their limits and namespaces.

Job: hold the validated structure of an ElasticQuotaTree (names, parents,
children, ``min``/``max``, namespaces) in a form the usage accounting can walk
fast, answer questions about it by node name, and change one node at a time
without ever holding an invalid tree.

Theory of operation:

* :meth:`QuotaStructure._init_structure` validates a :class:`QuotaNodeSpec`
  tree with :func:`~fleet.core.quota_rules.validate` and flattens it into
  parallel lists indexed by node number, in document order (the root is 0).
  Names map to numbers through one dict; every public method takes a name.
* Every node keeps its path to the root as a tuple of indices (node first), and
  every node keeps the leaves under it, so a question about a job walks one
  short path and never the tree.
* ``min`` and ``max`` are kept twice: as the :class:`Resources` the spec gave
  (for answers and :meth:`to_spec`) and as plain ``dict[str, int]`` copies
  (``_min_d``, ``_max_d``) that the hot loops read without a method call.
  ``max`` of None means the node sets no limit.
* Namespaces are listed per leaf, and indexed namespace → leaf for
  :meth:`queue_for_namespace`.
* Per-user limits (``limits.perUser``) are kept per leaf as written
  (:meth:`per_user`, None where there are none) and read by
  :mod:`fleet.core.user_limits`; :meth:`has_per_user` says whether any leaf
  has some.
* Minimum runtimes and ``maxRuntime`` / ``maxRuntimeAction`` are kept as
  written (``_own_runtime``, ``_own_limit``, for :meth:`to_spec`) and as in
  force at each node, inherited from the parent where a node sets none
  (``_runtime``, ``_limit``), computed once at build.
* ``auto``: the root's capacity is ``auto`` (its ``min``/``max`` are the
  members' capacity, filled in by :mod:`fleet.core.inventory`); kept through
  :meth:`to_spec` and copies, so every rebuilt tree stays auto.
* The inherited settings (``preemptMinRuntime``, ``reclaimMinRuntime``,
  ``fairSharing``) are kept as written (``_own_*``, for :meth:`to_spec`) and
  in force, each node's own value or else its parent's (``_runtime``,
  ``_fair``).
* :meth:`set_node` rebuilds the whole tree as a spec with the one change
  (:meth:`_spec_with`), validates it, and only then writes the change: on
  :class:`QuotaError` nothing changes.  It replaces list entries and never
  mutates them, so a copy may share the lists that ``set_node`` does not touch
  (names, parents, children, paths, leaves) and copy only the others.

:class:`~fleet.core.quota_usage.QuotaUsage` extends this class rather than
holding an instance of it: its hot loops (``classify``, ``_max_block``,
``_charge``) read the structure's lists and its own counters side by side, and
as attributes of one object each costs one attribute lookup.
"""

from __future__ import annotations

from typing import Final

from fleet.core.checks import InvariantError
from fleet.core.quota_rules import MaxRuntimeAction, QuotaNodeSpec, validate
from fleet.core.resources import Resources


class _Unchanged:
    """Sentinel type: ``set_node`` leaves ``max`` as it is."""

    def __repr__(self) -> str:
        return "UNCHANGED"


#: ``set_node(max=UNCHANGED)`` (the default) keeps the node's ``max``; None removes it.
UNCHANGED: Final = _Unchanged()


class QuotaStructure:
    """A validated quota tree's structure; see the module docstring."""

    warnings: list[str]

    _names: list[str]
    _index: dict[str, int]
    _parent: list[int]
    _children: list[tuple[int, ...]]
    _spec_path: list[str]
    _paths: list[tuple[int, ...]]  # node -> root, node first
    _leaves_under: list[tuple[int, ...]]
    _min: list[Resources]
    _max: list[Resources | None]
    _min_d: list[dict[str, int]]
    _max_d: list[dict[str, int] | None]
    #: node -> the nodes on its path to the root that have a ``max``, each with the
    #: max's items and the max (built when first asked, dropped when a max changes)
    _path_maxes: dict[int, list[tuple[int, tuple[tuple[str, int], ...], dict[str, int]]]]
    _namespaces: list[tuple[str, ...]]
    _ns_map: dict[str, int]
    _own_runtime: list[tuple[float | None, float | None]]  # as written: preempt, reclaim
    #: in force (inherited): node -> (preemptMinRuntime, reclaimMinRuntime) seconds, 0: none
    _runtime: list[tuple[float, float]]
    _protects: bool
    _own_fair: list[tuple[float | None, float | None]]  # as written: halfLife, weight
    #: in force (inherited): node -> (fairSharing.halfLife seconds (0: no memory), weight)
    _fair: list[tuple[float, float]]
    #: some node has a half-life or a weight other than 1 (:mod:`fleet.core.fair_share`)
    fair_any: bool
    #: node -> its ``limits.perUser`` (None: none); immutable after build
    _per_user: list[Resources | None]
    _any_per_user: bool
    _own_limit: list[tuple[float | None, MaxRuntimeAction | None]]  # as written
    #: in force (inherited): node -> (maxRuntime seconds, 0: none; its action)
    _limit: list[tuple[float, MaxRuntimeAction]]
    #: the root's capacity is ``auto`` (:attr:`QuotaNodeSpec.auto`)
    auto: bool

    # Construction -------------------------------------------------------------
    def _init_structure(self, root: QuotaNodeSpec) -> None:
        """Validate ``root`` and flatten it into this object; raise :class:`QuotaError`."""
        self.warnings = validate(root)
        self.auto = root.auto
        self._names = []
        self._index = {}
        self._parent = []
        self._children = []
        self._spec_path = []
        self._min = []
        self._max = []
        self._namespaces = []
        self._own_runtime = []
        self._own_fair = []
        self._per_user = []
        self._own_limit = []
        child_lists: list[list[int]] = []

        def flatten(node: QuotaNodeSpec, parent: int) -> None:
            i = len(self._names)
            self._names.append(node.name)
            self._index[node.name] = i
            self._parent.append(parent)
            self._spec_path.append(node.path)
            self._min.append(node.min)
            self._max.append(node.max)
            self._namespaces.append(tuple(node.namespaces))
            self._own_runtime.append((node.preempt_min_runtime, node.reclaim_min_runtime))
            self._own_fair.append((node.fair_half_life, node.fair_weight))
            self._per_user.append(node.per_user)
            self._own_limit.append((node.max_runtime, node.max_runtime_action))
            child_lists.append([])
            if parent >= 0:
                child_lists[parent].append(i)
            for child in node.children:
                flatten(child, i)

        flatten(root, -1)
        n = len(self._names)
        self._children = [tuple(c) for c in child_lists]
        self._paths = []
        for i in range(n):
            path = [i]
            while self._parent[path[-1]] >= 0:
                path.append(self._parent[path[-1]])
            self._paths.append(tuple(path))
        under: list[list[int]] = [[] for _ in range(n)]
        for i in range(n):
            if not self._children[i]:
                for a in self._paths[i]:
                    under[a].append(i)
        self._leaves_under = [tuple(u) for u in under]
        self._min_d = [dict(m) for m in self._min]
        self._max_d = [None if m is None else dict(m) for m in self._max]
        self._path_maxes = {}
        self._ns_map = {ns: i for i in range(n) for ns in self._namespaces[i]}
        runtime: list[tuple[float, float]] = []
        for i in range(n):  # parents come before their children
            parent = runtime[self._parent[i]] if self._parent[i] >= 0 else (0.0, 0.0)
            own = self._own_runtime[i]
            runtime.append(
                (
                    parent[0] if own[0] is None else own[0],
                    parent[1] if own[1] is None else own[1],
                )
            )
        self._runtime = runtime
        self._protects = any(p or r for p, r in runtime)
        fair: list[tuple[float, float]] = []
        for i in range(n):
            parent_fair = fair[self._parent[i]] if self._parent[i] >= 0 else (0.0, 1.0)
            half_life, weight = self._own_fair[i]
            fair.append(
                (
                    parent_fair[0] if half_life is None else half_life,
                    parent_fair[1] if weight is None else weight,
                )
            )
        self._fair = fair
        self.fair_any = any(h > 0 or w != 1.0 for h, w in fair)
        self._any_per_user = any(limits is not None for limits in self._per_user)
        limit: list[tuple[float, MaxRuntimeAction]] = []
        for i in range(n):  # parents come before their children
            above = limit[self._parent[i]] if self._parent[i] >= 0 else (0.0, MaxRuntimeAction.FAIL)
            seconds, action = self._own_limit[i]
            limit.append(
                (above[0] if seconds is None else seconds, above[1] if action is None else action)
            )
        self._limit = limit

    def _copy_structure_to(self, other: QuotaStructure) -> None:
        """Give ``other`` this structure; changing either later leaves the other alone."""
        other.warnings = list(self.warnings)
        other.auto = self.auto
        # Immutable after build (set_node replaces entries, never mutates them).
        other._names = self._names
        other._index = self._index
        other._parent = self._parent
        other._children = self._children
        other._spec_path = self._spec_path
        other._paths = self._paths
        other._leaves_under = self._leaves_under
        other._own_runtime = self._own_runtime
        other._runtime = self._runtime
        other._protects = self._protects
        other._own_fair = self._own_fair
        other._fair = self._fair
        other.fair_any = self.fair_any
        other._per_user = self._per_user
        other._any_per_user = self._any_per_user
        other._own_limit = self._own_limit
        other._limit = self._limit
        # Replaced entry by entry by set_node: copy the lists.
        other._min = list(self._min)
        other._max = list(self._max)
        other._min_d = list(self._min_d)
        other._max_d = list(self._max_d)
        other._path_maxes = {}
        other._namespaces = list(self._namespaces)
        other._ns_map = dict(self._ns_map)

    # Questions ----------------------------------------------------------------
    def _node(self, name: str) -> int:
        i = self._index.get(name)
        if i is None:
            raise KeyError(f"no quota node named {name!r}")
        return i

    def _leaf(self, queue: str) -> int:
        i = self._index.get(queue)
        if i is None:
            raise KeyError(f"no quota node named {queue!r}")
        if self._children[i]:
            raise ValueError(f"quota node {queue!r} is not a leaf queue")
        return i

    def _maxes_along(
        self, node: int
    ) -> list[tuple[int, tuple[tuple[str, int], ...], dict[str, int]]]:
        """The nodes from ``node`` up to the root that have a ``max``, in that order,
        each with the max's items (a tuple walks faster than a dict) and the max."""
        found = self._path_maxes.get(node)
        if found is None:
            found = self._path_maxes[node] = [
                (n, tuple(mx.items()), mx)
                for n in self._paths[node]
                if (mx := self._max_d[n]) is not None
            ]
        return found

    def nodes(self) -> list[str]:
        """Every node name in document order (root first, depth-first)."""
        return list(self._names)

    def leaves(self) -> list[str]:
        """Leaf queue names in document order."""
        return [self._names[i] for i in self._leaves_under[0]]

    def is_leaf(self, name: str) -> bool:
        return not self._children[self._node(name)]

    def has_node(self, name: str) -> bool:
        return name in self._index

    def parent(self, name: str) -> str | None:
        p = self._parent[self._node(name)]
        return None if p < 0 else self._names[p]

    def children(self, name: str) -> list[str]:
        return [self._names[c] for c in self._children[self._node(name)]]

    def path_to_root(self, name: str) -> list[str]:
        """``[name, parent, ..., root]``."""
        return [self._names[i] for i in self._paths[self._node(name)]]

    def quota_path(self, start: str, end: str) -> tuple[str, ...]:
        """The nodes from ``start`` up to the lowest node above both ``start`` and ``end``,
        then down to ``end``: ``(start,)`` when they are one node, ``(start, ..., end)``
        when ``end`` is above ``start``."""
        up = self._paths[self._node(start)]
        down = self._paths[self._node(end)]
        above = set(down)
        top = next(i for i, n in enumerate(up) if n in above)
        turn = down.index(up[top])
        names = self._names
        return tuple(names[n] for n in up[: top + 1]) + tuple(
            names[n] for n in reversed(down[:turn])
        )

    def spec_path(self, name: str) -> str:
        """The node's field path in the document it was built from."""
        return self._spec_path[self._node(name)]

    def min_of(self, name: str) -> Resources:
        return self._min[self._node(name)]

    def max_of(self, name: str) -> Resources | None:
        """The node's own ``max``; None means it sets no limit."""
        return self._max[self._node(name)]

    def limited_resources(self) -> list[str]:
        """Every resource some node's ``max`` names, in the order first named."""
        names: dict[str, None] = {}
        for limit in self._max_d:
            if limit is not None:
                for r in limit:
                    names[r] = None
        return list(names)

    def path_limits(self, name: str, resource: str) -> bool:
        """Whether some node from ``name`` up to the root names ``resource`` in its ``max``."""
        for i in self._paths[self._node(name)]:
            limit = self._max_d[i]
            if limit is not None and resource in limit:
                return True
        return False

    def min_runtimes(self, name: str) -> tuple[float, float]:
        """(preemptMinRuntime, reclaimMinRuntime) in force at the node, in seconds (0: none)."""
        return self._runtime[self._node(name)]

    def fair_sharing(self, name: str) -> tuple[float, float]:
        """(fairSharing.halfLife in seconds (0: no memory), weight) in force at the node."""
        return self._fair[self._node(name)]

    def max_runtime(self, name: str) -> tuple[float, MaxRuntimeAction]:
        """(maxRuntime in seconds, 0: none; maxRuntimeAction) in force at the node."""
        return self._limit[self._node(name)]

    def protects(self) -> bool:
        """Whether any node sets a minimum runtime."""
        return self._protects  # computed with ``_runtime``: the cycle asks per job

    def per_user(self, name: str) -> Resources | None:
        """The node's ``limits.perUser`` (None: none), ``runningJobs`` as
        ``kube-queue/max-jobs``; a cheap lookup, asked per job that names a user."""
        if not self._any_per_user:
            return None
        return self._per_user[self._node(name)]

    def has_per_user(self) -> bool:
        """Whether any leaf has ``limits.perUser``."""
        return self._any_per_user

    def namespaces_of(self, name: str) -> tuple[str, ...]:
        return self._namespaces[self._node(name)]

    def queue_for_namespace(self, namespace: str) -> str | None:
        i = self._ns_map.get(namespace)
        return None if i is None else self._names[i]

    def to_spec(self) -> QuotaNodeSpec:
        """The tree as a :class:`QuotaNodeSpec` (with any ``set_node`` changes)."""
        return self._spec_with(-1, None, None, None)

    # Changes ------------------------------------------------------------------
    def _spec_with(
        self,
        target: int,
        new_min: Resources | None,
        new_max: Resources | _Unchanged | None,
        new_ns: tuple[str, ...] | None,
    ) -> QuotaNodeSpec:
        """The tree as a spec, node ``target`` (if any) given the new values that are set."""

        def make(i: int) -> QuotaNodeSpec:
            mn, mx, ns = self._min[i], self._max[i], self._namespaces[i]
            if i == target:
                mn = mn if new_min is None else new_min
                mx = mx if isinstance(new_max, _Unchanged) else new_max
                ns = ns if new_ns is None else new_ns
            return QuotaNodeSpec(
                name=self._names[i],
                min=mn,
                max=mx,
                namespaces=ns,
                children=tuple(make(c) for c in self._children[i]),
                path=self._spec_path[i],
                preempt_min_runtime=self._own_runtime[i][0],
                reclaim_min_runtime=self._own_runtime[i][1],
                fair_half_life=self._own_fair[i][0],
                fair_weight=self._own_fair[i][1],
                auto=self.auto and i == 0,
                per_user=self._per_user[i],
                max_runtime=self._own_limit[i][0],
                max_runtime_action=self._own_limit[i][1],
            )

        return make(0)

    def set_node(
        self,
        name: str,
        *,
        min: Resources | None = None,
        max: Resources | _Unchanged | None = UNCHANGED,
        namespaces: tuple[str, ...] | None = None,
    ) -> None:
        """Change one node's min/max/namespaces; the whole tree is re-validated.

        On error raises :class:`QuotaError` and changes nothing.
        """
        i = self._node(name)
        spec = self._spec_with(i, min, max, None if namespaces is None else tuple(namespaces))
        warnings = validate(spec)
        self.warnings = warnings
        if min is not None:
            self._min[i] = min
            self._min_d[i] = dict(min)
        if not isinstance(max, _Unchanged):
            self._max[i] = max
            self._max_d[i] = None if max is None else dict(max)
            self._path_maxes.clear()
        if namespaces is not None:
            for ns in self._namespaces[i]:
                self._ns_map.pop(ns, None)
            self._namespaces[i] = tuple(namespaces)
            for ns in namespaces:
                self._ns_map[ns] = i

    # Invariants ---------------------------------------------------------------
    def check_invariants(self) -> None:
        """The namespace index and the leaves' namespace lists agree both ways.

        Raises :class:`InvariantError` naming the namespace and the node.
        """
        for ns, i in self._ns_map.items():
            if ns not in self._namespaces[i]:
                raise InvariantError(
                    f"namespace {ns} is indexed to {self._names[i]}, which does not list it"
                )
        for i, namespaces in enumerate(self._namespaces):
            for ns in namespaces:
                if self._ns_map.get(ns) != i:
                    raise InvariantError(f"namespace {ns} of {self._names[i]} is not indexed to it")
