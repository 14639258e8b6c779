"""Trace readers: what each format becomes, and bad input named by file, line and column."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.manifests import convert
from fleet.sim import traces
from fleet.sim.traces import TraceError, gang_shape

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "data" / "traces"


@pytest.mark.parametrize(
    ("gpus", "shape"),
    [
        (1, (1, 1)),
        (6, (1, 6)),
        (8, (1, 8)),
        (12, (2, 6)),
        (16, (2, 8)),
        (20, (4, 5)),
        (24, (3, 8)),
        (48, (6, 8)),
    ],
)
def test_a_job_larger_than_a_node_becomes_the_fewest_equal_replicas(
    gpus: int, shape: tuple[int, int]
) -> None:
    assert gang_shape(gpus) == shape


PHILLY = """\
vc,job_idx,submit_time_s,num_gpus,duration_s
b,0,0,16,100
a,0,0,1,50
a,1,30,2,0
"""


def test_philly_rows_become_jobs_of_their_vc_queue_in_submission_order() -> None:
    jobs = traces.read_philly(PHILLY)
    assert [(j.key, j.queue, j.submit, j.replicas, j.gpus, j.duration) for j in jobs] == [
        ("vc-b/job-0", "vc-b", 0.0, 2, 8, 100.0),
        ("vc-a/job-0", "vc-a", 0.0, 1, 1, 50.0),
        ("vc-a/job-1", "vc-a", 30.0, 1, 2, 1.0),  # a zero duration runs one second
    ]


def test_the_shipped_philly_trace_has_every_job_and_twelve_vcs() -> None:
    text = (TRACES / "philly-vc" / "philly_vc_jobs.csv").read_text(encoding="utf-8")
    jobs = traces.read_philly(text)
    assert len(jobs) == 109_532
    assert len({j.queue for j in jobs}) == 12
    assert [j.submit for j in jobs] == sorted(j.submit for j in jobs)
    assert max(j.total_gpus for j in jobs) == 48


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("vc,job_idx,submit_time_s\n", "line 1: missing column(s) num_gpus, duration_s"),
        (PHILLY + "a,2,x,1,5\n", "line 5: column submit_time_s: 'x' is not a number"),
        (PHILLY + "a,2,5,0,5\n", "line 5: column num_gpus: '0' is below 1"),
        (PHILLY + "a,2,5,1.5,5\n", "line 5: column num_gpus: '1.5' is not a whole number"),
        (PHILLY + "a,1,5,1,5\n", "job vc-a/job-1 appears twice"),
        (PHILLY + "a,3,5\n", "line 5: expected 5 fields"),
    ],
)
def test_a_bad_philly_row_is_named_by_line_and_column(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=r"^jobs\.csv: ") as e:
        traces.read_philly(text, "jobs.csv")
    assert message in str(e.value)


OPENB = """\
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
pod-a,1000,1024,1,460,,LS,Running,10,110,20
pod-b,1000,1024,0,0,,BE,Running,10,110,20
pod-c,1000,1024,8,1000,,BE,Failed,15,1015,15
pod-d,1000,1024,1,1000,,Burstable,Pending,20,500,
"""


def test_openb_keeps_scheduled_gpu_pods_in_synthetic_tenants() -> None:
    jobs = traces.read_openb(OPENB)
    assert [(j.key.partition("/")[2], j.gpus, j.duration, j.priority_class) for j in jobs] == [
        ("pod-a", 1, 90.0, "prod"),  # a fraction of a GPU is one GPU; runs from scheduling
        ("pod-c", 8, 1000.0, "oppo"),
    ]
    for job in jobs:
        assert job.queue == traces.openb_tenant(job.key.partition("/")[2])
        assert job.queue in {f"tenant-{i}" for i in range(traces.OPENB_TENANTS)}


def test_openb_refuses_an_unknown_qos() -> None:
    bad = OPENB + "pod-e,1,1,1,1000,,Gold,Running,1,2,1\n"
    with pytest.raises(TraceError, match=r"line 6: column qos: 'Gold' is not one of"):
        traces.read_openb(bad, "pods.csv")


def test_the_shipped_openb_trace_reads() -> None:
    text = (TRACES / "alibaba-openb-2023" / "openb_pod_list_default.csv").read_text("utf-8")
    jobs = traces.read_openb(text)
    assert 0 < len(jobs) < 7_064  # GPU pods that were scheduled
    assert {j.queue for j in jobs} == {f"tenant-{i}" for i in range(traces.OPENB_TENANTS)}


def test_armadas_basic_workload_is_ten_jobs_of_queue_a() -> None:
    text = (TRACES / "armada-sim" / "workloads" / "basicWorkload.yaml").read_text("utf-8")
    jobs = traces.read_armada(text)
    assert len(jobs) == 10
    assert {(j.queue, j.submit, j.duration, j.gpus) for j in jobs} == {("a", 0.0, 300.0, 0)}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("queues: []", "queues: a non-empty list is required"),
        ("queues: [{name: A, jobTemplates: [{number: 0}]}]", "jobTemplates[0].number: 0 is not"),
        (
            "queues: [{name: A, jobTemplates: [{dependencies: [x]}]}]",
            "jobTemplates[0].dependencies: job dependencies are not replayed",
        ),
        (
            "queues: [{name: A, jobTemplates: [{runtimeDistribution: {minimum: soon}}]}]",
            'runtimeDistribution.minimum: "soon" is not a duration',
        ),
    ],
)
def test_a_bad_armada_workload_names_the_field(text: str, message: str) -> None:
    with pytest.raises(TraceError, match=r"^w\.yaml: ") as e:
        traces.read_armada(text, "w.yaml")
    assert message in str(e.value)


def test_a_fleet_trace_reads_submit_times_and_durations() -> None:
    tree, _ = convert.load_quota((ROOT / "policies/lab/quota-two-vcs.yaml").read_text("utf-8"))
    clusters = convert.load_clusters((ROOT / "policies/clusters/lab-1.yaml").read_text("utf-8"))
    text = (ROOT / "policies/sim/lab-priority.yaml").read_text("utf-8")
    jobs = traces.read_fleet(text, tree, clusters)
    assert [(j.key, j.submit, j.duration, j.priority_class) for j in jobs] == [
        ("lab-vc1/low", 0.0, 3600.0, "test"),
        ("lab-vc1/high", 60.0, 600.0, "prod"),
    ]
    bad = text.replace("fleet.io/submit-time: 1m", "fleet.io/submit-time: later")
    with pytest.raises(TraceError, match=r"document 3 \(lab-vc1/high\).*submit-time.*later"):
        traces.read_fleet(bad, tree, clusters)
