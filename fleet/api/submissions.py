"""A submission's request body in, validated jobs out, or one problem listing everything wrong.

Theory of operation: :func:`parse_submission` is the whole of what the
submission route does before it touches the database.  It takes the raw body
and either returns one :class:`Submitted` per job, in document order,
or raises :class:`~fleet.api.problems.ProblemError`; nothing is ever
partially accepted, and no input makes it raise anything else.  The checks,
cheapest first:

1. size: a body over :attr:`SubmissionLimits.max_bytes` is refused (413)
   before a byte of it is decoded or parsed;
2. encoding: a body that is not UTF-8 is refused (400), naming the offset of
   the first bad byte;
3. the documents, read by :func:`fleet.manifests.convert.load_submitted`,
   the same YAML loading path (libyaml's safe loader when PyYAML has it) and
   the same checks as ``fleet check jobs``: YAML syntax, kinds and
   apiVersions, every field, quantities, queue routing (a namespace that no
   leaf owns), priority classes, GPU types no allowed cluster has, cluster
   affinity, and that policies and jobs select each other.  The stream is
   read within bounds: at most :attr:`SubmissionLimits.max_documents`
   documents, at most :attr:`SubmissionLimits.max_depth` nested levels, and
   aliases that stand for at most :attr:`SubmissionLimits.max_alias_nodes`
   nodes, counted while composing, before anything is built (a "billion
   laughs" body costs what its bytes cost).  Every issue is a field error
   (422).  Too many documents is a 422 too, not a 413: like any other issue
   found by reading the body, it names the document where it happened;
   413 is kept for what is refused without reading;
4. JSON: each document becomes plain JSON data (string keys, finite
   numbers; a YAML timestamp becomes its ISO 8601 text, ``!!binary`` its
   base64 text, non-string keys their YAML text); a value JSON cannot
   hold (NaN, a ``!!set``) is a field error;
5. the fit test against the clusters (:mod:`fleet.manifests.fit`, which
   ``fleet check jobs --clusters`` runs too): an extended resource that no
   node of any cluster the job may use offers, a pod that no such node could
   hold, or a gang (``Job.gang_request``) larger than every such cluster's
   total capacity, is refused now rather than left queued for ever.  This
   is a necessary condition: a job that passes may still wait, one that
   fails could never run.

A submission may also hold Trainer v2's training runtimes
(``ClusterTrainingRuntime``, ``TrainingRuntime``): :func:`parse_registering`
returns them (:class:`Registering`) beside the jobs, and a TrainJob of the
same submission may use them; the route lets only an administrator register
them.

PropagationPolicies are standing objects (Karmada's and ACK One's
semantics): every policy of a submission is returned to be stored
(:class:`StandingPolicy`, in :class:`Parsed` beside the jobs), whether it
selects one of the submission's jobs or not, so a submission of policies
alone stores them.  A job is governed by the policies of its own submission
when one of them selects it, else by the stored policies of its namespace
(``policies``: the service's, plain documents by ``namespace/name``, read
into models by :func:`stored_models` once per change of that mapping, and
then only the documents that changed, and only when a job of the submission
is selected by none of its own policies); a job that neither selects is a
field error saying to add one to the submission or to store one.

A :class:`Submitted` carries the core job, the documents as plain dicts, the
policy's source (``submission`` or ``stored``), a canonical spec hash
(SHA-256 of the JSON of both documents with sorted keys and no whitespace,
so comments, layout and key order do not change it; the store compares it to
make resubmission idempotent; a job governed by a stored policy is hashed
alone, so that it is the same job when submitted again after the policy was
edited), and the failover rule in force.  ACK One's
``suspension.scheduling: true`` means "put the job in the queue", which is
what Fleet does with every job; Karmada's ``suspension.dispatching`` (and
``dispatchingOnClusters``) means "pause: do not create it in the members",
and a job governed by such a policy is refused at
``spec.suspension.dispatching``: Fleet has no paused state, and would queue
and run it regardless.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from fleet.api.problems import (
    FieldError,
    ProblemError,
    bad_request,
    field_error,
    from_spec_error,
    invalid,
    too_large,
)
from fleet.core.jobs import Job
from fleet.core.quota import QuotaTree
from fleet.manifests import convert, fit
from fleet.manifests.convert import SubmittedJob
from fleet.manifests.documents import Document
from fleet.manifests.errors import SpecError, quote
from fleet.manifests.kinds.base import Runtimes, WorkloadModel
from fleet.manifests.kinds.trainjob import TrainingRuntimeModel
from fleet.manifests.models import (
    ApplicationFailover,
    MemberClusterModel,
    PropagationPolicyModel,
)
from fleet.manifests.yaml_stream import DEFAULT_MAX_DEPTH, YamlLimits
from fleet.service import intake
from fleet.service.settings import Settings

#: Media types the submission route reads.
YAML_MEDIA_TYPES: Final = ("application/yaml", "application/x-yaml", "text/yaml")

PurgeMode = Literal["Directly", "Gracefully", "Never"]
PolicySource = Literal["submission", "stored"]
#: The stored policies a submission is checked against: plain documents by
#: ``namespace/name`` (the service's, replaced whole when one changes).
StoredPolicies = Mapping[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class SubmissionLimits:
    """What one submission may hold at most."""

    max_bytes: int = 4 * 1024 * 1024
    max_documents: int = 1000
    max_alias_nodes: int = 100_000
    max_depth: int = DEFAULT_MAX_DEPTH
    #: pods of one job (every replica of every role)
    max_replicas: int = 1000
    #: characters of any one string (a key or a value) in a document
    max_string: int = 32 * 1024


def limits_of(settings: Settings) -> SubmissionLimits:
    """The limits ``settings`` set on one submission."""
    return SubmissionLimits(
        max_bytes=settings.max_body_bytes,
        max_documents=settings.max_documents,
        max_depth=settings.max_yaml_depth,
        max_alias_nodes=settings.max_yaml_alias_nodes,
        max_replicas=settings.max_replicas_per_job,
        max_string=settings.max_string_length,
    )


@dataclass(frozen=True, slots=True)
class Failover:
    """The policy's application failover rule in force (Karmada's defaults when unset)."""

    toleration_seconds: int
    purge_mode: PurgeMode
    grace_period_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class Submitted:
    """One accepted job (of any kind Fleet runs), ready to be stored."""

    job: Job
    namespace: str
    name: str
    #: The job's document as plain JSON data.
    document: dict[str, Any]
    #: The PropagationPolicy that governs the job, as plain JSON data.
    policy: dict[str, Any] | None
    #: Hex SHA-256 of the canonical JSON of ``{"job": document, "policy": policy}``
    #: (``policy`` None when a stored policy governs the job).
    spec_hash: str
    #: The policy pauses the job (Karmada's ``suspension.dispatching``): always False
    #: for an accepted job, as such jobs are refused (:func:`suspended`).
    suspended: bool
    failover: Failover
    #: Indexes of the job's and the policy's documents in the submitted stream
    #: (``policy_index`` None when a stored policy governs the job).
    index: int
    policy_index: int | None
    #: Where the policy came from: the job's own submission, or the stored ones.
    policy_source: PolicySource | None = None

    def by(self, user: str) -> Submitted:
        """The same submission, its job's user ``user`` (the submitting token's name,
        which wins over the job's ``fleet.io/user`` label)."""
        return dataclasses.replace(self, job=dataclasses.replace(self.job, user=user))


def new_jobs(submitted: Sequence[Submitted]) -> list[intake.NewJob]:
    """The intake's values of ``submitted`` jobs (the HTTP door and the hub store them alike)."""
    return [
        intake.NewJob(s.job, s.document, s.policy, s.spec_hash, s.suspended, s.policy_source)
        for s in submitted
    ]


@dataclass(frozen=True, slots=True)
class Registering:
    """A training runtime the submission registers (only an administrator may)."""

    key: str
    #: Its document as plain JSON data.
    document: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StandingPolicy:
    """A PropagationPolicy of the submission, to be stored (every one of them is)."""

    namespace: str
    name: str
    #: Its document as plain JSON data.
    document: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Parsed:
    """Everything a submission holds, checked: jobs, runtimes and policies to store."""

    jobs: list[Submitted]
    runtimes: list[Registering] = field(default_factory=list)
    policies: list[StandingPolicy] = field(default_factory=list)


#: The last stored policies read into models, and those models (one entry: the
#: service replaces its mapping whole when a policy changes).
_models_of: list[tuple[StoredPolicies, list[PropagationPolicyModel]]] = []
#: Each document of that mapping with its model, by ``namespace/name`` (None: the
#: document does not read as a policy), so that a new mapping reads only the
#: documents it does not share with the last one.
_model_by_key: dict[str, tuple[dict[str, Any], PropagationPolicyModel | None]] = {}


def stored_models(policies: StoredPolicies) -> list[PropagationPolicyModel]:
    """The stored policies as models, once per mapping (never changed in place): a
    document the last mapping held, the same object or an equal one, keeps its model."""
    if _models_of and _models_of[0][0] is policies:
        return _models_of[0][1]
    held: dict[str, tuple[dict[str, Any], PropagationPolicyModel | None]] = {}
    found: list[PropagationPolicyModel] = []
    for key, document in policies.items():
        known = _model_by_key.get(key)
        if known is not None and (known[0] is document or known[0] == document):
            model = known[1]
        else:
            model = next(iter(convert.policy_models([document])), None)
        held[key] = (document, model)
        if model is not None:
            found.append(model)
    _model_by_key.clear()
    _model_by_key.update(held)
    _models_of[:] = [(policies, found)]
    return found


def parse_submission(
    body: bytes,
    *,
    tree: QuotaTree,
    clusters: Sequence[MemberClusterModel],
    first_seq: int,
    limits: SubmissionLimits,
    runtimes: Runtimes | None = None,
    policies: StoredPolicies | None = None,
) -> list[Submitted]:
    """Every job of a submission (seq from ``first_seq``), or a ProblemError.

    A TrainJob's runtime is looked up among the registered ``runtimes`` and
    those of the submission, a job's policy among the submission's and the
    stored ``policies`` (see :func:`read_submission`)."""
    return read_submission(
        body,
        tree=tree,
        clusters=clusters,
        first_seq=first_seq,
        limits=limits,
        runtimes=runtimes,
        policies=policies,
    ).jobs


def read_submission(
    body: bytes,
    *,
    tree: QuotaTree,
    clusters: Sequence[MemberClusterModel],
    first_seq: int,
    limits: SubmissionLimits,
    runtimes: Runtimes | None = None,
    policies: StoredPolicies | None = None,
) -> Parsed:
    """:func:`parse_submission` with the training runtimes the submission registers
    and the policies it stores."""
    if len(body) > limits.max_bytes:
        msg = (
            f"the request body has {len(body):,} bytes, more than the limit of "
            f"{limits.max_bytes:,}; it was not read"
        )
        raise ProblemError(too_large(msg, errors=[field_error(msg)]))
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        msg = f"the request body is not UTF-8 text (byte 0x{body[e.start]:02x} at offset {e.start})"
        raise ProblemError(bad_request(msg, errors=[field_error(msg)])) from None
    yaml_limits = YamlLimits(
        max_documents=limits.max_documents,
        max_depth=limits.max_depth,
        max_alias_nodes=limits.max_alias_nodes,
    )
    stored = _NO_POLICIES if policies is None else policies
    try:
        found = convert.load_submitted(
            text,
            tree,
            clusters,
            first_seq,
            limits=yaml_limits,
            runtimes=runtimes,
            stored_policies=(lambda: stored_models(stored)) if stored else (),
        )
    except SpecError as e:
        raise ProblemError(from_spec_error(e)) from None
    registering: list[Registering] = []
    errors: list[FieldError] = []
    for doc in found.runtimes:
        assert isinstance(doc.model, TrainingRuntimeModel)
        data, problems = plain_data(doc.raw, max_string=limits.max_string)
        errors.extend(
            field_error(m, document=doc.index, kind=doc.kind, name=doc.name, path=p)
            for p, m in problems
        )
        if isinstance(data, dict):
            registering.append(Registering(doc.model.key, data))
    if errors:
        raise ProblemError(invalid(errors))
    jobs, standing = _finish(found, clusters, limits, stored)
    return Parsed(jobs, registering, standing)


#: The stored policies of a parse that was given none.
_NO_POLICIES: StoredPolicies = {}


def _finish(
    found: convert.Submission,
    clusters: Sequence[MemberClusterModel],
    limits: SubmissionLimits,
    stored: StoredPolicies,
) -> tuple[list[Submitted], list[StandingPolicy]]:
    errors: list[FieldError] = []
    plain: dict[int, dict[str, Any]] = {}
    for doc in _documents(found):
        data, problems = plain_data(doc.raw, max_string=limits.max_string)
        errors.extend(
            field_error(m, document=doc.index, kind=doc.kind, name=doc.name, path=p)
            for p, m in problems
        )
        if isinstance(data, dict):
            plain[doc.index] = data
    capacity = fit.Capacity(clusters)
    for sj in found.jobs:
        model = sj.document.model
        assert isinstance(model, WorkloadModel)
        if sj.job.size > limits.max_replicas:
            errors.append(
                field_error(
                    f"job {sj.job.key} has {sj.job.size:,} pods, more than the "
                    f"{limits.max_replicas:,} this service accepts in one job",
                    document=sj.document.index,
                    kind=sj.document.kind,
                    name=sj.job.key,
                    path=model.pods_path(),
                )
            )
            continue
        errors.extend(
            field_error(
                m, document=sj.document.index, kind=sj.document.kind, name=sj.job.key, path=p
            )
            for p, m in capacity.problems(sj.job, model)
        )
        errors.extend(_paused(sj))
    if errors:
        raise ProblemError(invalid(errors))
    standing: list[StandingPolicy] = []
    for doc in found.policies:
        assert isinstance(doc.model, PropagationPolicyModel)
        model_ = doc.model
        standing.append(StandingPolicy(model_.namespace, model_.metadata.name, plain[doc.index]))
    return [_submitted(sj, plain, stored) for sj in found.jobs], standing


def _documents(found: convert.Submission) -> list[Document]:
    """The jobs' and policies' documents, each once, in stream order."""
    docs: dict[int, Document] = {p.index: p for p in found.policies}
    for sj in found.jobs:
        docs[sj.document.index] = sj.document
        if sj.policy is not None:
            docs[sj.policy.index] = sj.policy
    return [docs[i] for i in sorted(docs)]


def _submitted(
    sj: SubmittedJob, plain: Mapping[int, dict[str, Any]], stored: StoredPolicies
) -> Submitted:
    model = sj.document.model
    assert isinstance(model, WorkloadModel)
    policy_model: PropagationPolicyModel | None = None
    policy_data: dict[str, Any] | None = None
    source: PolicySource | None = None
    document = plain[sj.document.index]
    if sj.policy is not None:
        assert isinstance(sj.policy.model, PropagationPolicyModel)
        policy_model = sj.policy.model
        policy_data = plain[sj.policy.index]
        source = "submission"
        digest = spec_hash(document, policy_data)
    elif sj.stored is not None:
        policy_model = sj.stored
        policy_data = stored[sj.stored.key]
        source = "stored"
        # The job alone: submitted again after the policy was edited, it is the same job.
        digest = spec_hash(document, None)
    else:
        digest = spec_hash(document, None)
    return Submitted(
        job=sj.job,
        namespace=model.namespace,
        name=model.metadata.name,
        document=document,
        policy=policy_data,
        spec_hash=digest,
        suspended=suspended(policy_model),
        failover=failover(policy_model),
        index=sj.document.index,
        policy_index=sj.policy.index if sj.policy is not None else None,
        policy_source=source,
    )


# Policy settings ----------------------------------------------------------------------


def suspended(policy: PropagationPolicyModel | None) -> bool:
    """Whether ``policy`` pauses its jobs (Karmada's ``suspension.dispatching``; refused
    by :func:`_paused`, so False for every job accepted).  ACK One's
    ``suspension.scheduling`` is not a pause: it puts the job in the queue, which is
    what Fleet does with every job."""
    if policy is None or policy.spec.suspension is None:
        return False
    return policy.spec.suspension.dispatching or bool(
        policy.spec.suspension.dispatching_on_clusters
    )


def _paused(sj: SubmittedJob) -> list[FieldError]:
    """The error for a job whose policy pauses it (Karmada's ``suspension.dispatching``):
    Fleet has no paused state between its queue and its members, and a job it took
    would be queued and run regardless."""
    policy = sj.policy.model if sj.policy is not None else sj.stored
    if not isinstance(policy, PropagationPolicyModel) or not suspended(policy):
        return []
    field = (
        "dispatching"
        if policy.spec.suspension is not None and policy.spec.suspension.dispatching
        else "dispatchingOnClusters"
    )
    why = (
        f"suspension.{field} pauses job {sj.job.key} out of its member clusters (Karmada); "
        "Fleet does not hold a job paused: submit it when it should run. To queue it "
        "(ACK One's meaning), use suspension.scheduling: true, or nothing: every job "
        "waits in its queue"
    )
    if sj.policy is not None:
        return [
            field_error(
                why,
                document=sj.policy.index,
                kind=sj.policy.kind,
                name=sj.policy.name,
                path=f"spec.suspension.{field}",
            )
        ]
    where = f"its stored PropagationPolicy {policy.namespace}/{policy.metadata.name}: "
    return [
        field_error(
            where + why,
            document=sj.document.index,
            kind=sj.document.kind,
            name=sj.job.key,
            path="metadata.name",
        )
    ]


def failover(policy: PropagationPolicyModel | None) -> Failover:
    """The application failover rule in force (300 s, Gracefully unless the policy says)."""
    rule = policy.application_failover if policy is not None else ApplicationFailover()
    return Failover(
        toleration_seconds=rule.decision_conditions.toleration_seconds,
        purge_mode=rule.purge_mode,
        grace_period_seconds=rule.grace_period_seconds,
    )


# Plain JSON data ----------------------------------------------------------------------


def plain_data(
    value: object, path: str = "", *, max_string: int | None = None
) -> tuple[Any, list[tuple[str, str]]]:
    """``value`` (YAML data) as JSON data, and ``(path, message)`` for what JSON cannot hold
    or for a string (key or value) longer than ``max_string`` characters."""
    if _is_plain(value, max_string):
        return value, []  # already JSON data: nothing to convert or report
    problems: list[tuple[str, str]] = []
    return _Plain(problems, max_string).value(value, path), problems


def _is_plain(value: object, max_string: int | None) -> bool:
    """Whether ``value`` is JSON data already: string keys, no string longer than
    ``max_string``, finite floats, and nothing but mappings, lists and scalars
    (checked without building paths; :class:`_Plain` words what is not)."""
    longest = max_string if max_string is not None else math.inf
    todo = [value]
    while todo:
        item = todo.pop()
        kind = type(item)
        if kind is str:
            if len(item) > longest:  # type: ignore[arg-type]
                return False
        elif kind is dict:
            for key, child in item.items():  # type: ignore[attr-defined]
                if type(key) is not str or len(key) > longest:
                    return False
                todo.append(child)
        elif kind is list:
            todo.extend(item)  # type: ignore[arg-type]
        elif kind is float:
            if not math.isfinite(item):  # type: ignore[arg-type]
                return False
        elif not (item is None or kind is bool or kind is int):
            return False
    return True


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _key(key: object) -> str:
    """A mapping key as JSON text: YAML's spelling of a scalar key."""
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, datetime.date):
        return key.isoformat()
    return json.dumps(key) if isinstance(key, int | float) and math.isfinite(key) else repr(key)


@dataclass(slots=True)
class _Plain:
    problems: list[tuple[str, str]]
    max_string: int | None

    def _long(self, text: str, path: str) -> bool:
        if self.max_string is None or len(text) <= self.max_string:
            return False
        self.problems.append(
            (
                path,
                f"a string of {len(text):,} characters, more than the {self.max_string:,} "
                "this service accepts in one field",
            )
        )
        return True

    def value(self, value: object, path: str) -> Any:
        problems = self.problems
        if isinstance(value, str):
            return None if self._long(value, path) else value
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            if math.isfinite(value):
                return value
            problems.append(
                (path, f"{value!r} is not a number JSON can hold; quote it if it is text")
            )
            return None
        if isinstance(value, datetime.date):  # datetime too
            return value.isoformat()
        if isinstance(value, bytes):
            return base64.b64encode(value).decode("ascii")
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                text = _key(key)
                if self._long(text, path):
                    continue
                if text in out:
                    problems.append(
                        (
                            _join(path, text),
                            f"key {quote(text)} is given twice (once not as a string)",
                        )
                    )
                    continue
                out[text] = self.value(item, _join(path, text))
            return out
        if isinstance(value, list | tuple):
            return [self.value(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if isinstance(value, set | frozenset):
            problems.append((path, "a YAML set (!!set) has no JSON form; write a list"))
            return None
        problems.append((path, f"a value of type {type(value).__name__} has no JSON form"))
        return None


def canonical_json(value: object) -> str:
    """JSON with sorted keys and no whitespace: equal data, equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def spec_hash(document: Mapping[str, Any], policy: Mapping[str, Any] | None) -> str:
    """Hex SHA-256 of the canonical JSON of a job's document and its policy's."""
    text = canonical_json({"job": document, "policy": policy})
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
