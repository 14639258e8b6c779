"""Traces, metrics and structured logs of a running service (OpenTelemetry).

Theory of operation (docs/decisions/0019-telemetry.md): one :class:`Telemetry`
per application, built from the settings; nothing is installed globally, so
several applications in one process (the tests) never share instruments.

* **Traces.**  A tracer provider whose spans go to an OTLP/HTTP collector when
  ``otlp_endpoint`` is set, and nowhere otherwise: then they are not recorded
  (no attributes kept, nothing ended into a processor) but still give every
  log line its trace id; they are recorded as soon as a span processor is
  added.  :func:`fleet.api.metrics.tracing_middleware` makes a span per
  request; the scheduler loop makes one per iteration, per scheduling cycle
  (attributes ``fleet.admitted``, ``fleet.preempted``, ``fleet.waiting``,
  ``fleet.duration_s``), per dispatch and per member API call.
* **Metrics.**  Named like Kueue's where they mean the same thing, with
  ``fleet_`` in place of ``kueue_``; counters and histograms are fed by the
  loop's hooks (:meth:`Telemetry.cycle`, :meth:`Telemetry.queued`,
  :meth:`Telemetry.dispatch_failed`), gauges are read from the loop's
  published view at collection time.  ``fleet_preempted_workloads_total``
  counts preemptions by the victim's queue and cause
  (:data:`fleet.core.decisions.CAUSES`): the cycle's
  (:meth:`Telemetry.cycle`) and those events cause (a bad node, a failover,
  :meth:`Telemetry.preempted`); ``fleet_unadmitted_workloads{reason}`` is the
  view's count of pending jobs by the category of why they wait
  (:data:`fleet.core.waiting.CATEGORIES`), every category listed;
  ``fleet_cluster_queue_nominal_quota`` is each node's ``min`` and
  ``fleet_cluster_queue_borrowing_limit`` its ``max`` less its ``min``, per
  resource its ``max`` sets; ``fleet_cluster_queue_weighted_share`` and
  ``fleet_cluster_queue_decayed_usage`` are each leaf's fair-share key and
  decayed usage (:mod:`fleet.core.fair_share`); ``fleet_quota_overpromised{resource}``
  (Fleet's own) is what the quota tree guarantees beyond the members'
  healthy capacity (:mod:`fleet.core.inventory`), 0 for every resource the
  members hold when it promises no more.  The Prometheus exporter writes them to
  a registry of this object, served on ``/metrics``; an OTLP exporter pushes
  them too when ``otlp_endpoint`` is set.  The admissions of the last hour
  are also kept with their waits (:meth:`Telemetry.recent_waits`), from which
  the dashboard's history samples its p95 wait (:mod:`fleet.service.history`).
* **Logs.**  :func:`configure_logging`: one JSON object per line (or a text
  line), each with the trace and span ids of the span current when it was
  written; by default (``auto``) text when stderr is a terminal and JSON
  when it is not.  Neither format lets a logged string break its line: JSON escapes
  it, and :class:`TextFormatter` escapes every control character of the
  message (a request path with ``%0A`` cannot forge a line) and indents a
  traceback's lines.
"""

from __future__ import annotations

import collections
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TextIO

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    ParentBased,
    Sampler,
    SamplingResult,
)
from opentelemetry.sdk.trace.sampling import Decision as SamplingDecision
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes
from prometheus_client import CollectorRegistry, generate_latest

log = logging.getLogger("fleet.service.telemetry")

__all__ = ["ReadableSpan", "Telemetry", "configure_logging"]

if TYPE_CHECKING:
    from fleet.core.cycle import Decision
    from fleet.core.fair_share import FairShareView


class QueueLike(Protocol):
    """What the gauges read of a queue of the loop's view (``fleet.core.view.QueueView``)."""

    @property
    def name(self) -> str: ...
    @property
    def min(self) -> Mapping[str, str]: ...
    @property
    def max(self) -> Mapping[str, str] | None: ...
    @property
    def used(self) -> Mapping[str, str]: ...
    @property
    def borrowed(self) -> Mapping[str, str]: ...
    @property
    def fair_share(self) -> FairShareView | None: ...


class GpusLike(Protocol):
    """A member's GPUs in the loop's view (``fleet.core.view.ClusterGpus``)."""

    @property
    def total(self) -> int: ...
    @property
    def used(self) -> int: ...
    @property
    def vcs(self) -> Mapping[str, tuple[int, int]]: ...


class ShortfallLike(Protocol):
    """What the tree promises beyond the members' capacity in one resource
    (``fleet.core.inventory.Shortfall``)."""

    @property
    def resource(self) -> str: ...
    def quantities(self) -> dict[str, str]: ...


class InventoryLike(Protocol):
    """The members' healthy capacity (``fleet.core.inventory.Inventory``)."""

    @property
    def declared(self) -> frozenset[str]: ...


class ViewLike(Protocol):
    """What the gauges read of the loop's published view (``fleet.core.view.LoopView``)."""

    @property
    def queues(self) -> Sequence[QueueLike]: ...
    @property
    def pending(self) -> Mapping[str, Sequence[object]]: ...
    @property
    def clusters(self) -> Mapping[str, GpusLike]: ...
    @property
    def inventory(self) -> InventoryLike: ...
    @property
    def overpromised(self) -> Sequence[ShortfallLike]: ...
    @property
    def unadmitted(self) -> Mapping[str, int]: ...


#: Seconds of admissions whose waits :meth:`Telemetry.recent_waits` keeps (the
#: dashboard's p95 wait is of the last hour), and at most how many.
RECENT_WAITS: Final = 3600.0
RECENT_WAITS_MAX: Final = 100_000
#: Histogram buckets in seconds: cycles take milliseconds, admission waits minutes to days.
CYCLE_BUCKETS: Final = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WAIT_BUCKETS: Final = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0)

#: The label of a preemption that names no cause (none does: every path gives one).
OTHER: Final = "Other"


class _WhileExported(Sampler):
    """Records spans (as the SDK's default, parent-based, does) only once a span
    processor takes them; until then a span is a non-recording one, which costs a
    third as much and still carries its trace and span ids to the log lines."""

    def __init__(self) -> None:
        self.exported = False
        self._recording = ParentBased(ALWAYS_ON)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if not self.exported:
            return _DROPPED
        return self._recording.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return "WhileExported{ParentBased{ALWAYS_ON}}"


_DROPPED: Final = SamplingResult(SamplingDecision.DROP)


class _Provider(TracerProvider):
    """A tracer provider whose spans are recorded once a processor is added."""

    def __init__(self, resource: Resource) -> None:
        self._sampler_switch = _WhileExported()
        super().__init__(resource=resource, sampler=self._sampler_switch)

    def add_span_processor(self, span_processor: SpanProcessor) -> None:
        super().add_span_processor(span_processor)
        self._sampler_switch.exported = True


class Telemetry:
    """Tracer, meters and the Prometheus registry of one service (module docstring)."""

    def __init__(self, *, otlp_endpoint: str | None = None, service_name: str = "fleet") -> None:
        resource = Resource.create({"service.name": service_name})
        self.tracer_provider = _Provider(resource=resource)
        self.registry = CollectorRegistry(auto_describe=True)
        readers: list[MetricReader] = [PrometheusMetricReader(registry=self.registry)]
        if otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            base = otlp_endpoint.rstrip("/")
            self.tracer_provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces"))
            )
            readers.append(
                PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{base}/v1/metrics"))
            )
        views = [
            View(
                instrument_name="fleet_admission_cycle_duration",
                aggregation=ExplicitBucketHistogramAggregation(CYCLE_BUCKETS),
            ),
            View(
                instrument_name="fleet_admission_wait_time",
                aggregation=ExplicitBucketHistogramAggregation(WAIT_BUCKETS),
            ),
        ]
        self.meter_provider = MeterProvider(metric_readers=readers, resource=resource, views=views)
        self.tracer = self.tracer_provider.get_tracer("fleet")
        meter = self.meter_provider.get_meter("fleet")
        self._admitted = meter.create_counter(
            "fleet_admitted_workloads", unit="1", description="Jobs admitted, per queue."
        )
        self._wait = meter.create_histogram(
            "fleet_admission_wait_time",
            unit="s",
            description="Time from submission (or requeue) to admission, per queue.",
        )
        self._cycle = meter.create_histogram(
            "fleet_admission_cycle_duration",
            unit="s",
            description="Duration of a scheduling cycle.",
        )
        self._preempted = meter.create_counter(
            "fleet_preempted_workloads",
            unit="1",
            description="Jobs preempted, per queue of the victim and reason (the cause: "
            "Reclaim, InQueuePriority, Opportunistic, QuotaCut, NodeHealth, Failover, "
            "Evicted, ClusterRemoved, MaxRuntime).",
        )
        self._dispatch_errors = meter.create_counter(
            "fleet_dispatch_errors",
            unit="1",
            description="Jobs a member cluster refused to create, per cluster.",
        )
        self._view: Callable[[], ViewLike] | None = None
        self._health: Callable[[], Mapping[str, bool]] | None = None
        meter.create_observable_gauge(
            "fleet_pending_workloads",
            [self._observe_pending],
            unit="1",
            description="Pending jobs per leaf queue (status: active).",
        )
        meter.create_observable_gauge(
            "fleet_cluster_queue_resource_usage",
            [self._observe_usage],
            unit="1",
            description="Quota used per queue and resource (GPUs, CPU cores, bytes).",
        )
        meter.create_observable_gauge(
            "fleet_unadmitted_workloads",
            [self._observe_unadmitted],
            unit="1",
            description="Pending jobs by the category of why they wait (QuotaMax, QuotaMin, "
            "OwedToGuaranteed, NoClusterFits, ClusterNotReady, Inadmissible, "
            "VictimsProtected, QueueOrder, UserLimit, NotYetTried, Other).",
        )
        meter.create_observable_gauge(
            "fleet_cluster_queue_nominal_quota",
            [self._observe_nominal],
            unit="1",
            description="Each quota tree node's min per resource (GPUs, CPU cores, bytes).",
        )
        meter.create_observable_gauge(
            "fleet_cluster_queue_borrowing_limit",
            [self._observe_borrowing_limit],
            unit="1",
            description="How far each quota tree node may borrow beyond its min (its max "
            "less its min), per resource its max sets.",
        )
        meter.create_observable_gauge(
            "fleet_cluster_queue_weighted_share",
            [self._observe_weighted_share],
            unit="1",
            description="Each leaf queue's fair-share key: its decayed usage (without "
            "fair share's memory, its usage) over its min (else max) and weight, the "
            "largest over the resources; the lowest borrows first.",
        )
        meter.create_observable_gauge(
            "fleet_cluster_queue_decayed_usage",
            [self._observe_decayed_usage],
            unit="1",
            description="Each leaf queue's decayed usage per resource (fair share's "
            "memory), in resource-hours (GPU-hours, CPU-core-hours, GiB-hours).",
        )
        meter.create_observable_gauge(
            "fleet_cluster_queue_borrowed_resources",
            [self._observe_borrowed],
            unit="1",
            description="Quota borrowed beyond min per queue and resource.",
        )
        meter.create_observable_gauge(
            "fleet_cluster_gpus",
            [self._observe_gpus],
            unit="1",
            description="GPUs per member cluster and virtual cluster (vc empty: the "
            "whole cluster), by state (used, free).",
        )
        meter.create_observable_gauge(
            "fleet_cluster_health",
            [self._observe_health],
            unit="1",
            description="1 when a member cluster is ready, 0 when not.",
        )
        meter.create_observable_gauge(
            "fleet_quota_overpromised",
            [self._observe_overpromised],
            unit="1",
            description="What the quota tree guarantees beyond the members' healthy "
            "capacity, per resource and GPU type (GPUs, CPU cores, bytes); 0 when it "
            "promises no more than exists.",
        )
        #: job key -> when it (last) became pending, for the admission wait time
        self._queued_since: dict[str, float] = {}
        #: the admissions of the last RECENT_WAITS seconds: (when, queue, wait), oldest first
        self._recent: collections.deque[tuple[float, str, float]] = collections.deque(
            maxlen=RECENT_WAITS_MAX
        )

    # What the service tells it -----------------------------------------------------------
    def observe(
        self,
        view: Callable[[], ViewLike],
        health: Callable[[], Mapping[str, bool]] | None = None,
    ) -> None:
        """Read the gauges from ``view()`` (and member readiness from ``health()``)."""
        self._view = view
        self._health = health

    def queued(self, keys: Iterable[str], now: float) -> None:
        """Jobs that became pending at ``now`` (submitted, requeued or found at start)."""
        for key in keys:
            self._queued_since.setdefault(key, now)

    def cycle(self, decisions: Sequence[Decision], seconds: float, now: float) -> None:
        """Count a cycle's decisions and record its duration."""
        from fleet.core.cycle import Admit, Preempt

        self._cycle.record(seconds)
        admitted: dict[str, int] = {}  # one counter update per queue, not per job
        for d in decisions:
            if isinstance(d, Admit) and not d.grown:
                admitted[d.queue] = admitted.get(d.queue, 0) + 1
                since = self._queued_since.pop(d.job, None)
                if since is not None:
                    wait = max(0.0, now - since)
                    self._wait.record(wait, {"queue": d.queue})
                    self._recent.append((now, d.queue, wait))
            elif isinstance(d, Preempt) and not d.unit:
                self._preempted.add(1, {"queue": d.queue, "reason": d.cause or OTHER})
                self._queued_since[d.job] = now
        for queue, count in sorted(admitted.items()):
            self._admitted.add(count, {"queue": queue})
        while self._recent and self._recent[0][0] < now - RECENT_WAITS:
            self._recent.popleft()

    def recent_waits(self, since: float) -> list[tuple[str, float]]:
        """``(queue, seconds waited)`` of the admissions from ``since`` on (at most the
        last :data:`RECENT_WAITS` seconds' are kept)."""
        return [(queue, wait) for at, queue, wait in self._recent if at >= since]

    def cycle_done(
        self, span: Any, decisions: Sequence[Decision], seconds: float, now: float
    ) -> None:
        """:meth:`cycle`, and the outcome as attributes of the cycle's ``span``."""
        from fleet.core.cycle import Admit, Preempt, Wait

        self.cycle(decisions, seconds, now)
        admitted = sum(1 for d in decisions if isinstance(d, Admit))
        preempted = sum(1 for d in decisions if isinstance(d, Preempt))
        waiting = sum(1 for d in decisions if isinstance(d, Wait))
        if isinstance(span, trace.Span) and span.is_recording():
            span.set_attributes(
                {
                    "fleet.admitted": admitted,
                    "fleet.preempted": preempted,
                    "fleet.waiting": waiting,
                    "fleet.duration_s": seconds,
                }
            )
        if admitted or preempted:  # quiet cycles leave no log line
            log.info(
                "cycle: %d admitted, %d preempted, %d waiting in %.1f ms",
                admitted,
                preempted,
                waiting,
                seconds * 1000,
            )

    def preempted(self, stopped: Iterable[tuple[str, str]]) -> None:
        """Count preemptions that events caused, each (queue of the victim, cause)."""
        for queue, cause in stopped:
            self._preempted.add(1, {"queue": queue, "reason": cause or OTHER})

    def forget(self, keys: Iterable[str]) -> None:
        """Jobs that left the queue without being admitted (cancelled, failed)."""
        for key in keys:
            self._queued_since.pop(key, None)

    def dispatch_failed(self, cluster: str) -> None:
        self._dispatch_errors.add(1, {"cluster": cluster})

    # Gauges --------------------------------------------------------------------------------
    def _observe_pending(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._view is None:
            return []
        view = self._view()
        return [
            Observation(len(jobs), {"queue": leaf, "status": "active"})
            for leaf, jobs in sorted(view.pending.items())
        ]

    def _resources(self, which: Literal["used", "borrowed"]) -> list[Observation]:
        if self._view is None:
            return []
        from fleet.core.resources import parse_value  # cores, bytes, counts (as Kubernetes)

        out: list[Observation] = []
        for q in self._view().queues:
            values = q.used if which == "used" else q.borrowed
            for resource in sorted(set(q.min) | set(q.used) | set(q.borrowed)):
                amount = values.get(resource)
                number = 0.0 if amount is None else float(parse_value(amount))
                out.append(Observation(number, {"queue": q.name, "resource": resource}))
        return out

    def _observe_unadmitted(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._view is None:
            return []
        return [
            Observation(count, {"reason": reason})
            for reason, count in self._view().unadmitted.items()
        ]

    def _observe_nominal(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._view is None:
            return []
        from fleet.core.resources import parse_value

        out: list[Observation] = []
        for q in self._view().queues:
            for resource in sorted(set(q.min) | set(q.max or ())):
                amount = float(parse_value(q.min.get(resource, 0)))
                out.append(Observation(amount, {"queue": q.name, "resource": resource}))
        return out

    def _observe_borrowing_limit(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._view is None:
            return []
        from fleet.core.resources import parse_value

        out: list[Observation] = []
        for q in self._view().queues:
            for resource, limit in sorted((q.max or {}).items()):
                room = parse_value(limit) - parse_value(q.min.get(resource, 0))
                out.append(Observation(float(room), {"queue": q.name, "resource": resource}))
        return out

    def _observe_weighted_share(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._view is None:
            return []
        return [
            Observation(q.fair_share.share, {"queue": q.name})
            for q in self._view().queues
            if q.fair_share is not None and q.fair_share.share is not None
        ]

    def _observe_decayed_usage(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._view is None:
            return []
        return [
            Observation(amount, {"queue": q.name, "resource": resource})
            for q in self._view().queues
            if q.fair_share is not None
            for resource, amount in q.fair_share.decayed.items()
        ]

    def _observe_usage(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._resources("used")

    def _observe_borrowed(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._resources("borrowed")

    def _observe_gpus(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._view is None:
            return []
        out: list[Observation] = []
        for name, gpus in sorted(self._view().clusters.items()):
            out.append(Observation(gpus.used, {"cluster": name, "vc": "", "state": "used"}))
            out.append(
                Observation(gpus.total - gpus.used, {"cluster": name, "vc": "", "state": "free"})
            )
            for vc, (total, used) in sorted(gpus.vcs.items()):
                out.append(Observation(used, {"cluster": name, "vc": vc, "state": "used"}))
                free = max(0, total - used)
                out.append(Observation(free, {"cluster": name, "vc": vc, "state": "free"}))
        return out

    def _observe_overpromised(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._view is None:
            return []
        from fleet.core.resources import parse_value  # cores, bytes, counts (as Kubernetes)

        view = self._view()
        short = {s.resource: s.quantities()["short"] for s in view.overpromised}
        return [
            Observation(float(parse_value(short.get(r, 0))), {"resource": r})
            for r in sorted(set(view.inventory.declared) | set(short))
        ]

    def _observe_health(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._health is None:
            return []
        return [
            Observation(1 if ready else 0, {"cluster": name})
            for name, ready in sorted(self._health().items())
        ]

    # Export --------------------------------------------------------------------------------
    def prometheus_text(self) -> bytes:
        """Every metric in the Prometheus text format (what ``/metrics`` answers)."""
        return generate_latest(self.registry)

    def shutdown(self) -> None:
        self.meter_provider.shutdown()
        self.tracer_provider.shutdown()


# Logs ---------------------------------------------------------------------------------------

_STANDARD: Final = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "trace",
}


def _trace_ids() -> tuple[str | None, str | None]:
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None, None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, trace and span ids."""

    def format(self, record: logging.LogRecord) -> str:
        trace_id, span_id = _trace_ids()
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "trace_id": trace_id,
            "span_id": span_id,
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool) else str(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


#: Characters that end or rewrite a line: C0 and C1 controls (tab aside), DEL, the Unicode
#: line and paragraph separators.
_LINE_BREAKERS: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def escape_controls(text: str) -> str:
    """``text`` on one line: every control character as its escape (``\\n``, ``\\x1b``)."""
    return _LINE_BREAKERS.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


class TextFormatter(logging.Formatter):
    """``time level logger [trace=...]: message``, one line per record.

    The message (arguments included: request paths, names, errors) has its
    control characters escaped, so nothing a caller sends can end the line
    and forge another; a traceback follows on lines of its own, each
    indented, so that every line a record adds after its first starts with
    a space.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(trace)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        trace_id, span_id = _trace_ids()
        record.trace = "" if trace_id is None else f" [trace={trace_id} span={span_id}]"
        record.message = escape_controls(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        extra = [record.exc_text] if record.exc_text else []
        if record.stack_info:
            extra.append(self.formatStack(record.stack_info))
        for text in extra:
            line += "".join("\n  " + escape_controls(part) for part in text.split("\n"))
        return line


def configure_logging(
    level: str, fmt: Literal["auto", "json", "text"], stream: TextIO | None = None
) -> None:
    """Send every log record to ``stream`` (stderr) as ``fmt``, from ``level`` up;
    ``auto``: text on a terminal, JSON otherwise (a file, a pipe, a collector)."""
    out = sys.stderr if stream is None else stream
    if fmt == "auto":
        fmt = "text" if _is_terminal(out) else "json"
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no file behind it, or closed
        return False
