"""How a problem in a YAML document is worded: field paths, quoted values, types, suggestions.

Theory of operation: the checks of Fleet's own models (:mod:`fleet.manifests`)
and of the workload kinds' CRD schemas (:mod:`fleet.manifests.kinds.schema`) word their
problems alike, so these helpers live here, below both.  A field path is
dotted with ``[i]`` for list indices and map keys written as they are
(:func:`loc_to_path`: ``spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]``).
A message quotes at most :data:`MAX_QUOTED` characters of an offending value
(then ``…``): :func:`shorten` is the one place that cuts, :func:`quote` is
how a message quotes a value, so a 50 MB name costs a line, not 100 MB of
output.  :func:`yaml_type` says what a value is in a YAML author's words and
:func:`wrong_type` builds "expected X, not Y" with a hint when quotes are the
only mistake.  :func:`did_you_mean` finds the known field name closest to an
unknown one (``difflib``), nothing for a name no field is as long as.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

#: Characters of an offending value (a name, a key, a quantity, ...) that a message quotes.
MAX_QUOTED: Final = 60
#: What replaces the cut end of a value.
ELLIPSIS: Final = "…"


def shorten(text: str, limit: int = MAX_QUOTED) -> str:
    """``text`` if it has at most ``limit`` characters, else its first ``limit`` and ``…``."""
    if len(text) <= limit:
        return text
    return text[:limit] + ELLIPSIS


def quote(value: object) -> str:
    """A value as a message quotes it: ``repr`` of at most :data:`MAX_QUOTED` characters."""
    if isinstance(value, str):
        return repr(shorten(value))
    return shorten(repr(value))


def loc_to_path(loc: Sequence[int | str]) -> str:
    """A location (keys and list indices) as a dotted path with ``[i]`` for list indices."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def yaml_type(value: object) -> str:
    """What a YAML value is, in words a YAML author uses."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {quote(value)}"
    if isinstance(value, int | float):
        return f"the number {quote(value)}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


def wrong_type(expected: str, value: object, scalar: str = "") -> str:
    """``expected X, not Y``; ``(remove the quotes)`` when ``value`` is a string that
    reads as the ``scalar`` expected (``"integer"`` or ``"boolean"``)."""
    msg = f"expected {expected}, not {yaml_type(value)}"
    if isinstance(value, str) and (
        (scalar == "integer" and value.strip().lstrip("-").isdigit())
        or (scalar == "boolean" and value.strip().lower() in ("true", "false"))
    ):
        msg += " (remove the quotes)"
    return msg


def did_you_mean(wrong: str, known: Iterable[str]) -> str | None:
    """The known name closest to ``wrong``, if one is close enough (``difflib``)."""
    if len(wrong) > MAX_QUOTED:  # no field name is this long: nothing to suggest
        return None
    close = difflib.get_close_matches(wrong, list(known), n=1)
    return close[0] if close else None
