"""Multi-document YAML in, validated models out, every problem with its place.

Theory of operation: :func:`parse_documents` reads a YAML stream with
``yaml.safe_load_all`` and numbers the documents from 0 in stream order; empty
documents are skipped but keep their number, so "document 3" is always the
fourth document of the file.  A YAML syntax error becomes an issue naming its
line and ends the stream (the parser cannot resynchronise).  Each document is
dispatched on ``(apiVersion, kind)`` to its pydantic model; pydantic's errors
become issues with dotted paths, and a valid model's own ``problems()`` (the
checks that need map keys or several fields) are added.  The function never
raises for bad input: it returns the good documents *and* the issues, and the
loaders in :mod:`fleet.spec.convert` refuse everything if there is any issue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pydantic
import yaml

from fleet.spec import models
from fleet.spec.errors import SpecError, SpecIssue

AnyModel = (
    models.ElasticQuotaTreeModel
    | models.PropagationPolicyModel
    | models.PyTorchJobModel
    | models.MemberClusterModel
)

#: kind -> {apiVersion: model}
KINDS: Final[Mapping[str, Mapping[str, type[AnyModel]]]] = {
    "ElasticQuotaTree": {models.QUOTA_API: models.ElasticQuotaTreeModel},
    "PropagationPolicy": {
        models.ACK_POLICY_API: models.PropagationPolicyModel,
        models.KARMADA_POLICY_API: models.PropagationPolicyModel,
    },
    "PyTorchJob": {models.PYTORCH_API: models.PyTorchJobModel},
    "MemberCluster": {models.FLEET_API: models.MemberClusterModel},
}
_NAMESPACED: Final = frozenset({"PropagationPolicy", "PyTorchJob"})


@dataclass(frozen=True, slots=True)
class Document:
    """One valid object and where it came from."""

    index: int
    kind: str
    name: str  # "namespace/name" for namespaced kinds
    model: AnyModel

    def issue(self, path: str, message: str) -> SpecIssue:
        return SpecIssue(self.index, self.kind, self.name, path, message)


def loc_to_path(loc: Sequence[int | str]) -> str:
    """Pydantic's error location as a dotted path with ``[i]`` for list indices."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


def _message(error: Mapping[str, Any]) -> str:
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def display_name(kind: str, raw: Mapping[str, Any]) -> str:
    """Best-effort ``ns/name`` (or ``name``) of a raw document, for messages."""
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    name = meta.get("name")
    if not isinstance(name, str):
        return ""
    if kind in _NAMESPACED:
        ns = meta.get("namespace")
        return f"{ns if isinstance(ns, str) and ns else 'default'}/{name}"
    return name


def _load_one(index: int, raw: object) -> tuple[Document | None, list[SpecIssue]]:
    if not isinstance(raw, Mapping):
        kind_name = type(raw).__name__
        return None, [
            SpecIssue(index, "", "", "", f"a document must be a mapping, not {kind_name}")
        ]
    kind = raw.get("kind")
    api = raw.get("apiVersion")
    if not isinstance(kind, str) or kind not in KINDS:
        known = ", ".join(sorted(KINDS))
        return None, [
            SpecIssue(index, "", "", "kind", f"unknown kind {kind!r}; Fleet reads {known}")
        ]
    name = display_name(kind, raw)
    versions = KINDS[kind]
    if not isinstance(api, str) or api not in versions:
        expected = " or ".join(sorted(versions))
        msg = f"{kind} must have apiVersion {expected}, not {api!r}"
        return None, [SpecIssue(index, kind, name, "apiVersion", msg)]
    model_type = versions[api]
    try:
        model = model_type.model_validate(raw)
    except pydantic.ValidationError as e:
        issues = [
            SpecIssue(index, kind, name, loc_to_path(err["loc"]), _message(err))
            for err in e.errors(include_url=False)
        ]
        return None, issues
    doc = Document(index, kind, name, model)
    return doc, [doc.issue(path, msg) for path, msg in model.problems()]


def parse_documents(text: str) -> tuple[list[Document], list[SpecIssue]]:
    """Every valid document and every issue found in a YAML stream."""
    docs: list[Document] = []
    issues: list[SpecIssue] = []
    index = 0
    stream = yaml.safe_load_all(text)
    while True:
        try:
            raw = next(stream)
        except StopIteration:
            break
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            problem = getattr(e, "problem", None) or str(e)
            issues.append(SpecIssue(index, "", "", "", f"YAML syntax error at {where}{problem}"))
            break
        if raw is not None:
            doc, found = _load_one(index, raw)
            issues.extend(found)
            if doc is not None:
                docs.append(doc)
        index += 1
    return docs, issues


def load_documents(text: str, kinds: Sequence[str] | None = None) -> list[Document]:
    """Valid documents, or one :class:`SpecError` with every issue.

    ``kinds`` limits which kinds the file may hold (e.g. a quota file).
    """
    docs, issues = parse_documents(text)
    if kinds is not None:
        allowed = ", ".join(kinds)
        for doc in docs:
            if doc.kind not in kinds:
                issues.append(
                    doc.issue("kind", f"{doc.kind} does not belong here; expected {allowed}")
                )
    if issues:
        raise SpecError(sorted(issues, key=lambda i: i.document))
    return docs
