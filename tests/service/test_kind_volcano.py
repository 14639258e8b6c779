"""The Volcano document's jobs on simulated members: whole gangs, and a gang that waits whole.

Both jobs of ``policies/jobs/volcano.yaml`` (a PropagationPolicy selecting
``batch.volcano.sh/v1alpha1`` ``Job`` and the two CPU-only jobs, as written)
run with every pod on the shipped member clusters.  The MPI job (four pods,
``minAvailable: 4``) on a member with room for three of them starts none, and
starts all four when room appears.

The member of the second test is one node of four cells whose SKU has one CPU
each: whether the cell allocator counts a CPU-only pod as one cell or as its
CPU request, three of the MPI job's pods fit beside the blocker and four do not.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from fleet.clock import VirtualClock
from fleet.service.settings import POLICIES
from fleet.service.wiring import Service
from fleet.store import jobs as job_rows
from fleet.testing.running import new_jobs, running_service, settings, settle

SEED = POLICIES / "jobs" / "volcano.yaml"
STATES = ["Queued", "Admitted", "Dispatched", "Running", "Succeeded", "Failed"]

SOLO = """\
apiVersion: fleet.io/v1alpha1
kind: MemberCluster
metadata: {name: solo}
spec:
  simulated: true
  cells:
    physicalCluster:
      skuTypes:
        CPU1: {gpu: 1, cpu: 1, memory: 8Gi}
      cellTypes:
        SOLO-NODE: {childCellType: CPU1, childCellNumber: 4, isNodeLevel: true}
      physicalCells:
        - {cellType: SOLO-NODE, cellAddress: solo-node-0}
    virtualClusters:
      team-a:
        virtualCells:
          - {cellType: SOLO-NODE, cellNumber: 1}
"""

BLOCKER = """\
apiVersion: policy.one.alibabacloud.com/v1alpha1
kind: PropagationPolicy
metadata: {name: blocker, namespace: default}
spec:
  resourceSelectors:
    - {apiVersion: batch.volcano.sh/v1alpha1, kind: Job, name: blocker}
---
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: blocker
  namespace: default
  annotations: {fleet.io/simulated-duration: 10m}
spec:
  tasks:
    - name: hold
      replicas: 1
      template:
        spec:
          containers:
            - name: hold
              image: busybox
              resources: {requests: {cpu: "1"}, limits: {cpu: "1"}}
"""


async def submit(svc: Service, text: str) -> None:
    await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))


async def states(svc: Service) -> dict[str, str]:
    async with svc.db.read() as session:
        rows = await job_rows.in_states(session, STATES)
    return {f"{r.namespace}/{r.name}": r.state for r in rows}


def placed(svc: Service, key: str) -> list[str]:
    run = svc.loop.state.running.get(key)
    return [] if run is None else sorted(p.pod for u in run.units for p in u.pods)


async def test_the_documents_two_jobs_run_as_whole_gangs(database_url: str) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        await submit(svc, SEED.read_text(encoding="utf-8"))
        await settle(svc.loop, clock, 1)
        assert await states(svc) == {
            "default/tensorflow-benchmark": "Running",
            "default/lm-mpi-job": "Running",
        }
        assert placed(svc, "default/tensorflow-benchmark") == ["ps-0", "worker-0", "worker-1"]
        assert placed(svc, "default/lm-mpi-job") == [
            "mpimaster-0",
            "mpiworker-0",
            "mpiworker-1",
            "mpiworker-2",
        ]
        await settle(svc.loop, clock, 61)  # the simulated members' default run: 60 s
        assert set((await states(svc)).values()) == {"Succeeded"}


async def test_the_mpi_job_waits_whole_until_all_four_pods_fit(
    database_url: str, tmp_path: Path
) -> None:
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(SOLO)
    mpi = [d for d in yaml.safe_load_all(SEED.read_text()) if d]
    policy, job = mpi[0], next(d for d in mpi if d["metadata"].get("name") == "lm-mpi-job")
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url, clusters=clusters), clock) as svc:
        await submit(svc, BLOCKER)
        await settle(svc.loop, clock, 1)
        assert placed(svc, "default/blocker") == ["hold-0"]

        await submit(svc, yaml.safe_dump_all([policy, job]))
        for _ in range(5):  # room for three of its four pods: none starts
            await settle(svc.loop, clock, 60)
            assert (await states(svc))["default/lm-mpi-job"] == "Queued"
            assert placed(svc, "default/lm-mpi-job") == []

        await settle(svc.loop, clock, 300)  # the blocker ends: all four start together
        found = await states(svc)
        assert found["default/blocker"] == "Succeeded"
        assert found["default/lm-mpi-job"] == "Running"
        assert len(placed(svc, "default/lm-mpi-job")) == 4
