"""The tables of ``fleet get``: rows from the API's answers, sorting, selectors and watching.

Theory of operation: every noun ``fleet get`` lists (:data:`NOUNS`: singular,
plural and short forms) has one function here that turns the API's items into
a :class:`Table` (headers, and per item its cells and the values to sort it
by), in the words of :mod:`fleet.service.columns`; nothing here talks HTTP or
reads the clock (``now`` is passed in), so the tests build tables from plain
dictionaries.  :func:`select` keeps the items a label selector
(``-l a=b,c!=d,e``) matches, client-side: the API has no selector.
:func:`sort_rows` orders rows by a column (``--sort-by AGE``, any case, ``-``
or space) or by a JSON path into the item (``.metadata.name``, ``.gpus``;
kubectl's ``.metadata.``/``.spec.``/``.status.`` prefixes are skipped where
the item is flat).  :class:`Watcher` gives ``--watch`` kubectl's manner:
the first table whole, then only rows that are new or changed (time-relative
cells such as ``AGE`` do not count as a change), aligned as the first table.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleet.service import columns

#: Every form of a noun -> its canonical (plural) name, as kubectl accepts them.
NOUNS: Final = {
    **dict.fromkeys(("job", "jobs"), "jobs"),
    **dict.fromkeys(("queue", "queues", "q"), "queues"),
    **dict.fromkeys(("cluster", "clusters"), "clusters"),
    **dict.fromkeys(("policy", "policies", "propagationpolicy", "propagationpolicies"), "policies"),
    **dict.fromkeys(("event", "events", "ev"), "events"),
}
#: The canonical noun -> the singular ``-o name`` prints (``job/team-a/x``).
SINGULAR: Final = {
    "jobs": "job",
    "queues": "queue",
    "clusters": "cluster",
    "policies": "policy",
    "events": "event",
}
#: Columns whose cells move with the clock: not a change for ``--watch``.
VOLATILE: Final = frozenset({"AGE", "RUN TIME", "START", "LAST SEEN"})


def noun(word: str, allowed: Iterable[str] | None = None) -> str:
    """The canonical noun of ``word`` (ValueError naming the accepted forms if none)."""
    found = NOUNS.get(word.lower())
    permitted = set(NOUNS.values()) if allowed is None else set(allowed)
    if found is None or found not in permitted:
        forms = sorted(w for w, n in NOUNS.items() if n in permitted)
        raise ValueError(f"unknown kind {word!r}: use one of {', '.join(forms)}")
    return found


@dataclass
class Row:
    """One item's cells, the values it sorts by per column, and its identity."""

    item: Mapping[str, Any]
    cells: tuple[str, ...]
    keys: dict[str, Any]
    ident: str


@dataclass
class Table:
    headers: tuple[str, ...]
    rows: list[Row] = field(default_factory=list)


def timestamp(rfc3339: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time as the server writes it."""
    if not rfc3339:
        return None
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _natural(text: str) -> tuple[Any, ...]:
    """A sort key that orders ``job-2`` before ``job-10`` and ``12/16`` before ``100/0``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text) if p)


def _count(quantity: str | None) -> int:
    """A whole count (GPUs) from a quantity string (``"16"``); 0 when absent."""
    if not quantity:
        return 0
    try:
        return int(float(quantity))
    except ValueError:
        return 0


def _sortable(value: Any) -> tuple[int, Any]:
    if value is None:
        return (2, "")
    if isinstance(value, bool):
        return (0, int(value))
    if isinstance(value, (int, float)):
        return (0, value)
    if isinstance(value, str):
        return (1, _natural(value))
    return (1, _natural(str(value)))


# Selectors, sorting -------------------------------------------------------------------

_ALIASES: Final = {"creationTimestamp": "submittedAt"}


def path_value(item: Mapping[str, Any], path: str) -> Any:
    """The value at a kubectl JSON path (``.metadata.name``, ``{.gpus}``) of a flat item."""
    parts = [p for p in path.strip().strip("{}").lstrip(".").split(".") if p]
    if parts and parts[0] not in item and parts[0] in ("metadata", "spec", "status"):
        parts = parts[1:]
    value: Any = item
    for part in parts:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part, value.get(_ALIASES.get(part, part)))
    return value


def column_of(headers: Sequence[str], name: str) -> str | None:
    """The header ``name`` stands for (``age``, ``run-time``, ``RUN_TIME``), or None."""
    wanted = re.sub(r"[-_ ]+", " ", name).strip().upper()
    return next((h for h in headers if h == wanted), None)


def sort_rows(table: Table, by: str) -> None:
    """Order ``table``'s rows by a column name or a JSON path (ValueError: neither)."""
    header = column_of(table.headers, by)
    if header is not None:
        index = table.headers.index(header)

        def key(row: Row) -> tuple[int, Any]:
            if header in row.keys:
                return _sortable(row.keys[header])
            return _sortable(row.cells[index])

        table.rows.sort(key=key)
        return
    if not by.startswith(("{", ".")):
        heads = ", ".join(table.headers)
        raise ValueError(f"--sort-by {by!r}: not a column ({heads}) nor a JSON path (.a.b)")
    table.rows.sort(key=lambda row: _sortable(path_value(row.item, by)))


_REQUIREMENT: Final = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)?\s*([A-Za-z0-9_.-]*)\s*$")


def selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """A label selector (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``; comma: all of them)
    as a test of a label map (ValueError: not a selector)."""
    wanted: list[tuple[str, str, str]] = []  # (key, operator, value)
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if part.startswith("!"):
            wanted.append((part[1:].strip(), "absent", ""))
            continue
        match = _REQUIREMENT.match(part)
        if match is None:
            raise ValueError(f"-l {text!r}: {part!r} is not key=value, key!=value, key or !key")
        key, op, value = match.groups()
        wanted.append((key, op or "exists", value))

    def matches(labels: Mapping[str, str]) -> bool:
        for key, op, value in wanted:
            if op == "absent" and key in labels:
                return False
            if op == "exists" and key not in labels:
                return False
            if op == "!=" and labels.get(key) == value:
                return False
            if op in ("=", "==") and labels.get(key) != value:
                return False
        return True

    return matches


def select(items: Iterable[Mapping[str, Any]], text: str | None) -> list[Mapping[str, Any]]:
    """The items whose ``labels`` match the selector ``text`` (every item for None)."""
    if not text:
        return list(items)
    matches = selector(text)
    return [i for i in items if matches(i.get("labels") or {})]


# Tables -------------------------------------------------------------------------------


def jobs_table(
    items: Sequence[Mapping[str, Any]], now: float, *, wide: bool, namespaced: bool
) -> Table:
    """The job table (:data:`fleet.service.columns.JOB_COLUMNS`, with ``wide`` its wide
    columns); ``namespaced``: one namespace was asked for, so NAME is the bare name."""
    headers = columns.JOB_COLUMNS + (columns.JOB_WIDE_COLUMNS if wide else ())
    table = Table(headers)
    for j in items:
        submitted = timestamp(j.get("submittedAt")) or now
        started = timestamp(j.get("startedAt"))
        earliest, latest = start_range(j.get("estimatedStart"))
        cells = [
            j["name"] if namespaced else f"{j['namespace']}/{j['name']}",
            j["queue"],
            j["state"],
            str(j.get("gpus", 0)),
            j.get("cluster") or columns.NONE,
            columns.age(now - submitted),
            columns.start_in(earliest, latest, now),
        ]
        if wide:
            cells += [
                j.get("reason") or columns.NONE,
                columns.NONE if started is None else columns.duration(now - started),
                f"{j.get('priorityClass', '')} ({j.get('priority', 0)})",
                j.get("user") or columns.NONE,
                j.get("kind") or columns.NONE,
            ]
        keys = {
            "AGE": now - submitted,
            "RUN TIME": None if started is None else now - started,
            "START": earliest,
            "GPUS": j.get("gpus", 0),
            "PRIORITY": j.get("priority", 0),
        }
        ident = f"{j['namespace']}/{j['name']}"
        table.rows.append(Row(j, tuple(cells), keys, ident))
    return table


def start_range(estimate: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
    """``(earliest, latest)`` of an ``estimatedStart``: its range when it has one, else
    its one ``time`` twice; ``(None, None)`` without an estimate or a time."""
    if not estimate:
        return None, None
    earliest = timestamp(estimate.get("earliest")) or timestamp(estimate.get("time"))
    latest = timestamp(estimate.get("latest")) or earliest
    return earliest, latest


def opportunistic_gpus(
    queues: Sequence[Mapping[str, Any]], jobs: Iterable[Mapping[str, Any]]
) -> dict[str, int]:
    """Queue -> GPUs its subtree's opportunistic jobs hold (they are charged no GPUs,
    so the queues' ``used`` leaves them out)."""
    parent = {q["name"]: q.get("parent") for q in queues}
    held: dict[str, int] = {}
    for j in jobs:
        if j.get("mode") != "opportunistic" or not j.get("gpus"):
            continue
        node: str | None = j["queue"]
        while node is not None:
            held[node] = held.get(node, 0) + int(j["gpus"])
            node = parent.get(node)
    return held


def _triple(q: Mapping[str, Any], resource: str) -> str:
    limit = q.get("max") or {}
    return columns.triple(
        (q.get("used") or {}).get(resource),
        (q.get("min") or {}).get(resource),
        limit.get(resource),
    )


def queues_table(
    items: Sequence[Mapping[str, Any]],
    opportunistic: Mapping[str, int],
    *,
    wide: bool,
    show_internal: bool = False,
) -> Table:
    """The queue table (:data:`fleet.service.columns.QUEUE_COLUMNS`; ``wide`` adds the
    wide columns); ``WAIT P95`` only when an item has ``waitP95Seconds``."""
    waits = any(q.get("waitP95Seconds") is not None for q in items)
    narrow = tuple(h for h in columns.QUEUE_COLUMNS if waits or h != "WAIT P95")
    table = Table(narrow + (columns.QUEUE_WIDE_COLUMNS if wide else ()))
    for q in items:
        used, minimum = (q.get("used") or {}), (q.get("min") or {})
        limit = q.get("max") or {}
        opp = opportunistic.get(q["name"], 0)
        gpus_used = _count(used.get(columns.GPU)) + opp
        gpu_max = _count(limit[columns.GPU]) if columns.GPU in limit else None
        borrowed = _count((q.get("borrowed") or {}).get(columns.GPU))
        cells = [
            q["name"],
            columns.gpu_triple(
                gpus_used, _count(minimum.get(columns.GPU)), gpu_max, opp if wide else 0
            ),
            columns.borrowed(borrowed),
            str(q.get("admitted", 0)),
            str(q.get("pending", 0)),
        ]
        wait = q.get("waitP95Seconds")
        if waits:
            cells.append(columns.NONE if wait is None else columns.duration(float(wait)))
        if wide:
            known = set(used) | set(minimum) | set(limit)
            others = sorted(
                r
                for r in known
                if r not in (columns.GPU, columns.CPU, columns.MEMORY)
                and (show_internal or not columns.internal(r))
            )
            fair = q.get("fairShare") or {}
            share = fair.get("share")
            cells += [
                _triple(q, columns.CPU),
                _triple(q, columns.MEMORY),
                ",".join(f"{r}={_triple(q, r)}" for r in others) or columns.NONE,
                limit.get(columns.MAX_JOBS, columns.NONE),
                columns.NONE if not fair else f"{fair.get('weight', 1):g}",
                columns.NONE if share is None else f"{share:.3g}",
                q.get("parent") or columns.NONE,
            ]
        keys = {"GPUS": gpus_used, "BORROWED": borrowed, "WAIT P95": wait}
        table.rows.append(Row(q, tuple(cells), keys, q["name"]))
    return table


def clusters_table(items: Sequence[Mapping[str, Any]], *, wide: bool) -> Table:
    headers = ("NAME", "HEALTH", "GPUS", "USED", "FREE", "LABELS")
    table = Table(headers + (("NODES", "BAD NODES", "DRAINING") if wide else ()))
    for c in items:
        cells = [
            c["name"],
            c["health"],
            str(c["gpus"]["total"]),
            str(c["gpus"]["used"]),
            str(c["gpus"]["free"]),
            ",".join(f"{k}={v}" for k, v in sorted(c["labels"].items())) or columns.NONE,
        ]
        if wide:
            topology = c.get("topology") or {}
            cells += [
                str(topology.get("nodes", columns.NONE)),
                ",".join(c.get("badNodes") or []) or columns.NONE,
                "yes" if c.get("draining") else "no",
            ]
        gpus = c["gpus"]
        keys = {"GPUS": gpus["total"], "USED": gpus["used"], "FREE": gpus["free"]}
        table.rows.append(Row(c, tuple(cells), keys, c["name"]))
    return table


def policies_table(items: Sequence[Mapping[str, Any]], now: float) -> Table:
    table = Table(("NAMESPACE", "NAME", "PRIORITY", "SELECTS", "AGE"))
    for p in items:
        updated = timestamp(p.get("updated")) or now
        cells = (
            p["namespace"],
            p["name"],
            str(p["priority"]),
            ",".join(p["selects"]),
            columns.age(now - updated),
        )
        ident = f"{p['namespace']}/{p['name']}"
        table.rows.append(Row(p, cells, {"AGE": now - updated}, ident))
    return table


def events_table(items: Sequence[Mapping[str, Any]], now: float) -> Table:
    """Events oldest first, as kubectl lists them: the newest at the bottom."""
    table = Table(("LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"))
    for e in sorted(items, key=lambda e: timestamp(e["time"]) or 0.0):
        seen = timestamp(e["time"]) or now
        cells = (
            columns.age(now - seen),
            e["type"],
            e["reason"],
            f"job/{e['namespace']}/{e['name']}",
            e.get("message") or columns.NONE,
        )
        ident = f"{e['uid']}/{e['time']}/{e['reason']}"
        table.rows.append(Row(e, cells, {"LAST SEEN": now - seen}, ident))
    return table


def names(kind: str, items: Iterable[Mapping[str, Any]]) -> list[str]:
    """``-o name``: ``job/team-a/x``, ``queue/team-a``, ``cluster/east``."""
    word = SINGULAR[kind]
    return [
        f"{word}/{i['namespace']}/{i['name']}" if "namespace" in i else f"{word}/{i['name']}"
        for i in items
    ]


# Printing ------------------------------------------------------------------------------


def widths(table: Table) -> list[int]:
    cells = [table.headers, *(r.cells for r in table.rows)]
    return [max(len(row[i]) for row in cells) for i in range(len(table.headers))]


def line(cells: Sequence[str], sizes: Sequence[int]) -> str:
    return "   ".join(c.ljust(w) for c, w in zip(cells, sizes, strict=True)).rstrip()


def render(table: Table, *, headers: bool = True) -> str:
    """kubectl-like aligned columns."""
    sizes = widths(table)
    lines = [line(table.headers, sizes)] if headers else []
    return "\n".join(lines + [line(r.cells, sizes) for r in table.rows])


class Watcher:
    """``--watch``: the first table whole, then only the rows that are new or changed."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, ...]] | None = None
        self._sizes: list[int] = []

    def update(self, table: Table) -> str:
        """What to print for this poll ('' when nothing changed)."""
        steady = [i for i, h in enumerate(table.headers) if h not in VOLATILE]
        now = {r.ident: tuple(r.cells[i] for i in steady) for r in table.rows}
        if self._seen is None:
            self._seen, self._sizes = now, widths(table)
            return render(table)
        changed = [r for r in table.rows if self._seen.get(r.ident) != now[r.ident]]
        self._seen = now
        return "\n".join(line(r.cells, self._sizes) for r in changed)
