"""A safe loader whose plain scalars are resolved once per distinct text.

Theory of operation: for every scalar, libyaml's C parser asks the loader's
Python resolver for the scalar's tag (``!!str``, ``!!int``, ``!!bool`` ...).
For a plain (unquoted) scalar PyYAML tries the implicit resolvers registered
for its first character, a regular expression each, and the answer depends on
the text alone as long as the loader has no path resolvers (the safe loaders
have none; one given path resolvers later takes PyYAML's own path again).
Submissions repeat the same keys and values (``apiVersion``, ``kind``,
``metadata``, ``Worker`` ...) in every document, so
:func:`cached_resolver` gives a loader class whose ``resolve`` remembers the
tag of each plain scalar text it has resolved, in a table of at most
:data:`MAX_REMEMBERED` texts of at most :data:`MAX_TEXT` characters (emptied
when full: a long-running service sees many distinct names).  The tags, and
so the data built, are exactly PyYAML's; quoted scalars and collections take
PyYAML's own path, which is cheap for them.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from yaml.nodes import ScalarNode

#: Distinct plain scalar texts remembered at most (about 100 KiB of table).
MAX_REMEMBERED: Final = 4096
#: Longer texts are resolved each time (they are rarely repeated).
MAX_TEXT: Final = 64

L = TypeVar("L", bound=type[Any])


#: loader class -> its subclass (one per class, so one table per class)
_MADE: dict[type[Any], type[Any]] = {}


def cached_resolver(loader_class: L) -> L:
    """A subclass of ``loader_class`` (the same one at every call) that resolves plain
    scalars through a table it shares; ``loader_class`` itself when it has path
    resolvers (then the tag depends on the path)."""
    if loader_class.yaml_path_resolvers:
        return loader_class
    made = _MADE.get(loader_class)
    if made is None:
        made = _MADE[loader_class] = _subclass(loader_class)
    return made  # type: ignore[return-value]


def _subclass(loader_class: type[Any]) -> type[Any]:
    table: dict[str, str] = {}
    resolve = loader_class.resolve
    descend = loader_class.descend_resolver
    ascend = loader_class.ascend_resolver

    def cached(self: Any, kind: type, value: Any, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode and implicit[0] and not self.yaml_path_resolvers:
            tag = table.get(value)
            if tag is None:
                tag = resolve(self, kind, value, implicit)
                if len(value) <= MAX_TEXT:
                    if len(table) >= MAX_REMEMBERED:
                        table.clear()
                    table[value] = tag
            return tag
        return str(resolve(self, kind, value, implicit))

    def descend_resolver(self: Any, *args: Any) -> None:
        """PyYAML's, which does nothing without path resolvers: not called then."""
        if self.yaml_path_resolvers:
            descend(self, *args)

    def ascend_resolver(self: Any) -> None:
        if self.yaml_path_resolvers:
            ascend(self)

    name = f"Cached{loader_class.__name__}"
    return type(
        name,
        (loader_class,),
        {
            "resolve": cached,
            "descend_resolver": descend_resolver,
            "ascend_resolver": ascend_resolver,
            "__doc__": f"{loader_class.__name__} with plain scalars resolved once per text.",
            "__module__": __name__,
        },
    )
