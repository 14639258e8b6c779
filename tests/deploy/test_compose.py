"""docker-compose.yml and its files: a real compose implementation reads them; the
Grafana dashboard and Prometheus refer only to what Fleet serves."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fleet.core.view import ClusterGpus, LoopView, PendingView, QueueView
from fleet.service import telemetry
from tests.databases import in_ci

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DEPLOY = ROOT / "deploy"


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    """``docker-compose config``: the file as the compose implementation resolves it."""
    found = shutil.which("docker-compose")
    if found is None:
        message = "docker-compose is not installed (scripts/run-tests installs Debian's)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(
        [found, "-f", str(COMPOSE), "config"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = yaml.safe_load(done.stdout)
    return loaded


def test_compose_runs_fleet_on_postgresql_with_its_observers(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {"fleet", "postgres", "otel-collector", "prometheus", "grafana"}
    fleet = services["fleet"]
    assert fleet["build"]["dockerfile"] == "deploy/Dockerfile"
    env = fleet["environment"]
    assert env["FLEET_DATABASE_URL"].startswith("postgresql+asyncpg://fleet:fleet@postgres:")
    assert env["FLEET_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert env["FLEET_LOG_FORMAT"] == "json"
    assert fleet["depends_on"]["postgres"]["condition"] == "service_healthy"
    # Every file a service mounts is in the repository.
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if source.startswith("/") or source.startswith("."):
                assert Path(source if source.startswith("/") else ROOT / source).exists(), source


def test_prometheus_scrapes_fleets_metrics_and_the_collector_takes_otlp() -> None:
    prometheus = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["fleet:8080"]
    collector = yaml.safe_load((DEPLOY / "compose" / "otel-collector.yaml").read_text())
    http = collector["receivers"]["otlp"]["protocols"]["http"]
    assert http["endpoint"].endswith(":4318")
    for pipeline in collector["service"]["pipelines"].values():
        assert set(pipeline["exporters"]) <= set(collector["exporters"])


def served_metric_names() -> set[str]:
    """Every sample name /metrics can show, from a Telemetry fed a small view."""
    tracing = telemetry.Telemetry()
    view = LoopView(
        ready=True,
        queues=(QueueView("q", None, True, ("ns",), {"nvidia.com/gpu": "8"}, None, {}, {}, 0, 1),),
        pending={"q": (PendingView("ns/a", 0, "normal", {"nvidia.com/gpu": "1"}, "quota"),)},
        clusters={"c": ClusterGpus(8, 0, {"q": (8, 0)})},
    )
    tracing.observe(lambda: view, lambda: {"c": True})
    tracing.cycle([], 0.01, 0.0)
    tracing.dispatch_failed("c")
    # counters and histograms with samples appear once something is recorded
    from fleet.core.cycle import Admit, Preempt
    from fleet.core.jobs import Mode

    tracing.queued(["ns/a"], 0.0)
    tracing.cycle(
        [
            Admit("ns/a", "q", "c", Mode.GUARANTEED, 0, ()),
            Preempt("ns/b", "q", "c", (), "preempted by ns/a (priority 1)"),
        ],
        0.01,
        5.0,
    )
    text = tracing.prometheus_text().decode()
    tracing.shutdown()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_dashboard_shows_only_metrics_fleet_serves() -> None:
    dashboard = json.loads(
        (DEPLOY / "compose" / "grafana" / "dashboards" / "fleet.json").read_text()
    )
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bfleet_[a-z_]+", e)}
    served = served_metric_names()
    assert used, "the dashboard queries nothing"
    assert used <= served, used - served
    # the list: queues, quota, cluster GPUs, cycle time, admission wait
    for needed in (
        "fleet_pending_workloads",
        "fleet_cluster_queue_resource_usage",
        "fleet_cluster_gpus",
        "fleet_admission_cycle_duration_seconds_bucket",
        "fleet_admission_wait_time_seconds_bucket",
    ):
        assert needed in used
    provider = yaml.safe_load(
        (DEPLOY / "compose" / "grafana" / "provisioning" / "dashboards" / "fleet.yaml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_the_dockerfile_is_multi_stage_non_root_and_checks_health() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert len(stages) == 2 and all("PYTHON_IMAGE" in s for s in stages)
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.\d+-slim", text, re.MULTILINE)
    assert re.search(r"^USER 10001", text, re.MULTILINE)
    assert "/healthz" in text.split("HEALTHCHECK", 1)[1]
