"""From validated documents to the core's values: quota tree, member clusters, jobs.

Theory of operation: the loaders here are the only way YAML becomes core state.
Each one parses the whole text (:mod:`fleet.manifests.documents`), runs every check
it can (shape, quantities, tree rules, queue routing, priority classes,
cluster affinity), and either returns *all* the objects or raises *one*
:class:`SpecError` listing every issue: a submission is never partially
accepted.

A job of any kind Fleet runs (:mod:`fleet.manifests.kinds`) becomes a core
:class:`~fleet.core.jobs.Job` from what its kind's model says:

* queue: the leaf that lists the job's namespace (a namespace no leaf lists
  is an error); the queue the job names (a kind's queue field, such as
  ``schedulingPolicy.queue``), when given, must name that leaf;
* priority from the class name the kind's priority field gives (default
  ``test``); preemptible from the ``fleet.io/preemptible`` annotation, else
  every class but ``crit``;
* replica groups: the kind's pod sets in its order, with exact per-pod requests;
  a set with a minimum of its own (a Volcano task's ``minAvailable``) below
  its count is two groups, its minimum in the set's place and its other pods
  after every set's minimum (:func:`replica_groups`), so that the gang, the
  first pods in placement order, holds every set's minimum;
* gang size and elastic start: what the kind says (0: every pod);
* gang unless a PropagationPolicy selects the job without
  ``customSchedulingType: Gang`` (then it is incremental), and always for a
  kind that cannot be resized in place;
* allowed clusters from the policy's ``clusterAffinity`` resolved against the
  known MemberClusters;
* GPU types: the type the job names (``fleet.io/gpu-type``, the templates'
  ``nvidia.com/gpu.product``) and its GPU templates' selector and node
  affinity terms on GPU labels narrow the GPU types of the members it may
  use (:mod:`fleet.manifests.gpu_terms`): one type is the job's
  ``gpu_sku``, several its ``gpu_skus``; none is a problem at the field that
  excluded the last;
* user: the ``fleet.io/user`` label (empty: none), for the queue's per-user
  limits; a server with tokens puts the submitting token's name in its place
  (:func:`fleet.api.auth.user_of`);
* what the document refers to, resolved first (:meth:`WorkloadModel.resolve`):
  a TrainJob's training runtime, among the registered runtimes and those the
  same submission registers (:func:`load_submitted` returns them); the
  document is stored as its kind says (:meth:`WorkloadModel.stored`: a
  TrainJob with its effective runtime).

The matching policy is chosen like Karmada: same namespace, a selector with
the job's apiVersion and kind (and name/namespace/labels when given); among
several, the highest ``spec.priority``, then the most specific selector
(name > labelSelector > kind only), then the policy name.  Policies are
standing objects, as in Karmada and ACK One: a job is governed by the
policies of its own submission when one of them selects it, else by the
stored policies of its namespace (:func:`policy_models` reads them), each set
resolved that way; a submission's own policy always wins over a stored one.
The stored policies may be given as a function that reads them: it is called
only when a job of the submission is selected by none of its own policies
(most submissions carry theirs, and the stored ones are many).

:func:`check_submission` is ``fleet check jobs``: the same checks, and with
member clusters the server's fit test (:mod:`fleet.manifests.fit`).
:func:`load_submission` returns the jobs; :func:`load_submitted` (what a
server accepts) also returns each job's document and governing policy
(:class:`SubmittedJob`: the submission's policy document, or the stored
policy), the training runtimes the submission registers and every
PropagationPolicy it holds (:class:`Submission`: all of them are to be
stored, whether they select one of its jobs or not), reads the stream within
YAML bounds (:class:`~fleet.manifests.yaml_stream.YamlLimits`), and requires
every job to be selected by a policy, of the submission or stored: a file of
policies alone is a valid submission, an empty one is not, and the other
situations that :func:`submission_warnings` only warns about are accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pydantic

from fleet.core import jobs, quota, resources
from fleet.core.jobs import Job, ReplicaGroup
from fleet.manifests import documents, fit, gpu_terms, models
from fleet.manifests.documents import Document
from fleet.manifests.errors import Problem, SpecError, SpecIssue, quote, shorten
from fleet.manifests.kinds import registry
from fleet.manifests.kinds.base import PodSet, Runtimes, WorkloadModel
from fleet.manifests.kinds.trainjob import TrainingRuntimeModel
from fleet.manifests.models import MemberClusterModel, PropagationPolicyModel
from fleet.manifests.yaml_stream import DEFAULT_LIMITS, YamlLimits

# Quota tree and clusters ------------------------------------------------------------


def load_quota(text: str) -> tuple[quota.QuotaTree, list[str]]:
    """The one ElasticQuotaTree in ``text`` and the tree's warnings."""
    docs = documents.load_documents(text, kinds=["ElasticQuotaTree"])
    if len(docs) != 1:
        index = docs[1].index if len(docs) > 1 else 0
        msg = "a quota file holds exactly one ElasticQuotaTree"
        raise SpecError([SpecIssue(index, "", "", "", f"{msg}, found {len(docs)}")])
    doc = docs[0]
    assert isinstance(doc.model, models.ElasticQuotaTreeModel)
    root, problems = doc.model.to_spec()
    if problems:  # reported by load_documents already; kept for safety
        raise SpecError([doc.issue(p, m) for p, m in problems])
    try:
        tree = quota.QuotaTree.build(root)
    except quota.QuotaError as e:
        raise SpecError([doc.issue(err.path, err.message) for err in e.errors]) from e
    return tree, list(tree.warnings)


def load_clusters(text: str) -> list[MemberClusterModel]:
    """Every MemberCluster in ``text``; names must be unique."""
    docs = documents.load_documents(text, kinds=["MemberCluster"])
    if not docs:
        raise SpecError([SpecIssue(0, "", "", "", "the file holds no MemberCluster")])
    out: list[MemberClusterModel] = []
    issues: list[SpecIssue] = []
    seen: dict[str, int] = {}
    for doc in docs:
        assert isinstance(doc.model, MemberClusterModel)
        if doc.model.name in seen:
            msg = f"duplicate MemberCluster name (first in document {seen[doc.model.name]})"
            issues.append(doc.issue("metadata.name", msg))
        seen.setdefault(doc.model.name, doc.index)
        out.append(doc.model)
    if issues:
        raise SpecError(issues)
    return out


# Policies -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """What a resource selector reads of an object: its kind, namespace, name and labels."""

    api_version: str
    kind: str
    namespace: str
    name: str
    labels: Mapping[str, str]

    @staticmethod
    def of(job: WorkloadModel) -> Target:
        return Target(
            job.api_version, job.kind, job.namespace, job.metadata.name, job.metadata.labels
        )


def _selector_score(sel: models.ResourceSelector, target: Target) -> int:
    """0 if the selector does not pick the object, else 3 by name, 2 by labels, 1 by kind."""
    if sel.api_version != target.api_version or sel.kind != target.kind:
        return 0
    if sel.namespace is not None and sel.namespace != target.namespace:
        return 0
    if sel.name is not None:
        return 3 if sel.name == target.name else 0
    if sel.label_selector is not None:
        return 2 if sel.label_selector.matches(target.labels) else 0
    return 1


def match_policy(
    job_doc: WorkloadModel, policies: Sequence[PropagationPolicyModel]
) -> PropagationPolicyModel | None:
    """The policy that governs ``job_doc``, chosen the way Karmada chooses."""
    return match_target(Target.of(job_doc), policies)


def match_target(
    target: Target, policies: Sequence[PropagationPolicyModel]
) -> PropagationPolicyModel | None:
    """The policy that governs the object ``target``, chosen the way Karmada chooses:
    the policies of its namespace that select it, the highest ``priority`` first,
    then the most specific selector (name, then labels, then kind), then the
    alphabetically first name."""
    best: tuple[int, int, str] | None = None
    chosen: PropagationPolicyModel | None = None
    for policy in policies:
        if policy.namespace != target.namespace:
            continue
        score = max((_selector_score(s, target) for s in policy.spec.resource_selectors), default=0)
        if score == 0:
            continue
        rank = (-policy.spec.priority, -score, policy.metadata.name)
        if best is None or rank < best:
            best, chosen = rank, policy
    return chosen


def resolve_clusters(
    policy: PropagationPolicyModel | None, clusters: Sequence[MemberClusterModel]
) -> frozenset[str] | None:
    """Cluster names the policy allows (None = any).

    ``clusterNames`` ∩ clusters matching ``labelSelector`` − ``exclude``.  With no
    known clusters only the names can be used: ``clusterNames − exclude``, or
    None when the affinity names no clusters.
    """
    if policy is None or policy.spec.placement.cluster_affinity is None:
        return None
    aff = policy.spec.placement.cluster_affinity
    if not clusters:
        if not aff.cluster_names:
            return None
        return frozenset(aff.cluster_names) - frozenset(aff.exclude)
    allowed = {c.name for c in clusters}
    if aff.cluster_names:
        allowed &= set(aff.cluster_names)
    if aff.label_selector is not None:
        selector = aff.label_selector
        allowed &= {c.name for c in clusters if selector.matches(c.labels)}
    return frozenset(allowed - set(aff.exclude))


# Jobs ---------------------------------------------------------------------------


def _route(job_doc: WorkloadModel, tree: quota.QuotaTree, problems: list[Problem]) -> str:
    """The leaf that lists the job's namespace; ``schedulingPolicy.queue``, when
    given, must name that same leaf (a namespace belongs to one leaf, as Kueue's
    LocalQueue is namespaced: a job cannot name its way into another team's queue)."""
    ns = job_doc.namespace
    wanted, queue_path = job_doc.queue_field()
    owner = tree.queue_for_namespace(ns)
    if owner is None:
        problems.append(
            (
                "metadata.namespace",
                f"no leaf of the quota tree lists namespace {quote(ns)}; jobs run only in "
                "namespaces a leaf queue lists (ask an administrator to add it to a leaf)",
            )
        )
        return ""
    if wanted is not None and wanted != owner:
        if not tree.has_node(wanted):
            why = f"no queue {quote(wanted)} in the quota tree"
        elif not tree.is_leaf(wanted):
            why = f"queue {quote(wanted)} is not a leaf of the quota tree"
        else:
            why = f"queue {quote(wanted)} does not list namespace {quote(ns)}"
        problems.append(
            (
                queue_path,
                f"{why}; namespace {quote(ns)} belongs to queue {quote(owner)}: "
                f"name {quote(owner)} or leave {queue_path} out",
            )
        )
        return ""
    return owner


def _running(
    job_doc: WorkloadModel, allowed: frozenset[str] | None, clusters: Sequence[MemberClusterModel]
) -> tuple[frozenset[str] | None, str]:
    """The allowed clusters narrowed to those that run the job's kind, or why none does."""
    runs = [c.name for c in clusters if c.runs(job_doc.api_version, job_doc.kind)]
    if len(runs) == len(clusters):
        return allowed, ""
    usable = frozenset(runs) if allowed is None else allowed & frozenset(runs)
    if usable:
        return usable, ""
    may = sorted(allowed) if allowed is not None else sorted(c.name for c in clusters)
    msg = (
        f"no member cluster the job may use ({', '.join(may)}) runs {job_doc.kind} "
        f"({job_doc.api_version}); a member runs the kinds its MemberCluster lists in "
        "spec.kinds"
    )
    return usable, msg


def cluster_leaf_types(
    clusters: Sequence[MemberClusterModel],
) -> dict[str, tuple[gpu_terms.Candidate, ...]]:
    """Cluster name -> its GPU leaf cell types with their attributes (the GPU types
    a job may ask for)."""
    out: dict[str, tuple[gpu_terms.Candidate, ...]] = {}
    for c in clusters:
        config = c.cell_config()
        out[c.name] = tuple(
            gpu_terms.Candidate(c.name, leaf, config.labels_of(leaf)) for leaf in config.leaf_types
        )
    return out


def _gpu_types(
    job_doc: WorkloadModel,
    sku: str | None,
    sets: Sequence[PodSet],
    allowed: frozenset[str] | None,
    clusters: Sequence[MemberClusterModel],
    leaf_types: Mapping[str, tuple[gpu_terms.Candidate, ...]] | None,
) -> tuple[str | None, tuple[str, ...], str, list[Problem]]:
    """The job's GPU types: ``(gpu_sku, gpu_skus, gpu_terms, problems)``.

    The GPU pod templates' selector entries and node affinity on GPU labels
    (:mod:`fleet.manifests.gpu_terms`) and the type the job names (``sku``)
    narrow the GPU types of the member clusters the job may use: one type is
    ``gpu_sku``, several are ``gpu_skus``; none is a problem at the field that
    excluded the last.  Without terms the named type is taken as it is (no
    member cluster having it is the problem); without clusters nothing is
    narrowed.
    """
    problems: list[Problem] = []
    gpu_templates = {s.template for s in sets if s.per_pod[resources.GPU] > 0}
    asks = [
        ask
        for _, path, template in job_doc.templates()
        if path in gpu_templates
        and (ask := gpu_terms.template_terms(template, path, problems)).asks
    ]
    # The exact product a selector names is the type itself (checked as ``sku``).
    terms = [
        gpu_terms.TemplateTerms(
            tuple(r for r in ask.selector if r.key != models.GPU_PRODUCT_LABEL), ask.terms
        )
        for ask in asks
    ]
    text = gpu_terms.describe(terms)
    if problems or not clusters or not (sku or text):
        return sku, (), text if clusters else "", problems
    types = leaf_types if leaf_types is not None else cluster_leaf_types(clusters)
    usable = [c.name for c in clusters if allowed is None or c.name in allowed]
    if not usable:
        return sku, (), text, []
    candidates = [cand for name in usable for cand in types.get(name, ())]
    path = job_doc.gpu_sku_path() or ""

    def exact_refused() -> Problem:
        have = "; ".join(
            f"{name}: {', '.join(shorten(c.name) for c in types.get(name, ())) or '-'}"
            for name in usable
        )
        msg = (
            f"GPU type {quote(sku or '')} is not a leaf cell type of any member cluster "
            f"the job may use ({have})"
        )
        return (path, msg)

    exact = (path, sku) if sku else None
    names, problems = gpu_terms.accepted(exact, asks, candidates, exact_refused)
    if problems:
        return None, (), text, problems
    if len(names) == 1:
        return names[0], (), text, []
    return None, names, text, []


def _pin_problems(
    job_doc: WorkloadModel,
    pinned: str,
    queue: str,
    allowed: frozenset[str] | None,
    clusters: Sequence[MemberClusterModel],
) -> list[Problem]:
    """A problem unless a member cluster the job may use pins cell ``pinned`` to its queue."""
    usable = [c for c in clusters if allowed is None or c.name in allowed]
    if not usable:
        return []
    for cluster in usable:
        vc = cluster.cell_config().vcs.get(queue)
        if vc is not None and pinned in vc.pinned:
            return []
    path = f"metadata.annotations.{models.PINNED_CELL_ANNOTATION}"
    names = ", ".join(c.name for c in usable)
    msg = (
        f"pinned cell {quote(pinned)} is not pinned to virtual cluster {quote(queue)} "
        f"in any member cluster the job may use ({names})"
    )
    return [(path, msg)]


def replica_groups(sets: Sequence[PodSet]) -> tuple[ReplicaGroup, ...]:
    """The core's groups of some pod sets: every set's minimum first, then the rest.

    A set without a minimum of its own (0), or whose minimum is its count, is
    one group in its place; one with ``0 < minimum < count`` is its first
    ``minimum`` pods there and its other pods (``first`` = ``minimum``) after
    every set's minimum, in the sets' order.
    """
    head: list[ReplicaGroup] = []
    tail: list[ReplicaGroup] = []
    for s in sets:
        if 0 < s.minimum < s.count:
            head.append(ReplicaGroup(s.role, s.minimum, s.per_pod))
            tail.append(ReplicaGroup(s.role, s.count - s.minimum, s.per_pod, s.minimum))
        else:
            head.append(ReplicaGroup(s.role, s.count, s.per_pod))
    return (*head, *tail)


def _build(
    job_doc: WorkloadModel,
    *,
    policy: PropagationPolicyModel | None,
    tree: quota.QuotaTree | None,
    seq: int,
    priority_classes: Mapping[str, int],
    clusters: Sequence[MemberClusterModel],
    leaf_types: Mapping[str, tuple[gpu_terms.Candidate, ...]] | None = None,
) -> tuple[Job | None, list[Problem]]:
    problems = job_doc.problems()
    if problems:
        return None, problems
    queue = _route(job_doc, tree, problems) if tree is not None else ""

    named, priority_path = job_doc.priority_field()
    pclass = named or jobs.DEFAULT_PRIORITY_CLASS
    priority = priority_classes.get(pclass)
    if priority is None:
        known = ", ".join(f"{n} ({v})" for n, v in priority_classes.items())
        same = [n for n in priority_classes if n.lower() == pclass.lower()]
        hint = f" (did you mean {same[0]!r}? names are case-sensitive)" if same else ""
        msg = f"unknown priority class {quote(pclass)}{hint}; known: {known}"
        problems.append((priority_path, msg))
        priority = 0

    ann = job_doc.metadata.annotations.get(models.PREEMPTIBLE_ANNOTATION)
    preemptible = (
        ann == "true" if ann is not None else pclass not in jobs.NON_PREEMPTIBLE_BY_DEFAULT
    )
    if not preemptible and priority < 0:
        path = f"metadata.annotations.{models.PREEMPTIBLE_ANNOTATION}"
        problems.append((path, f"an opportunistic job (class {pclass}) is always preemptible"))

    scratch: list[Problem] = []  # the pod sets' problems were reported by problems() above
    sets = job_doc.pod_sets(scratch)
    groups = replica_groups(sets)
    min_members = job_doc.gang_minimum()[0]
    target = job_doc.start_pods()
    deadline = job_doc.deadline_field()[0]

    allowed = resolve_clusters(policy, clusters)
    if allowed is not None and not allowed:
        known = ", ".join(sorted(c.name for c in clusters)) or "none"
        problems.append(
            (
                "",
                f"PropagationPolicy {policy.key if policy else ''}: "
                f"spec.placement.clusterAffinity allows no member cluster (known: {known})",
            )
        )
    elif clusters:
        allowed, problem = _running(job_doc, allowed, clusters)
        if problem:
            problems.append(("kind", problem))
    sku, skus, terms, found = _gpu_types(
        job_doc, job_doc.gpu_sku(scratch), sets, allowed, clusters, leaf_types
    )
    problems.extend(found)
    pinned = job_doc.metadata.annotations.get(models.PINNED_CELL_ANNOTATION) or None
    if pinned and clusters and queue:
        problems.extend(_pin_problems(job_doc, pinned, queue, allowed, clusters))
    if problems:
        return None, problems
    job = Job(
        key=job_doc.key,
        queue=queue,
        priority=priority,
        seq=seq,
        groups=groups,
        min_members=min_members,
        # A kind that cannot be resized in place is admitted whole, whatever its policy.
        gang=policy is None or policy.gang or not job_doc.KIND.resizable,
        preemptible=preemptible,
        gpu_sku=sku,
        clusters=allowed,
        gpu_skus=skus,
        gpu_terms=terms,
        priority_class=pclass,
        pinned_cell_id=pinned,
        target=target,
        # the queue is always the namespace's leaf (an explicit queue must name it)
        queue_from_namespace=True,
        user=job_doc.metadata.labels.get(models.USER_LABEL, ""),
        active_deadline=None if deadline is None else float(deadline),
    )
    return job, []


def to_job(
    job_doc: WorkloadModel,
    *,
    policy: PropagationPolicyModel | None,
    tree: quota.QuotaTree,
    seq: int,
    priority_classes: Mapping[str, int] = jobs.DEFAULT_PRIORITY_CLASSES,
    clusters: Sequence[MemberClusterModel] = (),
    index: int = 0,
) -> Job:
    """The core job for one job document, or a SpecError naming document ``index``."""
    job, problems = _build(
        job_doc,
        policy=policy,
        tree=tree,
        seq=seq,
        priority_classes=priority_classes,
        clusters=clusters,
    )
    if job is None:
        raise SpecError(SpecIssue(index, job_doc.kind, job_doc.key, p, m) for p, m in problems)
    return job


@dataclass(frozen=True, slots=True)
class SubmittedJob:
    """One job of a submission: the core job, its document, the policy that governs it.

    ``policy`` is the submission's own policy that governs the job; when none
    of the submission's selects it, ``stored`` is the standing policy that does
    (and ``policy`` is None).
    """

    job: Job
    document: Document
    policy: Document | None
    stored: PropagationPolicyModel | None = None


def policy_models(documents: Iterable[Mapping[str, Any]]) -> list[PropagationPolicyModel]:
    """Standing policies, stored as plain documents, as models.

    They were checked when they were stored; one that no longer reads as a
    PropagationPolicy (a field the model has since refused) is left out
    rather than failing every submission of its namespace.
    """
    out: list[PropagationPolicyModel] = []
    for document in documents:
        try:
            out.append(PropagationPolicyModel.model_validate(document))
        except pydantic.ValidationError:
            continue
    return out


def _selecting(job_doc: Document, policies: Sequence[Document]) -> list[Document]:
    """The policies (documents) each of which alone would select ``job_doc``."""
    assert isinstance(job_doc.model, WorkloadModel)
    out: list[Document] = []
    for p in policies:
        assert isinstance(p.model, PropagationPolicyModel)
        if match_policy(job_doc.model, [p.model]) is not None:
            out.append(p)
    return out


#: The standing policies a submission is read against, or a function that reads them
#: (called once, and only when a job is selected by none of the submission's own).
StoredPolicyModels = (
    Sequence[PropagationPolicyModel] | Callable[[], Sequence[PropagationPolicyModel]]
)


def _lazy_stored(
    stored_policies: StoredPolicyModels, replaced: set[str]
) -> Callable[[], Sequence[PropagationPolicyModel]]:
    """The stored policies but those ``replaced`` (by key), read at the first call."""
    held: list[list[PropagationPolicyModel]] = []

    def stored() -> Sequence[PropagationPolicyModel]:
        if not held:
            found = stored_policies() if callable(stored_policies) else stored_policies
            held.append([p for p in found if p.key not in replaced])
        return held[0]

    return stored


def _governing(
    job_doc: WorkloadModel,
    own: Sequence[PropagationPolicyModel],
    stored: Callable[[], Sequence[PropagationPolicyModel]],
) -> tuple[PropagationPolicyModel | None, bool]:
    """The policy that governs ``job_doc`` and whether it is a stored one: the
    submission's own policies first, the stored ones of its namespace if none of
    those selects it (each set resolved by :func:`match_policy`; ``stored`` is
    called only then)."""
    found = match_policy(job_doc, own)
    if found is not None:
        return found, False
    found = match_policy(job_doc, stored())
    return found, found is not None


def _unselected(doc: Document) -> SpecIssue:
    """The issue of a job that no policy selects, of the submission or stored."""
    assert isinstance(doc.model, WorkloadModel)
    ns = quote(doc.model.namespace)
    msg = (
        f"no PropagationPolicy of the submission selects this {doc.kind}, and no policy "
        f"stored in namespace {ns} does; add one to the submission, or store one with "
        f"`fleet apply -f policy.yaml`, in namespace {ns} whose resourceSelectors name "
        f"apiVersion {doc.model.api_version}, kind {doc.kind}"
    )
    return doc.issue("", msg)


@dataclass(frozen=True, slots=True)
class Submission:
    """What a submission holds: its jobs, the training runtimes it registers and
    its PropagationPolicies (every one of them is to be stored)."""

    jobs: list[SubmittedJob]
    runtimes: list[Document] = field(default_factory=list)
    policies: list[Document] = field(default_factory=list)


def _submission(
    text: str,
    tree: quota.QuotaTree | None,
    clusters: Sequence[MemberClusterModel],
    first_seq: int,
    priority_classes: Mapping[str, int],
    *,
    require_policies: bool = False,
    limits: YamlLimits = DEFAULT_LIMITS,
    runtimes: Runtimes | None = None,
    stored_policies: StoredPolicyModels = (),
) -> tuple[Submission, list[SpecIssue]]:
    docs, issues = documents.parse_documents(text, limits)
    bad = {i.document for i in issues}
    unread = bad - {d.index for d in docs}  # documents that are not even valid models
    policies: list[Document] = []
    job_docs: list[Document] = []
    runtime_docs: list[Document] = []
    seen: dict[tuple[str, str], int] = {}
    for doc in docs:
        if not isinstance(doc.model, WorkloadModel | PropagationPolicyModel | TrainingRuntimeModel):
            msg = (
                f"{doc.kind} does not belong in a submission; expected PropagationPolicy "
                f"and jobs of the kinds Fleet runs: {registry.names()} (and, from an "
                "administrator, ClusterTrainingRuntime and TrainingRuntime)"
            )
            issues.append(doc.issue("kind", msg))
            continue
        if (doc.kind, doc.name) in seen:
            msg = f"duplicate {doc.kind} {doc.name} (first in document {seen[doc.kind, doc.name]})"
            issues.append(doc.issue("metadata.name", msg))
            continue
        seen[doc.kind, doc.name] = doc.index
        if isinstance(doc.model, PropagationPolicyModel):
            policies.append(doc)
        elif isinstance(doc.model, TrainingRuntimeModel):
            runtime_docs.append(doc)
        else:
            job_docs.append(doc)
    if require_policies and not (job_docs or policies or runtime_docs or unread):
        names = registry.names()
        msg = f"the submission holds no job (Fleet runs {names}) and no PropagationPolicy"
        issues.append(SpecIssue(0, "", "", "", msg))
    # The registered runtimes, and those this submission registers (which replace them).
    known = dict(runtimes or {})
    for doc in runtime_docs:
        assert isinstance(doc.model, TrainingRuntimeModel)
        if doc.index not in bad:
            known[doc.model.key] = doc.raw
    out: list[SubmittedJob] = []
    leaf_types = cluster_leaf_types(clusters)
    own = [p.model for p in policies if isinstance(p.model, PropagationPolicyModel)]
    policy_docs = {id(p.model): p for p in policies}
    # The submission's policies are stored too: they replace stored ones of their names.
    replaced = {p.key for p in own}
    stored = _lazy_stored(stored_policies, replaced)
    for doc in job_docs:
        assert isinstance(doc.model, WorkloadModel)
        # With an unreadable document, a policy may be missing only in appearance.
        if require_policies and not unread and _governing(doc.model, own, stored)[0] is None:
            issues.append(_unselected(doc))
    buildable = [doc for doc in job_docs if doc.index not in bad]
    for seq, doc in enumerate(buildable, start=first_seq):
        assert isinstance(doc.model, WorkloadModel)
        policy, from_store = _governing(doc.model, own, stored)
        resolved, problems = doc.model.resolve(known)
        if problems:
            issues.extend(doc.issue(p, m) for p, m in problems)
            continue
        doc = replace(doc, model=resolved, raw=resolved.stored(doc.raw))
        job, problems = _build(
            resolved,
            policy=policy,
            tree=tree,
            seq=seq,
            priority_classes=priority_classes,
            clusters=clusters,
            leaf_types=leaf_types,
        )
        issues.extend(doc.issue(p, m) for p, m in problems)
        if job is not None:
            if from_store:
                out.append(SubmittedJob(job, doc, None, policy))
            else:
                out.append(SubmittedJob(job, doc, policy_docs[id(policy)] if policy else None))
    valid = [p for p in policies if p.index not in bad]
    return Submission(out, runtime_docs, valid), sorted(issues, key=lambda i: i.document)


def check_submission(
    text: str,
    tree: quota.QuotaTree | None = None,
    clusters: Sequence[MemberClusterModel] = (),
    priority_classes: Mapping[str, int] = jobs.DEFAULT_PRIORITY_CLASSES,
    runtimes: Runtimes | None = None,
    stored_policies: StoredPolicyModels = (),
) -> tuple[int, int, list[SpecIssue]]:
    """(jobs, policies, issues) of a submission; without a tree, queues are not routed.

    With clusters, the jobs that pass are put to the server's fit test
    (:class:`fleet.manifests.fit.Capacity`).  A TrainJob's runtime is looked
    up among ``runtimes`` and the runtimes of the file; a job that no policy
    of the file selects is governed by ``stored_policies`` as on the server.
    A file of policies alone is a valid submission.
    """
    found, issues = _submission(
        text,
        tree,
        clusters,
        0,
        priority_classes,
        runtimes=runtimes,
        stored_policies=stored_policies,
    )
    if clusters:
        capacity = fit.Capacity(clusters)
        for sj in found.jobs:
            assert isinstance(sj.document.model, WorkloadModel)
            problems = capacity.problems(sj.job, sj.document.model)
            issues.extend(sj.document.issue(p, m) for p, m in problems)
        issues.sort(key=lambda i: i.document)
    return len(found.jobs), len(found.policies), issues


def submission_warnings(text: str) -> list[SpecIssue]:
    """What is legal in a submission but probably not meant, one issue per finding.

    A file without a job or a policy; a PropagationPolicy that selects no job
    of a file that holds jobs (it is stored all the same, for later jobs); a
    job that several policies select (one of them applies, chosen like
    Karmada: see :func:`match_policy`).  A file of policies alone is what
    stores them: nothing to warn about.
    """
    docs, _ = documents.parse_documents(text)
    policies = [d for d in docs if isinstance(d.model, PropagationPolicyModel)]
    jobs_ = [d for d in docs if isinstance(d.model, WorkloadModel)]
    out: list[SpecIssue] = []
    if not jobs_:
        if not policies:
            out.append(SpecIssue(0, "", "", "", "the file holds no job"))
        return out
    used: set[int] = set()
    for doc in jobs_:
        assert isinstance(doc.model, WorkloadModel)
        found = _selecting(doc, policies)
        used.update(p.index for p in found)
        selecting = [p.model for p in found if isinstance(p.model, PropagationPolicyModel)]
        chosen = match_policy(doc.model, selecting)
        if len(selecting) > 1 and chosen is not None:
            names = ", ".join(sorted(p.metadata.name for p in selecting))
            msg = (
                f"selected by {len(selecting)} PropagationPolicies ({names}); "
                f"{chosen.metadata.name} applies"
            )
            out.append(doc.issue("", msg))
    for p in policies:
        if p.index not in used:
            out.append(p.issue("spec.resourceSelectors", "selects no job of this file"))
    return sorted(out, key=lambda i: i.document)


def load_submission(
    text: str,
    tree: quota.QuotaTree,
    clusters: Sequence[MemberClusterModel] = (),
    first_seq: int = 0,
    priority_classes: Mapping[str, int] = jobs.DEFAULT_PRIORITY_CLASSES,
) -> list[Job]:
    """Every job of a submission as a core Job (seq from ``first_seq`` in
    document order), or one SpecError with every issue: all or nothing."""
    out, issues = _submission(text, tree, clusters, first_seq, priority_classes)
    if issues:
        raise SpecError(issues)
    return [s.job for s in out.jobs]


def load_submitted(
    text: str,
    tree: quota.QuotaTree,
    clusters: Sequence[MemberClusterModel] = (),
    first_seq: int = 0,
    priority_classes: Mapping[str, int] = jobs.DEFAULT_PRIORITY_CLASSES,
    *,
    require_policies: bool = True,
    limits: YamlLimits = DEFAULT_LIMITS,
    runtimes: Runtimes | None = None,
    stored_policies: StoredPolicyModels = (),
) -> Submission:
    """Every job of a submission with its documents, the training runtimes it
    registers and its policies, or one SpecError: all or nothing.

    Like :func:`load_submission`, reading the stream within ``limits``.  A
    job is governed by the policies of its own submission when one of them
    selects it, else by ``stored_policies`` (the standing ones, or a function
    that reads them, called only for such a job; those the submission names
    again are replaced by the submission's), each set
    resolved by :func:`match_policy`.  Every policy of the submission is
    returned to be stored, whether it selects one of its jobs or not (it may
    select later ones), so a file of policies alone is a valid submission.
    With ``require_policies`` a job that no policy selects, of the
    submission or stored, is an error, and so is an empty submission.

    A TrainJob's runtime is looked up among ``runtimes`` (the registered ones)
    and those of the submission, which replace a registered one of the same
    key.  A submission of runtimes alone needs no job or policy.
    """
    out, issues = _submission(
        text,
        tree,
        clusters,
        first_seq,
        priority_classes,
        require_policies=require_policies,
        limits=limits,
        runtimes=runtimes,
        stored_policies=stored_policies,
    )
    if issues:
        raise SpecError(issues)
    return out


def vc_gpus(cluster: MemberClusterModel) -> dict[str, int]:
    """Virtual cluster -> the GPUs (leaf cells) it is guaranteed in ``cluster``."""
    config = cluster.cell_config()
    types = config.cell_types

    def leaves(cell_type: str) -> int:
        t = types[cell_type]
        return 1 if t.child is None else t.child_number * leaves(t.child)

    out: dict[str, int] = {}
    for name, vc in config.vcs.items():
        out[name] = sum(cell.number * leaves(cell.cell_type) for cell in vc.cells)
    return out
