"""Buddy allocation of physical cells to reservations, with HiveD's VC safety.

Theory of operation: every physical cell is in exactly one of three states,
kept as flags on the cells:

* a *free root* is a wholly unreserved cell whose parent is not wholly free;
  free roots are the buddy free lists, one ordered dict per chain per level;
* a *reserved root* (``cell.res``) is a cell held by one
  :class:`~fleet.core.cells.topology.Reservation`:
  a VC's virtual cell bound to it (``vc``), a pinned cell (``pin``), a
  shared-pool guaranteed job's leaves (``shared``) or a bad node (``bad``);
* a *split* cell has children that are each free, reserved or split.

Cells inside a free or reserved root carry no flag.  :meth:`Allocator.take`
splits the free root above a cell down to it (buddy split) and
:meth:`Allocator.untake` frees it and merges buddies upward.

VC safety follows HiveD: a VC's virtual cells are bound lazily, so what the
allocator keeps per chain per level is ``owed`` — the VCs' unbound virtual
cells — next to the free lists.  Whether every owed cell can still be bound is
a top-down count (:meth:`Allocator.deficit`): at each level the free cells plus
the halves carried down from unneeded higher cells must cover what is owed.
That is a handful of integer operations per chain, never a walk over nodes.  A
take is allowed only if it does not increase the deficit, so a split never
takes a cell another VC is owed.  A deficit can only appear when nodes go bad;
it is reported per VC as *doomed* cells.

Free capacity is indexed, not scanned: the free lists give the free cells per
chain per level (``len(free[chain][level])``), every cell outside a reserved
root counts its unreserved leaves (``cell.unres``, kept on the path from a
taken cell to its top), and ``open_tops[chain]`` holds the top cells that still
have unreserved leaves, so the shared pool is searched only where it exists.

Every mutation goes through the :class:`Journal`, so a query (``fit``) can
try real takes and roll them back exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fleet.core.cells import topology
from fleet.core.cells.spec import CellConfig
from fleet.core.cells.topology import Cell, Reservation, ReservationKind, Topology
from fleet.core.checks import InvariantError

VC = ReservationKind.VC
PIN = ReservationKind.PIN
SHARED = ReservationKind.SHARED
BAD = ReservationKind.BAD


def _delitem(d: Any, key: Any, _unused: Any) -> None:
    del d[key]


def _setitem(d: Any, key: Any, value: Any) -> None:
    d[key] = value


class Journal:
    """An undo log: every state change records how to revert it.

    The log is flat — ``obj, key, old value, undo function`` per change, appended
    with one ``extend`` — so a change allocates no tuple that outlives it (a bind
    of a large gang logs thousands of changes; tuples kept until commit would be
    garbage-collector work).
    """

    def __init__(self) -> None:
        self._log: list[Any] | None = None

    def begin(self) -> None:
        if self._log is not None:
            raise InvariantError("a transaction is already open (transactions do not nest)")
        self._log = []

    def commit(self) -> None:
        self._log = None

    def rollback(self) -> None:
        if self._log is None:
            raise InvariantError("rollback outside a transaction")
        self.undo_to(0)
        self._log = None

    @property
    def log(self) -> list[Any] | None:
        """The open transaction's log (None outside one), for hot loops that append
        ``obj, attr, old value, setattr`` themselves."""
        return self._log

    def mark(self) -> int:
        """A point of the open transaction that :meth:`undo_to` can return to."""
        if self._log is None:
            raise InvariantError("mark outside a transaction")
        return len(self._log)

    def undo_to(self, mark: int) -> None:
        """Revert every change made since ``mark`` (newest first)."""
        log = self._log
        if log is None:
            raise InvariantError("undo outside a transaction")
        if mark > len(log):
            raise InvariantError(f"undo to mark {mark}, past the log's end {len(log)}")
        pop = log.pop
        while len(log) > mark:
            fn = pop()
            old = pop()
            key = pop()
            fn(pop(), key, old)

    def set(self, obj: Any, attr: str, value: Any) -> None:
        if self._log is not None:
            self._log.extend((obj, attr, getattr(obj, attr), setattr))
        setattr(obj, attr, value)

    def add(self, obj: Any, attr: str, delta: int) -> None:
        old = getattr(obj, attr)
        if self._log is not None:
            self._log.extend((obj, attr, old, setattr))
        setattr(obj, attr, old + delta)

    def setitem(self, d: Any, key: Any, value: Any) -> None:
        if self._log is not None:
            if key in d:
                self._log.extend((d, key, d[key], _setitem))
            else:
                self._log.extend((d, key, None, _delitem))
        d[key] = value

    def delitem(self, d: Any, key: Any) -> None:
        if self._log is not None:
            self._log.extend((d, key, d[key], _setitem))
        del d[key]

    def listitem(self, lst: list[int], index: int, delta: int) -> None:
        old = lst[index]
        if self._log is not None:
            self._log.extend((lst, index, old, _setitem))
        lst[index] = old + delta


class Allocator:
    """Free lists, owed counters and reservations of one cluster's cells."""

    def __init__(self, topo: Topology, config: CellConfig, journal: Journal | None = None):
        self.topo = topo
        self.j = journal or Journal()
        self.free: dict[str, list[dict[int, Cell]]] = {}
        self.owed: dict[str, list[int]] = {}
        self.weight: dict[str, list[int]] = {}
        for chain, types in topo.chain_types.items():
            depth = len(types)
            self.free[chain] = [{} for _ in range(depth + 1)]
            self.owed[chain] = [0] * (depth + 1)
            # Leaves per cell at each level (index = level).
            weights = [0, 1]
            for ct in types[1:]:
                weights.append(weights[-1] * ct.child_number)
            self.weight[chain] = weights
        self.vc_owed: dict[str, dict[str, list[int]]] = {}
        self.vc_bound: dict[str, dict[int, Reservation]] = {}
        #: vc -> chain -> its bound reservations whose cell has an unowned leaf
        #: (cell id -> reservation): all a search without victims can use there
        self.vc_open: dict[str, dict[str, dict[int, Reservation]]] = {}
        self.configured: dict[str, dict[str, list[int]]] = {}
        self.pins: dict[str, Reservation] = {}
        #: reservations of bad nodes' parts (while there are none, no chain is short)
        self.bad_roots = 0
        #: chain -> :meth:`shared_ceiling` (computed on first use)
        self._ceiling: dict[str, int] = {}
        #: chain -> top cells with unreserved leaves (id -> cell).
        self.open_tops: dict[str, dict[int, Cell]] = {chain: {} for chain in topo.chain_types}
        #: chain -> [unreserved leaves in the chain].
        self.unres_total: dict[str, list[int]] = {chain: [0] for chain in topo.chain_types}
        for top in topo.tops:
            top.free_root = True
            self.free[top.chain][top.level][top.id] = top
            self.open_tops[top.chain][top.id] = top
            self.unres_total[top.chain][0] += top.size
        for vc, spec in config.vcs.items():
            owed = {chain: [0] * len(self.owed[chain]) for chain in topo.chain_types}
            for vcell in spec.cells:
                level = config.cell_types[vcell.cell_type].level
                owed[vcell.chain][level] += vcell.number
                self.owed[vcell.chain][level] += vcell.number
            self.vc_owed[vc] = owed
            self.configured[vc] = {chain: list(levels) for chain, levels in owed.items()}
            self.vc_bound[vc] = {}
            self.vc_open[vc] = {chain: {} for chain in topo.chain_types}
            for pid in spec.pinned:
                cell = topo.pinned[pid]
                res = Reservation(PIN, cell, vc=vc)
                self.take(cell, res)
                self.pins[pid] = res

    # -- buddy free lists ------------------------------------------------------------------

    def free_root_of(self, cell: Cell) -> Cell | None:
        """The free root containing ``cell`` (itself or an ancestor), or None."""
        if cell.free_root:
            return cell
        if cell.res is not None or cell.split:
            return None
        parent = cell.parent
        while parent is not None:
            if parent.free_root:
                return parent
            if parent.res is not None:
                return None
            parent = parent.parent
        return None

    def _push(self, cell: Cell) -> None:
        self.j.set(cell, "free_root", True)
        self.j.setitem(self.free[cell.chain][cell.level], cell.id, cell)

    def _pop(self, cell: Cell) -> None:
        self.j.set(cell, "free_root", False)
        self.j.delitem(self.free[cell.chain][cell.level], cell.id)

    def take(self, cell: Cell, res: Reservation) -> None:
        """Reserve a wholly free ``cell`` for ``res``, splitting its free root."""
        root = self.free_root_of(cell)
        if root is None:
            raise InvariantError(f"cannot reserve {cell} for {res}: it is not wholly free")
        path: list[Cell] = []
        c: Cell | None = cell
        while c is not root:
            assert c is not None
            path.append(c)
            c = c.parent
        for upper in reversed(path):
            parent = upper.parent
            assert parent is not None
            self._pop(parent)
            self.j.set(parent, "split", True)
            for child in parent.children:
                self._push(child)
        self._pop(cell)
        self.j.set(cell, "res", res)
        if res.kind == BAD:
            self.j.add(self, "bad_roots", 1)
        self._tag_leaves(cell, res)
        self._count_unres(cell, -cell.size)

    def untake(self, cell: Cell) -> None:
        """Release the reservation rooted at ``cell`` and merge free buddies."""
        if cell.res is None:
            raise InvariantError(f"cannot release {cell}: no reservation is rooted there")
        if cell.res.kind == BAD:
            self.j.add(self, "bad_roots", -1)
        self.j.set(cell, "res", None)
        self._tag_leaves(cell, None)
        self._count_unres(cell, cell.size)
        self._push(cell)
        parent = cell.parent
        while parent is not None and parent.split and all(c.free_root for c in parent.children):
            for child in parent.children:
                self._pop(child)
            self.j.set(parent, "split", False)
            self._push(parent)
            parent = parent.parent

    def _tag_leaves(self, cell: Cell, res: Reservation | None) -> None:
        """Set every leaf's ``tag`` (journaled inline: a rack has dozens of leaves).

        Also moves the cell's unowned leaves in or out of their nodes' ``shfree``
        and sets their bits in the nodes' ``tagmask``.
        """
        j = self.j
        sign = 1 if res is None else -1
        if cell.node_cells:
            for node in cell.node_cells:
                if node.used < node.size:
                    j.add(node, "shfree", sign * (node.size - node.used))
                j.set(node, "tagmask", 0 if res is None else node.bits)
        else:
            holder = cell.node_cell
            assert holder is not None
            if cell.used < cell.size:
                j.add(holder, "shfree", sign * (cell.size - cell.used))
            if res is None:
                j.set(holder, "tagmask", holder.tagmask & ~cell.bits)
            else:
                j.set(holder, "tagmask", holder.tagmask | cell.bits)
        log = j.log
        if log is None:
            for leaf in cell.leaves:
                leaf.tag = res
            return
        extend = log.extend
        for leaf in cell.leaves:
            extend((leaf, "tag", leaf.tag, setattr))
            leaf.tag = res

    def _count_unres(self, cell: Cell, delta: int) -> None:
        """Add ``delta`` unreserved leaves to ``cell`` and its ancestors; track open tops."""
        j = self.j
        c: Cell | None = cell
        top = cell.top
        while c is not None:
            j.add(c, "unres", delta)
            c = c.parent
        j.listitem(self.unres_total[top.chain], 0, delta)
        opened = self.open_tops[top.chain]
        if top.unres > 0:
            if top.id not in opened:
                j.setitem(opened, top.id, top)
        elif top.id in opened:
            j.delitem(opened, top.id)

    def free_parts(self, cell: Cell) -> list[Cell]:
        """The free roots inside ``cell`` (or the free root above it, as ``cell`` itself)."""
        if self.free_root_of(cell) is not None:
            return [cell]
        if not cell.split:
            return []
        out: list[Cell] = []
        for child in cell.children:
            out.extend(self.free_parts(child))
        return out

    # -- safety ---------------------------------------------------------------------------

    def shared_ceiling(self, chain: str) -> int:
        """The most leaves the shared pool of ``chain`` can ever hold while every VC is safe.

        With no shortage, the free leaves cover the owed ones, and the VCs'
        bound plus owed cells are their configured cells, so shared leaves are
        at most the chain's leaves minus the configured VC cells and the pinned
        cells (bad nodes only lower it).  Constant for a configuration; the
        caller checks that the chain has no shortage (:meth:`shortage`).
        """
        known = self._ceiling.get(chain)
        if known is None:
            weights = self.weight[chain]
            total = sum(top.size for top in self.topo.chain_tops[chain])
            for levels in self.configured.values():
                total -= sum(n * w for n, w in zip(levels[chain], weights, strict=True))
            total -= sum(res.cell.size for res in self.pins.values() if res.cell.chain == chain)
            known = self._ceiling[chain] = max(0, total)
        return known

    def shared_hopeless(self, chain: str, need: int) -> bool:
        """Whether no placement of ``need`` shared leaves in ``chain`` can be safe now,
        whoever leaves first (a take must not make any VC shorter of its cells)."""
        return self.shared_ceiling(chain) < need and not any(self.shortage(chain))

    def settled_hopeless(self, chain: str, need: int) -> bool:
        """:meth:`shared_hopeless` in a settled state (no take tried and not undone).

        There a chain is short of owed cells only because of bad nodes (every take
        keeps the shortage from growing: :meth:`check` recounts it), so while no
        part of a node is reserved as bad the shortage is not counted.
        """
        if self.shared_ceiling(chain) >= need:
            return False
        return self.bad_roots == 0 or not any(self.shortage(chain))

    def shortage(self, chain: str, delta: list[int] | None = None) -> list[int]:
        """Owed cells per level (index = level) that the free cells cannot cover.

        ``delta`` (index = level) is added to the free cell counts first (a what-if).
        """
        free = self.free[chain]
        owed = self.owed[chain]
        types = self.topo.chain_types[chain]
        short = [0] * len(owed)
        carry = 0
        for level in range(len(owed) - 1, 0, -1):
            avail = len(free[level]) + carry + (delta[level] if delta is not None else 0)
            need = owed[level]
            if avail >= need:
                carry = (avail - need) * types[level - 1].child_number if level > 1 else 0
            else:
                short[level] = need - avail
                carry = 0
        return short

    def take_delta(self, chain: str, leaves: Iterable[Cell]) -> list[int] | None:
        """Change of the free cell counts per level if every leaf were taken on its own.

        Counter arithmetic, no state change: each free root holding taken leaves leaves
        the free lists and its maximal untouched subtrees join them (buddy splits).
        None if a leaf is not free or appears twice.
        """
        delta = [0] * len(self.free[chain])
        under: dict[Cell, int] = {}  # cell -> its taken leaves
        seen: set[Cell] = set()
        roots: dict[Cell, None] = {}
        for leaf in leaves:
            if leaf in seen or leaf.chain != chain:
                return None
            seen.add(leaf)
            # Up to the free root, counting; None if a reservation or split comes first.
            c: Cell | None = leaf
            while c is not None and not c.free_root:
                if c.res is not None or c.split:
                    return None
                under[c] = under.get(c, 0) + 1
                c = c.parent
            if c is None:
                return None
            under[c] = under.get(c, 0) + 1
            roots[c] = None
        stack = list(roots)
        for root in stack:
            delta[root.level] -= 1
        while stack:
            cell = stack.pop()
            if under[cell] == cell.size:
                continue  # wholly taken
            for child in cell.children:
                if child in under:
                    stack.append(child)
                else:
                    delta[child.level] += 1
        return delta

    def binding_is_safe(self, cell: Cell, before: list[int]) -> bool:
        """Whether binding an owed virtual cell of ``cell``'s level to the wholly free
        ``cell`` leaves no level of its chain shorter than ``before`` (:meth:`no_worse`
        after :meth:`bind_vc`, counted without binding: no state change).

        The take removes the free root above ``cell`` from its level and pushes, at
        each level from ``cell``'s up to below the root, the siblings of the path
        (buddy splits); the owed cell bound is one owed cell less at ``cell``'s
        level, which :meth:`shortage` counts like one more free cell there.
        """
        root = self.free_root_of(cell)
        if root is None:
            raise InvariantError(f"cannot bind {cell}: it is not wholly free")
        delta = [0] * len(self.free[cell.chain])
        delta[root.level] -= 1
        c = cell
        while c is not root:
            parent = c.parent
            assert parent is not None
            delta[c.level] += len(parent.children) - 1
            c = parent
        delta[cell.level] += 1
        after = self.shortage(cell.chain, delta)
        return all(a <= b for a, b in zip(after, before, strict=True))

    def no_worse(self, chain: str, before: list[int]) -> bool:
        """Whether no level of ``chain`` is shorter of owed cells than in ``before``."""
        return all(a <= b for a, b in zip(self.shortage(chain), before, strict=True))

    def deficit(self, chain: str) -> int:
        """Owed leaves of ``chain`` that can no longer be bound (0 when every VC is safe)."""
        weights = self.weight[chain]
        return sum(s * w for s, w in zip(self.shortage(chain), weights, strict=True))

    def doomed_by_chain_level(self) -> dict[str, dict[tuple[str, int], int]]:
        """VC -> (chain, level) -> owed cells that cannot be bound (VCs in name order)."""
        out: dict[str, dict[tuple[str, int], int]] = {}
        for chain in self.topo.chain_types:
            short = self.shortage(chain)
            for level, missing in enumerate(short):
                if not missing:
                    continue
                for vc in sorted(self.vc_owed):
                    if not missing:
                        break
                    n = min(missing, self.vc_owed[vc][chain][level])
                    if n:
                        out.setdefault(vc, {})[(chain, level)] = n
                        missing -= n
        return out

    def candidates(self, chain: str, level: int) -> Iterator[Cell]:
        """Wholly free cells of ``level``: exact free roots first, then inside higher ones.

        Free roots come in id order (not in the order they were freed), so the buddy
        choice depends on what is reserved, never on the history that led there.
        """
        free = self.free[chain]
        exact = free[level]
        yield from [exact[cid] for cid in sorted(exact)]
        for upper in range(level + 1, len(free)):
            roots = free[upper]
            for root in [roots[cid] for cid in sorted(roots)]:
                yield from topology.descendants_at(root, level)

    # -- VC bindings ----------------------------------------------------------------------

    def bind_vc(self, vc: str, cell: Cell) -> Reservation:
        """Bind one of ``vc``'s owed virtual cells of ``cell``'s level to ``cell``."""
        res = Reservation(VC, cell, vc=vc)
        self.take(cell, res)
        self.j.listitem(self.vc_owed[vc][cell.chain], cell.level, -1)
        self.j.listitem(self.owed[cell.chain], cell.level, -1)
        self.j.setitem(self.vc_bound[vc], cell.id, res)
        if cell.used < cell.size:
            self.j.setitem(self.vc_open[vc][cell.chain], cell.id, res)
        return res

    def unbind_vc(self, res: Reservation) -> None:
        if res.kind != VC or res.vc is None:
            raise InvariantError(f"cannot unbind {res}: not a VC binding")
        cell = res.cell
        self.untake(cell)
        self.j.listitem(self.vc_owed[res.vc][cell.chain], cell.level, 1)
        self.j.listitem(self.owed[cell.chain], cell.level, 1)
        self.j.delitem(self.vc_bound[res.vc], cell.id)
        opened = self.vc_open[res.vc][cell.chain]
        if cell.id in opened:
            self.j.delitem(opened, cell.id)

    def reopen(self, res: Reservation) -> None:
        """Keep bound ``res`` in its VC's open cells exactly while its cell has an
        unowned leaf (after owners changed inside it)."""
        cell = res.cell
        assert res.vc is not None
        opened = self.vc_open[res.vc][cell.chain]
        if cell.used < cell.size:
            if cell.id not in opened:
                self.j.setitem(opened, cell.id, res)
        elif cell.id in opened:
            self.j.delitem(opened, cell.id)

    # -- bad nodes ------------------------------------------------------------------------

    def reserve_bad(self, node: Cell) -> None:
        """Take every free part of a bad node out of the free lists."""
        for part in self.free_parts(node):
            self.take(part, Reservation(BAD, part))

    def release_bad(self, node: Cell) -> None:
        for res in list(_reservations_in(node)):
            if res.kind == BAD:
                self.untake(res.cell)

    # -- invariants -----------------------------------------------------------------------

    def check(self) -> None:
        """Recount flags, free lists, unreserved leaves and owed cells from the cells.

        Raises :class:`~fleet.core.checks.InvariantError` naming the cell, chain,
        level or VC that drifted.
        """
        free_count: dict[tuple[str, int], int] = {}

        def walk(cell: Cell, inside: bool, tag: Reservation | None) -> int:
            """Checks ``cell``'s subtree; returns its unreserved leaves."""
            flags = int(cell.free_root) + int(cell.split) + int(cell.res is not None)
            if inside and flags:
                raise InvariantError(f"{cell} inside a free or reserved root carries a flag")
            if not inside and flags != 1:
                raise InvariantError(
                    f"{cell} has {flags} of the free root, split and reserved flags, not 1"
                )
            if cell.free_root:
                if self.free[cell.chain][cell.level].get(cell.id) is not cell:
                    raise InvariantError(
                        f"free root {cell} is missing from the free list of "
                        f"{cell.chain} level {cell.level}"
                    )
                key = (cell.chain, cell.level)
                free_count[key] = free_count.get(key, 0) + 1
            if cell.res is not None:
                if cell.res.cell is not cell:
                    raise InvariantError(f"{cell} holds {cell.res}, which is rooted elsewhere")
                tag = cell.res
            if not cell.children:
                if cell.tag is not tag:
                    raise InvariantError(f"{cell} is tagged {cell.tag}, its reservation is {tag}")
                unres = int(tag is None)
            else:
                unres = sum(walk(child, inside or not cell.split, tag) for child in cell.children)
            if inside and tag is not None:
                if cell.unres != cell.size:
                    raise InvariantError(
                        f"{cell} inside reserved root has unres {cell.unres}, not its size "
                        f"{cell.size}"
                    )
            elif cell.unres != unres:
                raise InvariantError(f"{cell} unres drifted: kept {cell.unres}, recount {unres}")
            return unres

        for top in self.topo.tops:
            walk(top, False, None)
            listed = top.id in self.open_tops[top.chain]
            if listed != (top.unres > 0):
                raise InvariantError(
                    f"top {top} with {top.unres} unreserved leaves is "
                    f"{'' if listed else 'not '}in the open tops of {top.chain}"
                )
        for chain, opened in self.open_tops.items():
            for top in opened.values():
                if top.chain != chain or top.parent is not None:
                    raise InvariantError(f"open tops of {chain} list {top}, not a top of it")
            total_unres = sum(top.unres for top in self.topo.chain_tops[chain])
            if self.unres_total[chain] != [total_unres]:
                raise InvariantError(
                    f"unreserved leaves of {chain} drifted: kept {self.unres_total[chain]}, "
                    f"recount [{total_unres}]"
                )
        for chain, levels in self.free.items():
            for level, free_cells in enumerate(levels):
                roots = free_count.get((chain, level), 0)
                if len(free_cells) != roots:
                    raise InvariantError(
                        f"free list of {chain} level {level} holds {len(free_cells)} cells, "
                        f"{roots} free roots"
                    )
        total: dict[str, list[int]] = {c: [0] * len(v) for c, v in self.owed.items()}
        for vc, chains in self.vc_owed.items():
            bound: dict[tuple[str, int], int] = {}
            for res in self.vc_bound[vc].values():
                if res.cell.res is not res or res.vc != vc:
                    raise InvariantError(f"VC {vc} lists {res}, which {res.cell} does not hold")
                key = (res.cell.chain, res.cell.level)
                bound[key] = bound.get(key, 0) + 1
            for chain, owed_levels in chains.items():
                for level, n in enumerate(owed_levels):
                    if n < 0:
                        raise InvariantError(f"VC {vc} owes {n} cells of {chain} level {level}")
                    total[chain][level] += n
                    configured = self.configured[vc][chain][level]
                    got = bound.get((chain, level), 0)
                    if n + got != configured:
                        raise InvariantError(
                            f"VC {vc} at {chain} level {level}: {n} owed + {got} bound "
                            f"!= {configured} configured"
                        )
        if total != self.owed:
            raise InvariantError(f"owed cells drifted: kept {self.owed}, recount {total}")
        bad = sum(1 for cell in self.topo.cells if cell.res is not None and cell.res.kind == BAD)
        if bad != self.bad_roots:
            raise InvariantError(f"bad reservations drifted: kept {self.bad_roots}, recount {bad}")
        if not bad:
            for chain in self.free:
                if any(self.shortage(chain)):
                    raise InvariantError(f"chain {chain} is short of owed cells with no bad node")


def _reservations_in(cell: Cell) -> Iterator[Reservation]:
    if cell.res is not None:
        yield cell.res
        return
    if cell.split:
        for child in cell.children:
            yield from _reservations_in(child)
    elif not cell.free_root:
        # Inside a root: the root is above ``cell``.
        return
