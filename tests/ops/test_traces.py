"""Spans of the API and the scheduler loop, and the log formats (in process, virtual clock)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fleet.api import keys, metrics
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.service import telemetry
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.running import settings
from fleet.testing.tokens import write_tokens_file

Client = TestClient[web.Request, web.Application]
YAML = {"Content-Type": "application/yaml"}


async def test_a_submission_leaves_request_cycle_dispatch_and_member_spans(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], database_url: str
) -> None:
    clock = VirtualClock(1_000.0)
    app = create_app(settings(database_url), clock=clock)
    spans = InMemorySpanExporter()
    app[metrics.TELEMETRY].tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    client = await aiohttp_client(app)
    sent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    resp = await client.post(
        "/api/v1/submissions",
        data=pytorchjob("traced", gpus=2),
        headers={**YAML, "traceparent": sent},
    )
    assert resp.status == 201, await resp.text()
    assert (await client.get("/api/v1/jobs/team-a/nope")).status == 404
    await running.settle(client.app[keys.SERVICE].loop, clock, 6.0)

    finished = spans.get_finished_spans()
    by_name: dict[str, list[telemetry.ReadableSpan]] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    (post,) = by_name["POST /api/v1/submissions"]
    assert post.attributes is not None and post.context is not None
    assert post.attributes["http.response.status_code"] == 201
    assert post.attributes["http.route"] == "/api/v1/submissions"
    assert format(post.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    (missing,) = by_name["GET /api/v1/jobs/{namespace}/{name}"]
    assert missing.attributes is not None
    assert missing.attributes["http.response.status_code"] == 404

    admitting = [
        s for s in by_name["scheduling cycle"] if s.attributes and s.attributes["fleet.admitted"]
    ]
    assert len(admitting) == 1
    cycle = admitting[0]
    assert cycle.attributes is not None and cycle.parent is not None
    assert cycle.attributes["fleet.preempted"] == 0
    assert float(str(cycle.attributes["fleet.duration_s"])) >= 0
    iteration = next(s for s in by_name["scheduler iteration"] if s.context == cycle.parent)
    assert iteration.parent is None
    (dispatch,) = by_name["dispatch"]
    (create,) = by_name["member create"]
    assert dispatch.attributes is not None and dispatch.attributes["job"] == "team-a/traced"
    assert create.parent == dispatch.context
    assert dispatch.context is not None and cycle.context is not None
    assert dispatch.context.trace_id == cycle.context.trace_id  # the same iteration


def test_log_lines_carry_the_current_trace_id_in_both_formats() -> None:
    tracing = telemetry.Telemetry()
    out = io.StringIO()
    ids: list[str] = []
    logger = logging.getLogger("fleet.test-telemetry")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    for formatter in (telemetry.JsonFormatter(), telemetry.TextFormatter()):
        handler = logging.StreamHandler(out)
        handler.setFormatter(formatter)
        logger.addHandler(handler)
        try:
            logger.info("outside")
            with tracing.tracer.start_as_current_span("work") as span:
                logger.info("inside %s", "a span", extra={"job": "team-a/x"})
                ids.append(format(span.get_span_context().trace_id, "032x"))
        finally:
            logger.removeHandler(handler)
    tracing.shutdown()
    json_outside, json_inside, text_outside, text_inside = out.getvalue().splitlines()
    assert json.loads(json_outside)["trace_id"] is None
    inside = json.loads(json_inside)
    assert inside["trace_id"] == ids[0] and inside["message"] == "inside a span"
    assert inside["job"] == "team-a/x" and inside["level"] == "INFO"
    assert "trace=" not in text_outside
    assert f"[trace={ids[1]} " in text_inside and text_inside.endswith(": inside a span")


def test_preemption_reasons_are_named_like_kueue() -> None:
    """The counter's reason is the preemption's cause, as the core names it."""
    from prometheus_client.parser import text_string_to_metric_families

    from fleet.core import decisions
    from fleet.core.decisions import Preempt

    tracing = telemetry.Telemetry()
    tracing.cycle(
        [
            Preempt("ns/a", "q", "c", (), "reclaimed for ns/x of queue r", cause=decisions.RECLAIM),
            Preempt(
                "ns/b", "q", "c", (), "preempted by ns/y (priority 3)", cause="InQueuePriority"
            ),
            Preempt("ns/c", "q", "c", (), "over its limits after a quota change", cause="QuotaCut"),
            Preempt("ns/d", "q", "c", (), "growth step taken back", unit="u2", cause="Reclaim"),
            Preempt("ns/e", "q", "c", (), "no cause"),
        ],
        0.01,
        5.0,
    )
    tracing.preempted([("q", decisions.NODE_HEALTH), ("q", decisions.FAILOVER)])
    text = tracing.prometheus_text().decode()
    tracing.shutdown()
    counted = {
        s.labels["reason"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "fleet_preempted_workloads_total"
    }
    assert counted == {
        "Reclaim": 1,
        "InQueuePriority": 1,
        "QuotaCut": 1,
        "NodeHealth": 1,
        "Failover": 1,
        telemetry.OTHER: 1,
    }


def test_quota_gauges_count_cores_and_bytes_like_kubernetes() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from fleet.core.view import LoopView, QueueView

    used = {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "3"}
    queue = QueueView("q", None, True, ("ns",), {"cpu": "4"}, None, used, {"cpu": "500m"}, 1, 0)
    tracing = telemetry.Telemetry()
    tracing.observe(lambda: LoopView(ready=True, queues=(queue,)))
    text = tracing.prometheus_text().decode()
    tracing.shutdown()
    samples = {
        (s.name, s.labels.get("resource")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels.get("queue") == "q"
    }
    assert samples[("fleet_cluster_queue_resource_usage", "cpu")] == 1.5
    assert samples[("fleet_cluster_queue_resource_usage", "memory")] == 2 * 2**30
    assert samples[("fleet_cluster_queue_resource_usage", "nvidia.com/gpu")] == 3
    assert samples[("fleet_cluster_queue_borrowed_resources", "cpu")] == 0.5
    assert samples[("fleet_cluster_queue_borrowed_resources", "memory")] == 0


def test_spans_are_recorded_only_once_something_takes_them() -> None:
    tracing = telemetry.Telemetry()
    with tracing.tracer.start_as_current_span("unseen", attributes={"a": "b"}) as span:
        assert not span.is_recording()  # nothing exports it: no attributes kept
        assert span.get_span_context().trace_id != 0  # the log lines still get an id
    spans = InMemorySpanExporter()
    tracing.tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    with tracing.tracer.start_as_current_span("seen", attributes={"a": "b"}) as span:
        assert span.is_recording()
    tracing.shutdown()
    assert [(s.name, dict(s.attributes or {})) for s in spans.get_finished_spans()] == [
        ("seen", {"a": "b"})
    ]


FORGED = "FAKE LINE level=ERROR the forged part"


def test_a_text_log_line_escapes_control_characters_and_indents_a_traceback() -> None:
    out = io.StringIO()
    logger = logging.getLogger("fleet.test-forging")
    logger.propagate = False
    handler = logging.StreamHandler(out)
    handler.setFormatter(telemetry.TextFormatter())
    logger.addHandler(handler)
    try:
        logger.warning("401 GET %s", f"/api/v1/jobs/a\n{FORGED}\r\x1b[2K\u2028/b")
        try:
            raise ValueError(f"bad name a\n{FORGED}")
        except ValueError:
            logger.exception("unexpected error answering GET %s", f"/x\n{FORGED}")
    finally:
        logger.removeHandler(handler)
    first, second, *traceback = out.getvalue().splitlines()
    assert first.endswith(f"401 GET /api/v1/jobs/a\\n{FORGED}\\r\\x1b[2K\\u2028/b")
    assert second.endswith(f"unexpected error answering GET /x\\n{FORGED}")
    assert traceback and all(line.startswith("  ") for line in traceback)
    assert f"  {FORGED}" in traceback  # the exception's own text, indented


async def test_a_request_path_with_an_encoded_newline_leaves_one_text_log_line(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    database_url: str,
    tmp_path: Path,
) -> None:
    tokens = write_tokens_file(tmp_path / "tokens.yaml")  # an unauthenticated call is logged
    app = create_app(settings(database_url, tokens_file=tokens), clock=VirtualClock(1_000.0))
    client = await aiohttp_client(app)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(telemetry.TextFormatter())
    logger = logging.getLogger("fleet")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        resp = await client.get("/api/v1/jobs/a%0AFAKE%20LINE/b")
        assert resp.status == 401
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = out.getvalue().splitlines()
    assert not [line for line in lines if line.startswith("FAKE")]
    (logged,) = [line for line in lines if "FAKE" in line]
    assert logged.endswith("401 GET /api/v1/jobs/a%0AFAKE%20LINE/b")


def test_nominal_quota_borrowing_limits_and_unadmitted_jobs_are_gauges() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from fleet.core import waiting
    from fleet.core.view import LoopView, QueueView

    limited = QueueView(
        "q",
        None,
        True,
        ("ns",),
        {"cpu": "4", "memory": "1Gi"},
        {"cpu": "6", "nvidia.com/gpu": "2"},
        {},
        {},
        0,
        3,
    )
    unlimited = QueueView("r", None, True, ("ns",), {"nvidia.com/gpu": "8"}, None, {}, {}, 0, 0)
    counts = dict.fromkeys(waiting.CATEGORIES, 0) | {waiting.QUOTA_MAX: 2, waiting.NOT_TRIED: 1}
    tracing = telemetry.Telemetry()
    tracing.observe(lambda: LoopView(ready=True, queues=(limited, unlimited), unadmitted=counts))
    text = tracing.prometheus_text().decode()
    tracing.shutdown()
    samples = {
        (s.name, s.labels.get("queue"), s.labels.get("resource") or s.labels.get("reason")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    nominal = "fleet_cluster_queue_nominal_quota"
    assert samples[(nominal, "q", "cpu")] == 4
    assert samples[(nominal, "q", "memory")] == 2**30
    assert samples[(nominal, "q", "nvidia.com/gpu")] == 0  # only its max names GPUs
    assert samples[(nominal, "r", "nvidia.com/gpu")] == 8
    limit = "fleet_cluster_queue_borrowing_limit"
    assert samples[(limit, "q", "cpu")] == 2
    assert samples[(limit, "q", "nvidia.com/gpu")] == 2
    assert (limit, "q", "memory") not in samples  # no max on memory: no limit
    assert not [k for k in samples if k[0] == limit and k[1] == "r"]
    unadmitted = {k[2]: v for k, v in samples.items() if k[0] == "fleet_unadmitted_workloads"}
    assert unadmitted == {c: counts[c] for c in waiting.CATEGORIES}


def test_each_leafs_fair_share_and_decayed_usage_are_gauges() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from fleet.core.fair_share import FairShareView
    from fleet.core.view import LoopView, QueueView

    def leaf(name: str, share: FairShareView | None) -> QueueView:
        gpus = {"nvidia.com/gpu": "8"}
        return QueueView(name, "root", True, (name,), gpus, None, {}, {}, 0, 0, share)

    remembered = FairShareView(2.0, 86400.0, {"nvidia.com/gpu": 120.5, "cpu": 3.0}, 0.75, 1, 2, "")
    without = FairShareView(1.0, 0.0, {}, None, 2, 2, "")
    tracing = telemetry.Telemetry()
    queues = (leaf("a", remembered), leaf("b", without), leaf("c", None))
    tracing.observe(lambda: LoopView(ready=True, queues=queues))
    text = tracing.prometheus_text().decode()
    tracing.shutdown()
    samples = {
        (s.name, s.labels.get("queue"), s.labels.get("resource")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith(("fleet_cluster_queue_weighted", "fleet_cluster_queue_decayed"))
    }
    assert samples == {
        ("fleet_cluster_queue_weighted_share", "a", None): 0.75,
        ("fleet_cluster_queue_decayed_usage", "a", "nvidia.com/gpu"): 120.5,
        ("fleet_cluster_queue_decayed_usage", "a", "cpu"): 3.0,
    }
