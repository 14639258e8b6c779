"""Seed lab 6's five HiveD experiments, end to end through Fleet's own objects.

Each scenario loads an ElasticQuotaTree, the lab's MemberCluster
(``policies/clusters/lab-1.yaml``: two 1-GPU machines, VC ``default`` owns
carol's, VC ``vc1`` owns dan's; ``lab-2.yaml``: both machines in VC
``default``) and PyTorchJobs as a user writes them, then runs the scheduling
cycle with the cell allocator as the placer.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from fleet.core.cycle import Admit, Decision, Preempt, Wait, cycle
from fleet.core.jobs import Mode
from fleet.core.state import SchedulerState
from fleet.manifests import convert
from fleet.manifests.placers import placers as build_placers
from tests.core.factories import confirm_stops, finish, submit

POLICIES = Path(__file__).resolve().parents[2] / "policies"
CAROL, DAN = "hostname-carol", "hostname-dan"


def leaf(name: str, lo: int, hi: int, namespaces: str = "") -> str:
    gpu = "nvidia.com/gpu"
    return f"    - {{name: {name}, min: {{{gpu}: {lo}}}, max: {{{gpu}: {hi}}}{namespaces}}}"


def tree_yaml(vc1_max: int = 1, one_vc: bool = False) -> str:
    if one_vc:
        leaves = leaf("default", 2, 2, ", namespaces: [lab]")
    else:
        vc1 = leaf("vc1", 1, vc1_max, ", namespaces: [lab-vc1]")
        leaves = leaf("default", 1, 2, ", namespaces: [lab]") + "\n" + vc1
    return f"""\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {{name: lab}}
spec:
  root:
    name: root
    min: {{nvidia.com/gpu: 2}}
    max: {{nvidia.com/gpu: 2}}
    children:
{leaves}
"""


def job_yaml(name: str, queue: str, priority: str = "test", workers: int = 1) -> str:
    return f"""\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: {name}, namespace: {"lab-vc1" if queue == "vc1" else "lab"}}}
spec:
  runPolicy:
    schedulingPolicy: {{queue: {queue}, priorityClass: {priority}}}
  pytorchReplicaSpecs:
    Worker:
      replicas: {workers}
      template:
        spec:
          containers:
          - name: pytorch
            image: example/mnist:1
            resources:
              limits: {{nvidia.com/gpu: 1, cpu: "1", memory: 2Gi}}
"""


INCREMENTAL_POLICY = """\
apiVersion: policy.one.alibabacloud.com/v1alpha1
kind: PropagationPolicy
metadata: {name: incremental, namespace: lab}
spec:
  resourceSelectors:
  - {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: grow}
  placement:
    replicaScheduling: {replicaSchedulingType: Divided}
"""


class Lab:
    """A scheduler over a lab cluster, fed YAML as a user would write it."""

    def __init__(self, cluster_file: str, tree: str) -> None:
        self.tree, _ = convert.load_quota(tree)
        self.clusters = convert.load_clusters((POLICIES / "clusters" / cluster_file).read_text())
        self.state = SchedulerState(self.tree, build_placers(self.clusters, "cells"))
        self.seq = 0
        self.now = 0.0

    def submit(self, *documents: str) -> None:
        jobs = convert.load_submission(
            "---\n".join(documents), self.tree, self.clusters, first_seq=self.seq
        )
        self.seq += len(jobs)
        for job in jobs:
            submit(self.state, job)

    def cycle(self) -> list[Decision]:
        self.now += 1.0
        decisions = cycle(self.state, self.now)
        self.state.check_invariants()
        confirm_stops(self.state, decisions)
        return decisions

    def nodes_of(self, key: str) -> list[str]:
        return [p.node for p in self.state.running[key].pods]


def started(decisions: list[Decision]) -> list[str]:
    return [d.job for d in decisions if isinstance(d, Admit)]


def test_vc_safety_vc1_never_runs_guaranteed_work_on_defaults_node() -> None:
    lab = Lab("lab-1.yaml", tree_yaml(vc1_max=2))
    lab.submit(*(job_yaml(f"vc1-{i}", "vc1") for i in range(3)))
    decisions = lab.cycle()
    assert started(decisions) == ["lab-vc1/vc1-0", "lab-vc1/vc1-1"]
    first, second = lab.state.running["lab-vc1/vc1-0"], lab.state.running["lab-vc1/vc1-1"]
    assert (first.mode, lab.nodes_of("lab-vc1/vc1-0")) == (Mode.GUARANTEED, [DAN])
    # The idle default VC's machine is only borrowed, never vc1's guaranteed work.
    assert (second.mode, lab.nodes_of("lab-vc1/vc1-1")) == (Mode.BORROWED, [CAROL])
    assert "vc1" in {d.queue for d in decisions if isinstance(d, Wait)}
    # default wants its machine back: the borrowed job goes, default's job starts there.
    lab.submit(job_yaml("default-0", "default"))
    decisions = lab.cycle()
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["lab-vc1/vc1-1"]
    assert lab.nodes_of("lab/default-0") == [CAROL]
    assert lab.state.running["lab/default-0"].mode is Mode.GUARANTEED


def test_vc_safety_with_a_hard_share_vc1_jobs_queue_instead() -> None:
    lab = Lab("lab-1.yaml", tree_yaml(vc1_max=1))
    lab.submit(*(job_yaml(f"vc1-{i}", "vc1") for i in range(3)))
    decisions = lab.cycle()
    assert started(decisions) == ["lab-vc1/vc1-0"]
    assert lab.nodes_of("lab-vc1/vc1-0") == [DAN]
    reasons = {d.job: d.reason for d in decisions if isinstance(d, Wait)}
    assert "queue vc1 is full" in reasons["lab-vc1/vc1-1"]


def test_priority_prod_preempts_test_in_the_same_vc_and_the_victim_resumes() -> None:
    lab = Lab("lab-1.yaml", tree_yaml(vc1_max=1))
    lab.submit(job_yaml("low", "vc1", "test"))
    lab.cycle()
    lab.submit(job_yaml("high", "vc1", "prod"))
    decisions = lab.cycle()
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["lab-vc1/low"]
    assert started(decisions) == ["lab-vc1/high"] and lab.nodes_of("lab-vc1/high") == [DAN]
    assert "lab-vc1/low" in {d.job for d in lab.cycle() if isinstance(d, Wait)}
    finish(lab.state, "lab-vc1/high")
    assert started(lab.cycle()) == ["lab-vc1/low"]
    assert lab.nodes_of("lab-vc1/low") == [DAN]


def test_opportunistic_job_uses_idle_default_cells_and_yields_to_default() -> None:
    lab = Lab("lab-1.yaml", tree_yaml(vc1_max=1))
    lab.submit(job_yaml("prod", "vc1", "prod"))
    lab.cycle()
    lab.submit(job_yaml("oppo", "vc1", "oppo"))
    decisions = lab.cycle()
    assert started(decisions) == ["lab-vc1/oppo"]
    assert lab.state.running["lab-vc1/oppo"].mode is Mode.OPPORTUNISTIC
    assert lab.nodes_of("lab-vc1/oppo") == [CAROL]  # it did not wait for the prod job
    lab.submit(job_yaml("default-test", "default", "test"))
    decisions = lab.cycle()
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["lab-vc1/oppo"]
    assert lab.nodes_of("lab/default-test") == [CAROL]


def test_gang_never_starts_one_replica_early() -> None:
    lab = Lab("lab-2.yaml", tree_yaml(one_vc=True))
    lab.submit(job_yaml("one-node", "default"))
    lab.cycle()
    lab.submit(job_yaml("two-nodes", "default", workers=2))
    for _ in range(3):
        assert "lab/two-nodes" not in started(lab.cycle())
        assert not lab.state.placers["lab-2"].holds("lab/two-nodes")
    finish(lab.state, "lab/one-node")
    (admit,) = [d for d in lab.cycle() if isinstance(d, Admit)]
    assert admit.job == "lab/two-nodes"
    assert sorted(p.node for p in admit.pods) == [CAROL, DAN]


def test_incremental_job_starts_one_replica_now_and_the_other_later() -> None:
    lab = Lab("lab-2.yaml", tree_yaml(one_vc=True))
    lab.submit(job_yaml("one-node", "default"))
    lab.cycle()
    lab.submit(INCREMENTAL_POLICY, job_yaml("grow", "default", workers=2))
    first = [d for d in lab.cycle() if isinstance(d, Admit)]
    assert [(d.job, len(d.pods), d.grown) for d in first] == [("lab/grow", 1, False)]
    finish(lab.state, "lab/one-node")
    later = [d for d in lab.cycle() if isinstance(d, Admit)]
    assert [(d.job, len(d.pods), d.grown) for d in later] == [("lab/grow", 1, True)]
    assert sorted(lab.nodes_of("lab/grow")) == [CAROL, DAN]


def test_the_shipped_lab_trees_are_these() -> None:
    shipped = {
        "quota-two-vcs.yaml": tree_yaml(vc1_max=1),
        "quota-two-vcs-borrowing.yaml": tree_yaml(vc1_max=2),
        "quota-one-vc.yaml": tree_yaml(one_vc=True),
    }
    for name, text in shipped.items():
        on_disk = (POLICIES / "lab" / name).read_text(encoding="utf-8")
        assert yaml.safe_load(on_disk) == yaml.safe_load(text), name


def test_incremental_four_gpu_job_runs_partially_on_a_two_gpu_cluster() -> None:
    lab = Lab("lab-2.yaml", tree_yaml(one_vc=True))
    lab.submit(INCREMENTAL_POLICY, job_yaml("grow", "default", workers=4))
    (admit,) = [d for d in lab.cycle() if isinstance(d, Admit)]
    assert len(admit.pods) == 2
    assert not lab.state.running["lab/grow"].complete
    assert lab.tree.used("default")["nvidia.com/gpu"] == 2
