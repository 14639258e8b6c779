"""Reading a multi-document YAML stream within bounds: documents, nesting, aliases.

Theory of operation: PyYAML builds a document in three steps: the parser
turns text into events, the composer turns events into a node graph, and the
constructor turns nodes into plain Python data.  An alias (``*name``) makes
the composer reuse the node of its anchor (``&name``), so a few hundred bytes
of anchors that each repeat the previous one ten times ("billion laughs")
stand for 10**9 nodes: nothing is big until the data is walked, and then
everything is.  libyaml's composer also recurses once per nesting level in C,
so a few hundred kilobytes of ``[[[[...`` crash the interpreter.

:func:`read_documents` therefore drives the loader's own parser (libyaml's
C parser when the loader is ``CSafeLoader``) and composes each document
itself, without recursion and with PyYAML's composer rules (tag resolution,
undefined and duplicate anchors), while counting:

* documents: at most :attr:`YamlLimits.max_documents` in the stream;
* nesting: at most :attr:`YamlLimits.max_depth` lists and mappings inside
  each other;
* alias expansion: the size of every node is known when it closes (1 for a
  scalar, 1 plus its children for a collection, an alias counting the full
  size of what it refers to), so each alias adds the number of nodes it
  stands for to a running total, which may not pass
  :attr:`YamlLimits.max_alias_nodes` for the whole stream.  Counting is
  arithmetic on sizes already known: nothing is expanded to count it;
* an alias inside the node it refers to (a recursive structure) is refused:
  no Kubernetes object is infinite.

A bound that is passed raises :class:`YamlLimitError` at the event that passed
it, before anything bigger is built; the composed node is handed to the
loader's constructor (``construct_document``), which builds the same plain
data ``yaml.load_all`` would.  Syntax errors are the parser's
``yaml.YAMLError``; a scalar the constructor cannot build is a ``ValueError``
(the constructor's own, or one made of the ``IndexError`` and the like that
some malformed scalars raise in it, such as an empty ``!!float``).

**The quick path.**  Most streams (every ordinary manifest) hold no alias or
anchor and nest shallowly, which a glance at the text can prove: without
``*`` and ``&`` nothing can expand, and the nesting of lists and mappings is
bounded by the number of lines and indicators and by the widest line.  When
that bound is small, the loader's own composer (libyaml's, in C) composes
each document, and a small recursive constructor builds it if it holds only
strings, numbers, booleans, nulls, lists and mappings, nested no deeper than
the limit; numbers are built by the loader's own constructor.  Anything else
(another tag, a merge key, a list as a key, nesting past the limit, one
document too many) and any error send the stream down the bounded path,
which reads it or raises the error it would have raised anyway, with its
line and column: the quick path changes the speed and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import yaml
from yaml.composer import ComposerError
from yaml.events import (
    AliasEvent,
    Event,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

#: A loader class that builds plain data only (no Python objects).
SafeLoaderType: TypeAlias = type[yaml.SafeLoader] | type[yaml.CSafeLoader]
SafeLoader: TypeAlias = yaml.SafeLoader | yaml.CSafeLoader

#: Lists and mappings inside each other.  Kubernetes objects nest a dozen
#: levels; far below the depth where recursive code (libyaml's composer,
#: ``json``, validators) runs out of stack.
DEFAULT_MAX_DEPTH: Final = 100
#: Nodes that aliases may stand for in one stream.
DEFAULT_MAX_ALIAS_NODES: Final = 100_000


@dataclass(frozen=True, slots=True)
class YamlLimits:
    """Bounds on one stream; None means unbounded."""

    max_documents: int | None = None
    max_depth: int | None = DEFAULT_MAX_DEPTH
    max_alias_nodes: int | None = DEFAULT_MAX_ALIAS_NODES


#: The nesting that libyaml (0.2.6 on) refuses by itself, and the words it says so with.
_PARSER_MAX_DEPTH: Final = 1000
_PARSER_DEPTH_PROBLEM: Final = "exceeded maximum nesting depth"

#: The bounds every reader applies unless told otherwise.
DEFAULT_LIMITS: Final = YamlLimits()


class YamlLimitError(Exception):
    """A stream that passes a bound; ``document`` is the 0-based index where it did."""

    def __init__(self, document: int, message: str, mark: object | None = None) -> None:
        line, column = getattr(mark, "line", None), getattr(mark, "column", None)
        where = ""
        if isinstance(line, int) and isinstance(column, int):
            where = f"line {line + 1}, column {column + 1}: "
        super().__init__(f"{where}{message}")
        self.document = document
        self.message = message
        self.where = where


@dataclass(slots=True)
class _Open:
    """A list or mapping being composed."""

    node: SequenceNode | MappingNode
    anchor: str | None
    mapping: bool
    size: int = 1
    key: Node | None = None  # a mapping's key that waits for its value


@dataclass(slots=True)
class _Budget:
    """What the stream has used of its limits so far."""

    limits: YamlLimits
    alias_nodes: int = 0

    def alias(self, document: int, name: str, size: int, event: Event) -> None:
        self.alias_nodes += size
        bound = self.limits.max_alias_nodes
        if bound is not None and self.alias_nodes > bound:
            raise YamlLimitError(
                document,
                f"aliases expand to more than {bound:,} nodes (alias *{name} alone stands for "
                f"{size:,}); a YAML alias bomb is not a manifest: write the values out",
                event.start_mark,
            )


#: Plain scalars whose resolved tag is remembered per document (speed; tags depend
#: only on the text and on whether it was quoted).
_TAG_MEMO: Final = 4096


def _position(stack: list[_Open]) -> tuple[Node | None, object]:
    """Parent and index of the next node, as PyYAML's path resolvers see them."""
    if not stack:
        return None, None
    parent = stack[-1]
    if parent.mapping:
        return parent.node, parent.key
    return parent.node, len(parent.node.value)


def _compose(loader: SafeLoader, document: int, budget: _Budget) -> Node:
    """The node of the next document (its DOCUMENT-START is next in the stream)."""
    next_event: Callable[[], Any] = loader.get_event
    resolve: Callable[[type[Node], str | None, object], str] = loader.resolve
    next_event()  # DOCUMENT-START
    anchors: dict[str, Node] = {}
    sizes: dict[str, int] = {}  # anchors of closed nodes -> their expanded size
    tags: dict[tuple[str, object], str] = {}
    stack: list[_Open] = []
    root: Node | None = None
    max_depth = budget.limits.max_depth
    # PyYAML's path resolvers (none in the safe loaders) see each node's place.
    paths = bool(getattr(loader, "yaml_path_resolvers", None))

    def attach(node: Node, size: int) -> None:
        nonlocal root
        if not stack:
            root = node
            return
        parent = stack[-1]
        parent.size += size
        if parent.mapping:
            if parent.key is None:
                parent.key = node
            else:
                parent.node.value.append((parent.key, node))
                parent.key = None
        else:
            parent.node.value.append(node)

    while root is None:
        event = next_event()
        # libyaml's marks are typed apart from PyYAML's but behave alike.
        start: Any = event.start_mark
        if isinstance(event, ScalarEvent):
            anchor = event.anchor
            if anchor is not None and anchor in anchors:
                _duplicate(anchor, anchors[anchor], start)
            tag = event.tag
            if paths:
                loader.descend_resolver(*_position(stack))
            if tag is None or tag == "!":
                key = (event.value, event.implicit)
                tag = None if paths else tags.get(key)
                if tag is None:
                    tag = resolve(ScalarNode, event.value, event.implicit)
                    if not paths and len(tags) < _TAG_MEMO:
                        tags[key] = tag
            end: Any = event.end_mark
            node = ScalarNode(tag, event.value, start, end, style=event.style)
            if paths:
                loader.ascend_resolver()
            if anchor is not None:
                anchors[anchor] = node
                sizes[anchor] = 1
            attach(node, 1)
        elif isinstance(event, SequenceEndEvent | MappingEndEvent) and stack:
            done = stack.pop()
            done.node.end_mark = event.end_mark
            if paths:
                loader.ascend_resolver()
            if done.anchor is not None:
                sizes[done.anchor] = done.size
            attach(done.node, done.size)
        elif isinstance(event, AliasEvent):
            name = event.anchor or ""
            if name not in anchors:
                raise ComposerError(None, None, f"found undefined alias {name!r}", start)
            if name not in sizes:
                raise YamlLimitError(
                    document,
                    f"alias *{name} is inside the node it refers to; "
                    "recursive structures are not accepted",
                    start,
                )
            budget.alias(document, name, sizes[name], event)
            attach(anchors[name], sizes[name])
        elif isinstance(event, SequenceStartEvent | MappingStartEvent):
            anchor = event.anchor
            if anchor is not None and anchor in anchors:
                _duplicate(anchor, anchors[anchor], start)
            if max_depth is not None and len(stack) >= max_depth:
                raise YamlLimitError(
                    document, f"lists and mappings nest more than {max_depth} levels deep", start
                )
            if paths:
                loader.descend_resolver(*_position(stack))
            mapping = isinstance(event, MappingStartEvent)
            kind: type[SequenceNode] | type[MappingNode] = MappingNode if mapping else SequenceNode
            tag = event.tag
            if tag is None or tag == "!":
                tag = resolve(kind, None, event.implicit)
            collection = kind(tag, [], start, None, flow_style=event.flow_style)
            if anchor is not None:
                anchors[anchor] = collection
            stack.append(_Open(collection, anchor, mapping))
        else:
            raise ComposerError(None, None, "expected a node", start)
    next_event()  # DOCUMENT-END
    return root


def _duplicate(anchor: str, first: Node, start: Any) -> None:
    raise ComposerError(
        f"found duplicate anchor {anchor!r}; first occurrence",
        first.start_mark,
        "second occurrence",
        start,
    )


#: Nesting below which libyaml's recursive composer may read a stream directly.
_QUICK_NESTING: Final = 1_000


def _nesting_bound(text: str) -> int:
    """A bound on how deep lists and mappings can nest in ``text`` (no aliases).

    Every level starts on a new line or at an indicator (``[ { - ? :``); in
    block style every second level is also indented further, so the widest
    line bounds the block levels, and flow levels each need a bracket.
    """
    flow = text.count("[") + text.count("{")
    indicators = flow + text.count("-") + text.count("?") + text.count(":")
    by_lines = text.count("\n") + 1 + indicators
    if by_lines <= _QUICK_NESTING:  # the usual manifest: no need to find the widest line
        return by_lines
    widest = max(map(len, text.split("\n")))
    return min(by_lines, 2 * (widest + 1) + flow)


#: Levels of lists and mappings the quick constructor builds (recursively) at most.
_QUICK_LEVELS: Final = 200
_TAG: Final = "tag:yaml.org,2002:"


class _Unusual(Exception):
    """A stream the quick path leaves to the bounded one."""


_STR: Final = _TAG + "str"
_NULL: Final = _TAG + "null"
_BOOL: Final = _TAG + "bool"
_INT: Final = _TAG + "int"
_FLOAT: Final = _TAG + "float"
_MAP: Final = _TAG + "map"
_SEQ: Final = _TAG + "seq"
_MERGE: Final = _TAG + "merge"


def _build(node: Node, loader: SafeLoader, levels: int) -> object:
    """The plain data of ``node``: strings, numbers, booleans, nulls, lists and mappings only.

    ``levels`` is how many lists and mappings may still nest; anything else
    (other tags, merge keys, collections as keys, deeper nesting, node classes
    other than PyYAML's own) is :class:`_Unusual`.
    """
    tag = node.tag
    kind = type(node)
    if kind is ScalarNode:
        if tag == _STR:
            return node.value
        if tag == _NULL:
            return None
        if tag == _BOOL:
            return loader.bool_values[node.value.lower()]
        if tag == _INT:
            return loader.construct_yaml_int(node)  # type: ignore[arg-type]
        if tag == _FLOAT:
            return loader.construct_yaml_float(node)  # type: ignore[arg-type]
        raise _Unusual
    if levels <= 0:
        raise _Unusual
    if kind is MappingNode and tag == _MAP:
        out: dict[object, object] = {}
        inner = levels - 1
        for key, value in node.value:
            if type(key) is not ScalarNode or key.tag == _MERGE:
                raise _Unusual
            out[_build(key, loader, levels)] = _build(value, loader, inner)
        return out
    if kind is SequenceNode and tag == _SEQ:
        inner = levels - 1
        return [_build(item, loader, inner) for item in node.value]
    raise _Unusual


def _read_quickly(
    text: str, loader_class: SafeLoaderType, limits: YamlLimits
) -> list[object] | None:
    """The documents of a stream the quick path may read, or None (see the module docstring)."""
    if "*" in text or "&" in text or _nesting_bound(text) > _QUICK_NESTING:
        return None
    levels = _QUICK_LEVELS if limits.max_depth is None else min(limits.max_depth, _QUICK_LEVELS)
    loader = loader_class(text)
    found: list[object] = []
    try:
        while loader.check_node():
            if limits.max_documents is not None and len(found) >= limits.max_documents:
                return None
            node = loader.get_node()
            if node is None:
                return None
            found.append(_build(node, loader, levels))
    except Exception:  # the bounded path raises the error, with its place
        return None
    finally:
        loader.dispose()
    return found


def read_documents(
    text: str, loader_class: SafeLoaderType, limits: YamlLimits = DEFAULT_LIMITS
) -> Iterator[object]:
    """Each document's plain data in stream order (None for an empty document).

    Raises ``yaml.YAMLError`` (syntax), ``ValueError`` (a scalar that cannot be
    built) or :class:`YamlLimitError` at the document where it happens.
    """
    quick = _read_quickly(text, loader_class, limits)
    if quick is not None:
        yield from quick
        return
    loader = loader_class(text)
    budget = _Budget(limits)
    document = 0
    try:
        if loader.check_event(StreamStartEvent):
            loader.get_event()
        while not loader.check_event(StreamEndEvent):
            bound = limits.max_documents
            if bound is not None and document >= bound:
                raise YamlLimitError(
                    document,
                    f"more than {bound:,} document{'s' if bound != 1 else ''} in one stream; "
                    f"the limit is {bound:,}",
                    getattr(loader.peek_event(), "start_mark", None),
                )
            node = _compose(loader, document, budget)
            try:
                data = loader.construct_document(node)
            except (ArithmeticError, LookupError, TypeError) as e:
                # PyYAML's constructors fail so on some malformed scalars (``!!float ""``).
                raise ValueError(f"a malformed value ({e})") from e
            yield data
            document += 1
    except yaml.MarkedYAMLError as e:
        # libyaml 0.2.6 on (PyYAML 6.0.3 on) refuses nesting deeper than its own
        # bound while it reads ahead, before the composer sees the level that
        # passes ours: the same refusal, worded as ours.
        if _PARSER_DEPTH_PROBLEM not in (e.problem or ""):
            raise
        depth = limits.max_depth
        if depth is not None and depth < _PARSER_MAX_DEPTH:
            levels = f"{depth}"
        else:
            levels = f"{_PARSER_MAX_DEPTH:,} (the YAML parser's own limit)"
        message = f"lists and mappings nest more than {levels} levels deep"
        raise YamlLimitError(document, message, e.problem_mark) from None
    finally:
        loader.dispose()
