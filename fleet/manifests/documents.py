"""Multi-document YAML in, validated models out, every problem with its place.

Theory of operation: :func:`parse_documents` reads a YAML stream with the
safe loader of libyaml's C binding (``yaml.CSafeLoader``) when PyYAML has it,
else PyYAML's pure-Python ``yaml.SafeLoader`` (:data:`YAML_LOADER`; both build
only plain data), through :func:`fleet.manifests.yaml_stream.read_documents`,
which composes each document within bounds (:class:`YamlLimits`: nesting
depth, nodes that aliases stand for, and optionally the number of documents),
and numbers the documents from 0 in stream order; empty
documents are skipped but keep their number, so "document 3" is always the
fourth document of the file.  A YAML syntax error becomes an issue naming its
line and ends the stream (the parser cannot resynchronise); so does a value
the loader cannot build (a date that does not exist, an integer of thousands
of digits) and a bound that is passed (an alias bomb, a 10,000-deep list).
Each document is dispatched on ``(apiVersion, kind)`` to its
pydantic model (a kind Fleet does not read, such as a Deployment, is told
the workload kinds it runs with their apiVersions, and Fleet's own kinds;
a job of a workload kind, or a training runtime, is first checked strictly
against its kind's CRD schema, :mod:`fleet.manifests.kinds.schema`, and goes
no further with a problem there); pydantic's errors
become issues with dotted paths, and a valid model's own ``problems()`` (the
checks that need map keys or several fields) are added.  In an
ElasticQuotaTree every issue inside a node names it (``node 'team-a': ...``,
:func:`fleet.core.quota_rules.node_message`), as the tree's own rules do.  A valid
:class:`Document` keeps the plain data it was read from (``raw``).  The
function never raises for bad input: it returns the good documents *and* the
issues, and the loaders in :mod:`fleet.manifests.convert` refuse everything if
there is any issue.  Messages quote values through
:func:`fleet.manifests.errors.quote`, which keeps a short prefix of a long
value.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import pydantic
import yaml

from fleet.core.quota_rules import node_message
from fleet.manifests import models
from fleet.manifests.errors import SpecError, SpecIssue, quote, shorten
from fleet.manifests.kinds import registry, schema, trainjob
from fleet.manifests.kinds.base import WorkloadModel
from fleet.manifests.kinds.trainjob import TrainingRuntimeModel
from fleet.manifests.wording import did_you_mean, loc_to_path, wrong_type, yaml_type
from fleet.manifests.yaml_resolver import cached_resolver
from fleet.manifests.yaml_stream import (
    DEFAULT_LIMITS,
    SafeLoaderType,
    YamlLimitError,
    YamlLimits,
    read_documents,
)


def safe_loader() -> SafeLoaderType:
    """libyaml's ``CSafeLoader`` when PyYAML was built with libyaml, else ``SafeLoader``,
    with plain scalars resolved once per distinct text (:mod:`fleet.manifests.yaml_resolver`)."""
    if hasattr(yaml, "CSafeLoader"):
        return cached_resolver(yaml.CSafeLoader)
    return cached_resolver(yaml.SafeLoader)


#: The loader :func:`parse_documents` uses (the C one is several times faster).
YAML_LOADER: SafeLoaderType = safe_loader()

AnyModel = (
    models.ElasticQuotaTreeModel
    | models.PropagationPolicyModel
    | WorkloadModel
    | models.MemberClusterModel
    | TrainingRuntimeModel
)


def _kinds() -> dict[str, dict[str, type[AnyModel]]]:
    out: dict[str, dict[str, type[AnyModel]]] = {
        "ElasticQuotaTree": {models.QUOTA_API: models.ElasticQuotaTreeModel},
        "PropagationPolicy": {
            models.ACK_POLICY_API: models.PropagationPolicyModel,
            models.KARMADA_POLICY_API: models.PropagationPolicyModel,
        },
        "MemberCluster": {models.FLEET_API: models.MemberClusterModel},
    }
    for kind in registry.KINDS:
        out.setdefault(kind.kind, {})[kind.api_version] = kind.model
    for runtime in trainjob.RUNTIME_KINDS:
        out[runtime] = {trainjob.API_VERSION: TrainingRuntimeModel}
    return out


#: kind -> {apiVersion: model}: Fleet's own objects and every workload kind.
KINDS: Final[Mapping[str, Mapping[str, type[AnyModel]]]] = _kinds()
_NAMESPACED: Final = frozenset(
    {"PropagationPolicy", trainjob.RUNTIME, *(k.kind for k in registry.KINDS)}
)
#: What a document of an unknown kind is told Fleet reads: the workload kinds it
#: runs with their apiVersions, then its own objects.
_KNOWN: Final = (
    f"jobs of the kinds it runs: {registry.names()}; and its own "
    f"{', '.join(sorted(k for k in KINDS if k not in {r.kind for r in registry.KINDS}))}"
)


@dataclass(frozen=True, slots=True)
class Document:
    """One valid object and where it came from."""

    index: int
    kind: str
    name: str  # "namespace/name" for namespaced kinds
    model: AnyModel
    #: The plain data the model was validated from (a YAML mapping).
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def issue(self, path: str, message: str) -> SpecIssue:
        return SpecIssue(self.index, self.kind, self.name, path, message)


#: Karmada fields Fleet knows and refuses (docs/decisions/0003), and why.
UNSUPPORTED_FIELDS: Final[Mapping[str, str]] = {
    "clusterAffinities": "Fleet takes one clusterAffinity (clusterNames, exclude, labelSelector)",
    "clusterTolerations": "Fleet does not read cluster taints",
    "spreadConstraints": "Fleet places a whole job in one member cluster",
    "fieldSelector": "select clusters with clusterNames or labelSelector",
}

#: pydantic error type -> what was expected, in plain words (the input is appended).
_EXPECTED: Final[Mapping[str, str]] = {
    "dict_type": "a mapping (key: value)",
    "model_type": "a mapping (key: value)",
    "model_attributes_type": "a mapping (key: value)",
    "list_type": "a list",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
}


def _message(error: Mapping[str, Any]) -> str:
    """pydantic's message, rephrased for someone who wrote YAML, not Python."""
    kind = str(error.get("type", ""))
    value = error.get("input")
    ctx = error.get("ctx") or {}
    expected = _EXPECTED.get(kind)
    if expected is not None:
        scalar = {"int_type": "integer", "int_parsing": "integer", "bool_type": "boolean"}
        return wrong_type(expected, value, scalar.get(kind, ""))
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        field = str(error["loc"][-1]) if error.get("loc") else ""
        if field in UNSUPPORTED_FIELDS:
            return f"not supported: {UNSUPPORTED_FIELDS[field]}"
        return "unknown field"
    if kind == "literal_error" and "expected" in ctx:
        return f"must be {ctx['expected']}, not {yaml_type(value)}"
    if kind in ("greater_than_equal", "less_than_equal") and isinstance(value, int | float):
        bound = ctx.get("ge", ctx.get("le"))
        word = "least" if kind == "greater_than_equal" else "most"
        return f"must be at {word} {bound}, not {quote(value)}"
    if kind == "too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "must not be empty"
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def _field_names(model: type[pydantic.BaseModel], loc: Sequence[int | str]) -> list[str]:
    """The field names (as written in YAML) of the model that holds ``loc``'s last part."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None:
            return []
        found = None
        for name, info in fields.items():
            if part in (name, info.alias):
                found = info.annotation
                break
        current = _model_in(found)
    fields = getattr(current, "model_fields", None)
    if not fields:
        return []
    return [info.alias or name for name, info in fields.items()]


def _model_in(annotation: object) -> type[pydantic.BaseModel] | None:
    """The pydantic model inside ``X``, ``X | None``, ``list[X]`` or ``Annotated[X, ...]``."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _issue_message(model: type[pydantic.BaseModel], error: Mapping[str, Any]) -> str:
    msg = _message(error)
    if error.get("type") == "extra_forbidden" and error["loc"] and msg == "unknown field":
        close = did_you_mean(str(error["loc"][-1]), _field_names(model, error["loc"]))
        if close is not None:
            msg += f" (did you mean {close!r}?)"
    return msg


def _message_at(
    model: type[pydantic.BaseModel], raw: Mapping[str, Any], error: Mapping[str, Any]
) -> str:
    """The issue's message; in a quota tree, naming the node it is about, as the tree's rules do."""
    msg = _issue_message(model, error)
    if model is not models.ElasticQuotaTreeModel:
        return msg
    node = models.quota_node_name(raw, error["loc"])
    return msg if node is None else node_message(shorten(node), msg)


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
        msg = f"a document must be a mapping (key: value), not {yaml_type(raw)}"
        return None, [SpecIssue(index, "", "", "", msg)]
    kind = raw.get("kind")
    api = raw.get("apiVersion")
    if not isinstance(kind, str) or kind not in KINDS:
        if kind is None:
            msg = f"kind is missing; Fleet reads {_KNOWN}"
        else:
            msg = f"unknown kind {quote(kind)}"
            same = [k for k in KINDS if isinstance(kind, str) and k.lower() == kind.lower()]
            msg += f" (did you mean {same[0]}?)" if same else f"; Fleet reads {_KNOWN}"
        return None, [SpecIssue(index, "", "", "kind", msg)]
    name = display_name(kind, raw)
    versions = KINDS[kind]
    if not isinstance(api, str) or api not in versions:
        expected = " or ".join(sorted(versions))
        if api is None:
            msg = f"apiVersion is missing; {kind} uses {expected}"
        else:
            msg = f"{kind} must have apiVersion {expected}, not {quote(api)}"
        return None, [SpecIssue(index, kind, name, "apiVersion", msg)]
    model_type = versions[api]
    if schema.known(api, kind):
        # Someone else's kind: its CRD schema first, strictly (unknown fields are typos).
        found = schema.problems(api, kind, raw)
        if found:
            return None, [SpecIssue(index, kind, name, p, m) for p, m in found]
    try:
        model = model_type.model_validate(raw)
    except pydantic.ValidationError as e:
        issues = [
            SpecIssue(index, kind, name, loc_to_path(err["loc"]), _message_at(model_type, raw, err))
            for err in e.errors(include_url=False)
        ]
        return None, issues
    doc = Document(index, kind, name, model, raw)
    problems = model.problems()
    if isinstance(model, models.MemberClusterModel):
        problems += _member_kind_problems(model)
    return doc, [doc.issue(path, msg) for path, msg in problems]


def _member_kind_problems(model: models.MemberClusterModel) -> list[tuple[str, str]]:
    """The entries of a MemberCluster's ``spec.kinds`` that name no kind Fleet runs."""
    out: list[tuple[str, str]] = []
    for i, ref in enumerate(model.spec.kinds or ()):
        if registry.find(ref.api_version, ref.kind) is None:
            msg = (
                f"Fleet runs no kind {quote(ref.kind)} of apiVersion {quote(ref.api_version)}; "
                f"it runs {registry.names()}"
            )
            out.append((f"spec.kinds[{i}]", msg))
    return out


def _short_words(text: str) -> str:
    """A parser's message (a sentence that may quote a token) with each word shortened."""
    return " ".join(shorten(word) for word in text.split(" "))


def parse_documents(
    text: str, limits: YamlLimits = DEFAULT_LIMITS
) -> tuple[list[Document], list[SpecIssue]]:
    """Every valid document and every issue found in a YAML stream."""
    docs: list[Document] = []
    issues: list[SpecIssue] = []
    index = 0
    stream = read_documents(text, YAML_LOADER, limits)
    while True:
        try:
            raw = next(stream)
        except StopIteration:
            break
        except YamlLimitError as e:
            issues.append(SpecIssue(e.document, "", "", "", _short_words(str(e))))
            break
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
            problem = _short_words(getattr(e, "problem", None) or str(e))
            issues.append(SpecIssue(index, "", "", "", f"YAML syntax error at {where}{problem}"))
            break
        except ValueError as e:  # a scalar the constructor cannot build
            problem = _short_words(str(e).split(";")[0])
            issues.append(SpecIssue(index, "", "", "", f"a YAML value cannot be read: {problem}"))
            break
        if raw is not None:
            doc, found = _load_one(index, raw)
            issues.extend(found)
            if doc is not None:
                docs.append(doc)
        index += 1
    return docs, issues


def load_documents(
    text: str, kinds: Sequence[str] | None = None, limits: YamlLimits = DEFAULT_LIMITS
) -> list[Document]:
    """Valid documents, or one :class:`SpecError` with every issue.

    ``kinds`` limits which kinds the file may hold (e.g. a quota file).
    """
    docs, issues = parse_documents(text, limits)
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
