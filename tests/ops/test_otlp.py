"""``fleet serve --otlp-endpoint``: traces and metrics reach an OTLP/HTTP receiver."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from fleet.testing import servers
from fleet.testing.documents import pytorchjob
from tests.ops.test_metrics import submit

pytestmark = pytest.mark.slow


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP (protobuf) receiver that keeps the span and metric names it got."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: set[str] = set()
        self.metrics: set[str] = set()
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            if self.path == "/v1/traces":
                traces = ExportTraceServiceRequest.FromString(body)
                for resource in traces.resource_spans:
                    for scope in resource.scope_spans:
                        self.server.spans.update(s.name for s in scope.spans)
            elif self.path == "/v1/metrics":
                metrics = ExportMetricsServiceRequest.FromString(body)
                for resource in metrics.resource_metrics:
                    for scope in resource.scope_metrics:
                        self.server.metrics.update(m.name for m in scope.metrics)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_spans_and_metrics_are_pushed_to_the_otlp_endpoint(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # ms
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "300")  # ms
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}"
    with servers.serving(tmp_path, extra=["--otlp-endpoint", endpoint]) as server:
        submit(server.url, pytorchjob("pushed", gpus=1))
        wanted_spans = {"POST /api/v1/submissions", "scheduling cycle", "dispatch", "member create"}
        wanted_metrics = {"fleet_admitted_workloads", "fleet_admission_cycle_duration"}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with receiver.lock:
                if wanted_spans <= receiver.spans and wanted_metrics <= receiver.metrics:
                    break
            time.sleep(0.1)
    assert wanted_spans <= receiver.spans, receiver.spans
    assert wanted_metrics <= receiver.metrics, receiver.metrics
