"""Job traces in: Philly, Alibaba openb, Armada's simulator workloads, and Fleet's own YAML.

Theory of operation: every reader turns one file into a list of
:class:`TraceJob` (who, which queue, when submitted, how long it runs, and
its gang), sorted by submission time (ties keep the file's order).  A trace
job becomes a PyTorchJob of ``replicas`` workers with ``gpus`` GPUs each
(:func:`gang_shape`): a job that fits one 8-GPU node is one replica with all
its GPUs; a larger one is split into the fewest equal replicas of at most
one node each (16 -> 2 x 8, 24 -> 3 x 8, 12 -> 2 x 6, 20 -> 4 x 5), all
gang-scheduled, as a data-parallel job would be launched.

* ``philly`` (``philly_vc_jobs.csv``): ``vc`` is the queue ``vc-<vc>`` and
  the namespace; ``submit_time_s``, ``num_gpus``, ``duration_s`` as they are.
  Every VC's clock starts at its own first job (SOURCE.md, caveat 1): they
  are replayed on one timeline starting together.
* ``openb`` (``openb_pod_list_default.csv``): one job per pod that asks for
  GPUs and was scheduled; a fraction of a GPU is one whole GPU (Fleet does not
  share GPUs); it runs ``deletion_time - scheduled_time`` (at least 1 s).  The
  trace has no tenant: each pod is put in one of :data:`OPENB_TENANTS`
  synthetic tenants (``tenant-0`` ...) by a hash of its name, and ``qos``
  gives the priority class (``LS``/``Guaranteed`` -> ``prod``,
  ``Burstable`` -> ``test``, ``BE`` -> ``oppo``).
* ``armada`` (Armada's simulator workload YAML): every job template gives
  ``number`` jobs of its queue, submitted at ``earliestSubmitTime`` (default
  0), running ``runtimeDistribution.minimum`` plus ``tailMean`` (the mean of
  the tail; the replay is deterministic), asking its ``nvidia.com/gpu``
  request (CPU and memory requests are not replayed).
* ``fleet``: Fleet's own submissions (PropagationPolicies and PyTorchJobs)
  whose PyTorchJobs carry ``fleet.io/submit-time`` (seconds, or a duration
  such as ``90s`` or ``1h``; default 0) and run for their
  ``fleet.io/simulated-duration``.

Bad input raises :class:`TraceError` naming the file, the row (or document)
and the column (or field), and why; nothing is replayed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from fleet.clusters.sim import DEFAULT_DURATION, DURATION_ANNOTATION, parse_duration
from fleet.core.jobs import Job
from fleet.core.quota import QuotaTree
from fleet.manifests import convert
from fleet.manifests.errors import SpecError
from fleet.manifests.models import MemberClusterModel

#: GPUs of one node in generated clusters: the largest replica of a split job.
NODE_GPUS: Final = 8
#: Synthetic tenants of the openb trace (it has no tenant column).
OPENB_TENANTS: Final = 4
#: The annotation that says when a job of a ``fleet`` trace is submitted.
SUBMIT_ANNOTATION: Final = "fleet.io/submit-time"
FORMATS: Final = ("philly", "openb", "armada", "fleet")

_OPENB_PRIORITY: Final = {"LS": "prod", "Guaranteed": "prod", "Burstable": "test", "BE": "oppo"}
_ARMADA_PRIORITY: Final = {"armada-preemptible": "oppo"}


class TraceError(ValueError):
    """A trace that cannot be replayed; the message says where and why."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: a gang of ``replicas`` pods of ``gpus`` GPUs each.

    ``job``, ``manifest`` and ``policy`` are set by the ``fleet`` reader (the
    submitted documents and the core job they make); the other readers leave
    them unset and the engine builds them from the fields.
    """

    key: str  # namespace/name
    queue: str
    submit: float
    duration: float
    replicas: int
    gpus: int
    priority_class: str = "test"
    #: The PyTorchJob declares its run time (``fleet.io/expected-duration``).
    declared: bool = False
    job: Job | None = field(default=None, compare=False)
    manifest: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    policy: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus


def gang_shape(gpus: int, node_gpus: int = NODE_GPUS) -> tuple[int, int]:
    """``(replicas, GPUs per replica)`` of a job asking ``gpus`` GPUs (module docstring)."""
    if gpus <= node_gpus:
        return 1, gpus
    replicas = math.ceil(gpus / node_gpus)
    while gpus % replicas:
        replicas += 1
    return replicas, gpus // replicas


def _sorted(jobs: list[TraceJob]) -> list[TraceJob]:
    return sorted(jobs, key=lambda j: j.submit)  # stable: ties keep the file's order


# CSV helpers ---------------------------------------------------------------------------


def _rows(text: str, where: str, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line, row)`` of a CSV text whose header has ``columns``."""
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in columns if c not in header]
    if missing:
        raise TraceError(
            f"{where}: line 1: missing column(s) {', '.join(missing)} "
            f"(the header has {', '.join(header) or 'nothing'})"
        )
    for row in reader:
        if None in row or any(row.get(c) is None for c in columns):
            raise TraceError(f"{where}: line {reader.line_num}: expected {len(header)} fields")
        yield reader.line_num, row


def _number(row: Mapping[str, str], column: str, where: str, line: int, *, minimum: float) -> float:
    text = row[column].strip()
    try:
        value = float(text)
    except ValueError:
        raise TraceError(
            f"{where}: line {line}: column {column}: {text[:60]!r} is not a number"
        ) from None
    if not math.isfinite(value) or value < minimum:
        raise TraceError(
            f"{where}: line {line}: column {column}: {text[:60]!r} is below {minimum:g}"
            if math.isfinite(value)
            else f"{where}: line {line}: column {column}: {text[:60]!r} is not a finite number"
        )
    return value


def _whole(row: Mapping[str, str], column: str, where: str, line: int, *, minimum: int) -> int:
    value = _number(row, column, where, line, minimum=minimum)
    if value != int(value):
        raise TraceError(
            f"{where}: line {line}: column {column}: {row[column]!r} is not a whole number"
        )
    return int(value)


def _label(text: str) -> str:
    """``text`` as a DNS label fragment (lowercase letters, digits and ``-``)."""
    out = "".join(c if c.isalnum() and c.isascii() else "-" for c in text.lower()).strip("-")
    return out or "x"


# Readers ---------------------------------------------------------------------------------


def read_philly(text: str, where: str = "philly trace") -> list[TraceJob]:
    """The jobs of ``philly_vc_jobs.csv`` (module docstring)."""
    out: list[TraceJob] = []
    for line, row in _rows(
        text, where, ("vc", "job_idx", "submit_time_s", "num_gpus", "duration_s")
    ):
        vc = row["vc"].strip()
        if not vc:
            raise TraceError(f"{where}: line {line}: column vc: empty")
        idx = _whole(row, "job_idx", where, line, minimum=0)
        gpus = _whole(row, "num_gpus", where, line, minimum=1)
        replicas, per = gang_shape(gpus)
        queue = f"vc-{_label(vc)}"
        out.append(
            TraceJob(
                key=f"{queue}/job-{idx}",
                queue=queue,
                submit=_number(row, "submit_time_s", where, line, minimum=0),
                duration=max(1.0, _number(row, "duration_s", where, line, minimum=0)),
                replicas=replicas,
                gpus=per,
            )
        )
    return _sorted(_unique(out, where))


def openb_tenant(name: str) -> str:
    """The synthetic tenant of an openb pod: a hash of its name, not a real tenant."""
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return f"tenant-{int.from_bytes(digest[:4], 'big') % OPENB_TENANTS}"


def read_openb(text: str, where: str = "openb trace") -> list[TraceJob]:
    """The GPU pods of ``openb_pod_list_*.csv`` that were scheduled (module docstring)."""
    columns = ("name", "num_gpu", "qos", "creation_time", "deletion_time", "scheduled_time")
    out: list[TraceJob] = []
    for line, row in _rows(text, where, columns):
        gpus = _whole(row, "num_gpu", where, line, minimum=0)
        if gpus == 0 or not row["scheduled_time"].strip():
            continue  # a CPU-only pod, or one that never ran
        qos = row["qos"].strip()
        if qos not in _OPENB_PRIORITY:
            known = ", ".join(_OPENB_PRIORITY)
            raise TraceError(
                f"{where}: line {line}: column qos: {qos[:60]!r} is not one of {known}"
            )
        created = _number(row, "creation_time", where, line, minimum=0)
        scheduled = _number(row, "scheduled_time", where, line, minimum=0)
        deleted = _number(row, "deletion_time", where, line, minimum=0)
        if deleted < scheduled:
            raise TraceError(
                f"{where}: line {line}: column deletion_time: {deleted:g} is before "
                f"scheduled_time {scheduled:g}"
            )
        name = _label(row["name"])
        tenant = openb_tenant(row["name"])
        replicas, per = gang_shape(gpus)
        out.append(
            TraceJob(
                key=f"{tenant}/{name}",
                queue=tenant,
                submit=created,
                duration=max(1.0, deleted - scheduled),
                replicas=replicas,
                gpus=per,
                priority_class=_OPENB_PRIORITY[qos],
            )
        )
    return _sorted(_unique(out, where))


def _seconds(value: object, where: str, *, zero: bool) -> float:
    """Seconds from a number or a duration text (``90s``, ``5m``, ``1h30m``)."""
    if isinstance(value, bool):
        raise TraceError(f"{where}: {value!r} is not a number of seconds or a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if zero and text in ("0", "0s"):
            return 0.0
        try:
            seconds = float(text)
        except ValueError:
            try:
                seconds = parse_duration(text)
            except ValueError as e:
                raise TraceError(f"{where}: {e}") from None
    else:
        raise TraceError(f"{where}: {str(value)[:60]!r} is not a number of seconds or a duration")
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise TraceError(
            f"{where}: {value!r} must be a {'non-negative' if zero else 'positive'} time"
        )
    return seconds


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TraceError(f"{where}: must be a mapping")
    return value


def read_armada(text: str, where: str = "armada workload") -> list[TraceJob]:
    """The jobs of an Armada simulator workload file (module docstring)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TraceError(f"{where}: not YAML: {str(e)[:200]}") from None
    data = _mapping(data, where)
    queues = data.get("queues")
    if not isinstance(queues, list) or not queues:
        raise TraceError(f"{where}: queues: a non-empty list is required")
    out: list[TraceJob] = []
    for qi, raw_queue in enumerate(queues):
        qpath = f"{where}: queues[{qi}]"
        queue_doc = _mapping(raw_queue, qpath)
        name = queue_doc.get("name")
        if not isinstance(name, str) or not name.strip():
            raise TraceError(f"{qpath}.name: a non-empty string is required")
        queue = _label(name)
        templates = queue_doc.get("jobTemplates")
        if not isinstance(templates, list):
            raise TraceError(f"{qpath}.jobTemplates: a list is required")
        for ti, raw_template in enumerate(templates):
            tpath = f"{qpath}.jobTemplates[{ti}]"
            template = _mapping(raw_template, tpath)
            if template.get("dependencies"):
                raise TraceError(f"{tpath}.dependencies: job dependencies are not replayed")
            number = template.get("number", 1)
            if isinstance(number, bool) or not isinstance(number, int) or number < 1:
                raise TraceError(f"{tpath}.number: {number!r} is not a positive whole number")
            requirements = _mapping(template.get("requirements", {}), f"{tpath}.requirements")
            needs = _mapping(
                requirements.get("resourceRequirements", {}),
                f"{tpath}.requirements.resourceRequirements",
            )
            requests = _mapping(
                needs.get("requests", {}), f"{tpath}.requirements.resourceRequirements.requests"
            )
            gpu_text = requests.get("nvidia.com/gpu", 0)
            try:
                gpus = int(str(gpu_text))
            except ValueError:
                gpus = -1
            if gpus < 0:
                raise TraceError(
                    f"{tpath}.requirements.resourceRequirements.requests.nvidia.com/gpu: "
                    f"{str(gpu_text)[:60]!r} is not a whole number of GPUs"
                )
            runtime = _mapping(
                template.get("runtimeDistribution", {}), f"{tpath}.runtimeDistribution"
            )
            duration = _seconds(
                runtime.get("minimum", "60s"), f"{tpath}.runtimeDistribution.minimum", zero=False
            )
            if "tailMean" in runtime:
                duration += _seconds(
                    runtime["tailMean"], f"{tpath}.runtimeDistribution.tailMean", zero=True
                )
            submit = _seconds(
                template.get("earliestSubmitTime", 0), f"{tpath}.earliestSubmitTime", zero=True
            )
            klass = str(template.get("priorityClassName", ""))
            ident = _label(str(template.get("id") or f"t{ti}"))
            replicas, per = gang_shape(gpus)
            for n in range(number):
                out.append(
                    TraceJob(
                        key=f"{queue}/{ident}-{n}",
                        queue=queue,
                        submit=submit,
                        duration=duration,
                        replicas=replicas,
                        gpus=per,
                        priority_class=_ARMADA_PRIORITY.get(klass, "test"),
                    )
                )
    return _sorted(_unique(out, where))


def read_fleet(
    text: str,
    tree: QuotaTree,
    clusters: Sequence[MemberClusterModel],
    where: str = "fleet trace",
) -> list[TraceJob]:
    """Fleet submissions with ``fleet.io/submit-time`` annotations (module docstring)."""
    try:
        found = convert.load_submitted(text, tree, clusters).jobs
    except SpecError as e:
        raise TraceError("\n".join(f"{where}: {issue}" for issue in e.issues)) from None
    out: list[TraceJob] = []
    for sj in found:
        raw = sj.document.raw
        metadata = raw.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        path = f"{where}: document {sj.document.index} ({sj.job.key}): metadata.annotations"
        submit = _seconds(
            annotations.get(SUBMIT_ANNOTATION, 0), f"{path}.{SUBMIT_ANNOTATION}", zero=True
        )
        duration_text = annotations.get(DURATION_ANNOTATION)
        duration = (
            DEFAULT_DURATION
            if duration_text is None
            else _seconds(duration_text, f"{path}.{DURATION_ANNOTATION}", zero=False)
        )
        job = sj.job
        pods = job.pods
        out.append(
            TraceJob(
                key=job.key,
                queue=job.queue,
                submit=submit,
                duration=duration,
                replicas=len(pods),
                gpus=max((p.gpus for p in pods), default=0),
                priority_class=job.priority_class,
                job=job,
                manifest=_plain(raw),
                policy=None if sj.policy is None else _plain(sj.policy.raw),
            )
        )
    return _sorted(out)


def _plain(value: Any) -> Any:
    """YAML data as JSON data (keys as text; dates and other scalars as text)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _unique(jobs: list[TraceJob], where: str) -> list[TraceJob]:
    seen: set[str] = set()
    for job in jobs:
        if job.key in seen:
            raise TraceError(f"{where}: job {job.key} appears twice")
        seen.add(job.key)
    return jobs


Reader = Callable[[str, str], list[TraceJob]]
READERS: Final[Mapping[str, Reader]] = {
    "philly": read_philly,
    "openb": read_openb,
    "armada": read_armada,
}
