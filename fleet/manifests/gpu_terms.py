"""GPUs chosen by their attributes: the GPU terms of a job's templates, the types they accept.

Theory of operation: a GPU leaf type of a member cluster carries its GPU's
attributes as node labels (:meth:`~fleet.core.cells.spec.CellConfig.labels_of`:
``nvidia.com/gpu.product``, ``nvidia.com/gpu.memory`` in MiB, and whatever
else its skuType gives).  A *GPU attribute key* is a label key under
:data:`GPU_PREFIX` (``nvidia.com/gpu.``): the labels NVIDIA GPU feature
discovery writes on a node describe its GPUs.  Every other key (a zone, a
hostname, ``matchFields``) is left to the member's scheduler, as before.

What a job asks is read from every pod template that asks for GPUs
(:func:`template_terms`): its ``nodeSelector`` entries on GPU keys (each an
``In`` of one value) and its node affinity's
``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``, whose
``matchExpressions`` on GPU keys are kept.  They are evaluated as Kubernetes
evaluates them (:func:`matches`): the ``nodeSelector`` entries and the
affinity are ANDed; the terms are ORed and a term's expressions ANDed, a term
whose expressions are all on other keys matching every type (the member
decides those) and a term with no requirement at all matching nothing;
``In``, ``NotIn`` (a type without the label matches), ``Exists``,
``DoesNotExist``, and ``Gt`` / ``Lt``, which compare the label as a 64-bit
decimal integer (a label that is not one does not match).  An expression
Kubernetes refuses (``In`` / ``NotIn`` without values, ``Exists`` /
``DoesNotExist`` with values, ``Gt`` / ``Lt`` without exactly one integer
value, another operator) is a problem at its field path.

Fleet's ``fleet.io/gpu-type`` annotation names a type by its name or its
product; ``nvidia.com/gpu.product`` in a ``nodeSelector`` is an ``In`` of
one product like any other GPU key (a type's product is its name unless its
skuType says otherwise, so both name a type exactly, as they always did).

:func:`accepted` narrows the GPU types of the member clusters the job may
use, one requirement after the other (the annotation, then each GPU
template's selector entries and terms).  The requirement that leaves none
is the problem, at its field path, with what the members have (for an
affinity whose terms all fail, each term's failing expression).  A type is
named alike throughout the fleet (its quota is ``gpu.fleet.io/<type>``), so a
name is accepted only where every member that has it agrees.  The result
is the accepted types in the members' order and the terms as a human reads
them (:func:`describe`), which the job carries
(:attr:`~fleet.core.jobs.Job.gpu_skus`, :attr:`~fleet.core.jobs.Job.gpu_terms`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleet.core.cells.spec import GPU_PRODUCT_LABEL
from fleet.manifests.errors import Problem, quote
from fleet.manifests.kinds.pods import PodTemplate

#: Label keys under this prefix are GPU attributes (NVIDIA GPU feature discovery's).
GPU_PREFIX: Final = "nvidia.com/gpu."
OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
#: A 64-bit integer as Go's ``strconv.ParseInt`` reads it in base 10.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64 = 2**63
_AFFINITY = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def is_gpu_key(key: str) -> bool:
    return key.startswith(GPU_PREFIX)


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement on a GPU label (an expression, a selector entry)."""

    path: str
    key: str
    operator: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Term:
    """One node selector term: its GPU requirements; ``empty``: it has none of any key
    (Kubernetes: such a term matches no node)."""

    path: str
    requirements: tuple[Requirement, ...]
    empty: bool = False


@dataclass(frozen=True, slots=True)
class TemplateTerms:
    """A pod template's GPU asks: its selector entries, and its terms (None: no
    required node affinity)."""

    selector: tuple[Requirement, ...]
    terms: tuple[Term, ...] | None

    @property
    def asks(self) -> bool:
        return bool(self.selector) or self.terms is not None


def _int64(text: str) -> int | None:
    if not _INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if -_INT64 <= value < _INT64 else None


def matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    """Whether a node with ``labels`` meets ``req``, as Kubernetes decides."""
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if value is None:
        return False
    have, bound = _int64(value), _int64(req.values[0])
    if have is None or bound is None:
        return False
    return have > bound if op == "Gt" else have < bound


def _requirement(raw: Any, path: str, problems: list[Problem]) -> Requirement | None:
    """A ``matchExpressions`` entry on a GPU key, checked as Kubernetes checks it
    (None: another key's, or refused)."""
    if not isinstance(raw, Mapping):
        problems.append((path, "a node selector requirement is a mapping"))
        return None
    key, op, values = raw.get("key"), raw.get("operator"), raw.get("values")
    if not isinstance(key, str) or not is_gpu_key(key):
        return None
    if values is None:
        values = []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        problems.append((f"{path}.values", "must be a list of strings"))
        return None
    if op not in OPERATORS:
        known = ", ".join(OPERATORS)
        problems.append((f"{path}.operator", f"{quote(str(op))} is not an operator ({known})"))
        return None
    if op in ("In", "NotIn") and not values:
        problems.append((f"{path}.values", f"{op} needs at least one value"))
        return None
    if op in ("Exists", "DoesNotExist") and values:
        problems.append((f"{path}.values", f"{op} takes no values"))
        return None
    if op in ("Gt", "Lt") and (len(values) != 1 or _int64(values[0]) is None):
        msg = f"{op} needs exactly one value, a decimal integer; got {values}"
        problems.append((f"{path}.values", msg))
        return None
    return Requirement(path, key, str(op), tuple(values))


def template_terms(template: PodTemplate, path: str, problems: list[Problem]) -> TemplateTerms:
    """The GPU asks of one pod template (``path``: the template's field path)."""
    selector = tuple(
        Requirement(f"{path}.spec.nodeSelector.{key}", key, "In", (value,))
        for key, value in template.spec.node_selector.items()
        if is_gpu_key(key)
    )
    extra = template.spec.model_extra or {}
    affinity = extra.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = (
        node.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node, Mapping)
        else None
    )
    if not isinstance(required, Mapping):
        return TemplateTerms(selector, None)
    base = f"{path}.{_AFFINITY}.nodeSelectorTerms"
    raw_terms = required.get("nodeSelectorTerms")
    if not isinstance(raw_terms, list) or not raw_terms:
        problems.append((base, "must have at least one node selector term"))
        return TemplateTerms(selector, None)
    terms: list[Term] = []
    for i, raw in enumerate(raw_terms):
        tpath = f"{base}[{i}]"
        if not isinstance(raw, Mapping):
            problems.append((tpath, "a node selector term is a mapping"))
            continue
        exprs = raw.get("matchExpressions") or []
        fields = raw.get("matchFields") or []
        if not isinstance(exprs, list):
            problems.append((f"{tpath}.matchExpressions", "must be a list"))
            continue
        reqs = [
            _requirement(e, f"{tpath}.matchExpressions[{j}]", problems) for j, e in enumerate(exprs)
        ]
        found = tuple(r for r in reqs if r is not None)
        terms.append(Term(tpath, found, empty=not exprs and not fields))
    return TemplateTerms(selector, tuple(terms))


def _words(req: Requirement) -> str:
    """One requirement as a human reads it: ``GPU memory > 40960``."""
    name = req.key
    if name.startswith(GPU_PREFIX):
        name = "GPU " + name[len(GPU_PREFIX) :]
    values = ", ".join(req.values)
    return {
        "In": f"{name} = {values}" if len(req.values) == 1 else f"{name} in ({values})",
        "NotIn": f"{name} != {values}" if len(req.values) == 1 else f"{name} not in ({values})",
        "Exists": f"{name} given",
        "DoesNotExist": f"no {name}",
        "Gt": f"{name} > {values}",
        "Lt": f"{name} < {values}",
    }[req.operator]


def describe(asks: Sequence[TemplateTerms]) -> str:
    """The GPU terms of some templates as a human reads them (distinct ones, in order)."""
    out: list[str] = []
    for ask in asks:
        parts = [_words(r) for r in ask.selector]
        # A term on other keys alone asks nothing of the GPU, and nor do the terms
        # ORed with it.
        if ask.terms is not None and all(t.requirements or t.empty for t in ask.terms):
            terms = [" and ".join(_words(r) for r in t.requirements) for t in ask.terms]
            terms = [t for t in terms if t]
            if len(terms) > 1:
                parts.append(" or ".join(f"({t})" for t in terms))
            elif terms:
                parts.append(terms[0])
        text = ", ".join(parts)
        if text and text not in out:
            out.append(text)
    return "; ".join(out)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A GPU leaf type of one member cluster and its attributes."""

    cluster: str
    name: str
    labels: Mapping[str, str]


def _have(cands: Sequence[Candidate], key: str) -> str:
    """What the members have of ``key``: ``a: A100 81920, T4 -; b: ...``."""
    by: dict[str, list[str]] = {}
    for c in cands:
        by.setdefault(c.cluster, []).append(f"{c.name} {c.labels.get(key, '-')}")
    return "; ".join(f"{cluster}: {', '.join(types)}" for cluster, types in by.items())


def _refused(req: Requirement, every: Sequence[Candidate], narrowed: bool) -> Problem:
    before = " together with the GPU requirements before it" if narrowed else ""
    have = _have(every, req.key) or "no GPU types"
    msg = (
        f"no GPU type of the member clusters the job may use meets {_words(req)}{before} "
        f"(the members have {req.key}: {have})"
    )
    return (req.path, msg)


def accepted(
    exact: tuple[str, str] | None,
    asks: Sequence[TemplateTerms],
    candidates: Sequence[Candidate],
    exact_refused: Callable[[], Problem],
) -> tuple[tuple[str, ...], list[Problem]]:
    """The type names the job accepts, in the candidates' order, or the problems.

    ``exact`` is ``(field path, type)`` of the annotation or selector that names
    a type (matched by its name or its product; ``exact_refused`` words the
    problem when no type matches); ``asks`` the GPU templates' asks.
    """
    cands = list(candidates)
    narrowed = False
    if exact is not None:
        _, sku = exact
        cands = [c for c in cands if c.name == sku or c.labels.get(GPU_PRODUCT_LABEL) == sku]
        if not cands:
            return (), [exact_refused()]
        narrowed = True
    for ask in asks:
        for req in ask.selector:
            kept = [c for c in cands if matches(req, c.labels)]
            if not kept:
                return (), [_refused(req, candidates, narrowed)]
            cands, narrowed = kept, True
        if ask.terms is None:
            continue
        union: set[int] = set()
        failed: list[Problem] = []
        for term in ask.terms:
            if term.empty:
                failed.append((term.path, "a term without requirements matches no node"))
                continue
            sub = list(range(len(cands)))
            for j, req in enumerate(term.requirements):
                sub = [i for i in sub if matches(req, cands[i].labels)]
                if not sub:
                    failed.append(_refused(req, candidates, narrowed or j > 0))
                    break
            union.update(sub)
        if not union:
            return (), failed
        cands, narrowed = [c for i, c in enumerate(cands) if i in union], True
    # A name is one type throughout the fleet: accepted where every member that has it agrees.
    kept_pairs = {(c.cluster, c.name) for c in cands}
    refused_names = {c.name for c in candidates if (c.cluster, c.name) not in kept_pairs}
    names: list[str] = []
    for c in cands:
        if c.name not in refused_names and c.name not in names:
            names.append(c.name)
    if not names:
        which = ", ".join(sorted({c.name for c in cands}))
        msg = (
            f"the GPU types that meet the job's GPU requirements ({which}) are named alike by "
            "member clusters whose GPUs of that name do not meet them"
        )
        return (), [("", msg)]
    return tuple(names), []
