"""``/metrics`` and the JSON logs of a real ``fleet serve`` after a small workload."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleet.testing import servers
from fleet.testing.documents import pytorchjob

pytestmark = pytest.mark.slow

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with servers.serving(tmp_path) as server:
        yield server.url, server.log


def scrape(server: str) -> Samples:
    with urllib.request.urlopen(f"{server}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` whose labels include ``labels`` (0 when there is none)."""
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls)]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else 0.0


def submit(server: str, text: str) -> None:
    request = urllib.request.Request(
        f"{server}/api/v1/submissions",
        data=text.encode(),
        headers={"Content-Type": "application/yaml"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status in (200, 201, 202), resp.status


def until(server: str, done: Callable[[Samples], bool]) -> Samples:
    """Scrape until ``done`` holds (30 s at most); the last scrape."""
    deadline = time.monotonic() + 30
    samples = scrape(server)
    while not done(samples) and time.monotonic() < deadline:
        time.sleep(0.1)
        samples = scrape(server)
    return samples


def test_metrics_move_with_a_small_workload(served: tuple[str, Path]) -> None:
    server, log = served
    before = scrape(server)
    assert value(before, "fleet_admitted_workloads_total", queue="team-a") == 0
    assert value(before, "fleet_cluster_gpus", cluster="east", vc="", state="used") == 0
    free_before = sum(
        v
        for (n, ls), v in before.items()
        if n == "fleet_cluster_gpus" and ("vc", "") in ls and ("state", "free") in ls
    )
    assert free_before == 48  # the example clusters
    assert value(before, "fleet_cluster_health", cluster="east") == 1
    cycles_before = value(before, "fleet_admission_cycle_duration_seconds_count")

    submit(server, pytorchjob("one", gpus=2) + "---\n" + pytorchjob("two", gpus=2))
    # sandbox may borrow 8 GPUs at most: a 16-GPU job there waits
    submit(server, pytorchjob("big", namespace="sandbox", workers=2, gpus=8))
    after = until(
        server,
        lambda m: (
            value(m, "fleet_admitted_workloads_total", queue="team-a") == 2
            and value(m, "fleet_pending_workloads", queue="sandbox", status="active") == 1
        ),
    )
    assert value(after, "fleet_admitted_workloads_total", queue="team-a") == 2
    assert value(after, "fleet_admitted_workloads_total", queue="sandbox") == 0
    assert value(after, "fleet_pending_workloads", queue="sandbox", status="active") == 1
    assert value(after, "fleet_pending_workloads", queue="team-a", status="active") == 0
    assert value(after, "fleet_admission_wait_time_seconds_count", queue="team-a") == 2
    assert value(after, "fleet_admission_wait_time_seconds_sum", queue="team-a") >= 0
    assert value(after, "fleet_admission_cycle_duration_seconds_count") > cycles_before
    usage = value(
        after, "fleet_cluster_queue_resource_usage", queue="team-a", resource="nvidia.com/gpu"
    )
    assert usage == 4
    assert (
        value(
            after, "fleet_cluster_queue_resource_usage", queue="research", resource="nvidia.com/gpu"
        )
        == 4
    )
    used = sum(
        v
        for (n, ls), v in after.items()
        if n == "fleet_cluster_gpus" and ("vc", "") in ls and ("state", "used") in ls
    )
    free = sum(
        v
        for (n, ls), v in after.items()
        if n == "fleet_cluster_gpus" and ("vc", "") in ls and ("state", "free") in ls
    )
    assert (used, free) == (4, 44)

    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message", "trace_id"} <= set(e) for e in lines)
    traced = [e for e in lines if e["trace_id"] is not None]
    assert traced, "no log line written inside a span"
    assert all(len(e["trace_id"]) == 32 and int(e["trace_id"], 16) for e in traced)
