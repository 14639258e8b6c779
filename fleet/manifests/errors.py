"""Validation issues with a document index and a field path, and the error that carries them.

Theory of operation: every check in ``fleet.manifests`` (YAML syntax, pydantic
models, quantities, quota-tree rules, queue routing, ...) produces
:class:`SpecIssue` values instead of raising at the first problem, so a user
sees everything wrong with a file at once.  A loader collects the issues of
all documents and raises one :class:`SpecError` if there is any; nothing is
partially accepted.  An issue renders as one line::

    document 2 (PyTorchJob default/train): spec.pytorchReplicaSpecs.Worker.replicas: ...

Documents are numbered from 0 in the order they appear in the YAML stream
(empty documents keep their number).  Field paths are dotted, with ``[i]`` for
list indices; map keys are written as they are (``max.nvidia.com/gpu``).

Messages quote at most :data:`MAX_QUOTED` characters of an offending value
(then ``…``), so a 50 MB name costs a line, not 100 MB of output.
:func:`shorten` is the one place that cuts and :func:`quote` is how a message
quotes a value (both in :mod:`fleet.manifests.wording`, shared with the workload
kinds' schema checks); :func:`shorten_quoted` cuts a value out of a message
built elsewhere (the core's errors).  A :class:`SpecIssue` shortens its name, each
part of its path, and, as a last resort, its whole message
(:data:`MAX_MESSAGE`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from fleet.manifests.wording import ELLIPSIS, MAX_QUOTED, quote, shorten

__all__ = [
    "ELLIPSIS",
    "MAX_MESSAGE",
    "MAX_QUOTED",
    "Problem",
    "SpecError",
    "SpecIssue",
    "quote",
    "shorten",
    "shorten_quoted",
]

#: (field path, message): a problem found inside one document, before it gets its index.
Problem = tuple[str, str]

#: Characters of one issue's message kept when a message is longer (a safety net).
MAX_MESSAGE: Final = 1000


def shorten_quoted(message: str, value: str) -> str:
    """``message`` (built elsewhere) with every quotation of ``value`` shortened."""
    if len(value) <= MAX_QUOTED:
        return message
    return message.replace(repr(value), quote(value)).replace(value, shorten(value))


def _shorten_path(path: str) -> str:
    if len(path) <= MAX_QUOTED:
        return path
    return ".".join(shorten(part) for part in path.split("."))


@dataclass(frozen=True, slots=True)
class SpecIssue:
    """One problem in one document: where it is and what is wrong."""

    document: int  # 0-based index in the YAML stream
    kind: str  # "" when the document's kind is unknown (e.g. a YAML syntax error)
    name: str  # "namespace/name" for namespaced objects, "name" otherwise, "" if unknown
    path: str  # dotted field path, "" for the document as a whole
    message: str

    def __post_init__(self) -> None:
        # Names, map keys in paths and messages may hold huge values from the input.
        object.__setattr__(self, "name", shorten(self.name))
        object.__setattr__(self, "path", _shorten_path(self.path))
        object.__setattr__(self, "message", shorten(self.message, MAX_MESSAGE))

    def __str__(self) -> str:
        what = " ".join(part for part in (self.kind, self.name) if part)
        where = f"document {self.document}" + (f" ({what})" if what else "")
        if self.path:
            return f"{where}: {self.path}: {self.message}"
        return f"{where}: {self.message}"


class SpecError(ValueError):
    """One or more issues that make a set of documents unacceptable."""

    issues: tuple[SpecIssue, ...]

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues = tuple(issues)
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(str(issue) for issue in self.issues)

    def __str__(self) -> str:
        return self.render()
