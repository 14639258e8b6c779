"""Where the test suite's data lives: inside the repository, under ``tests/data``.

Every file a test reads is part of the checkout, so a plain clone runs the
whole suite; ``SOURCE.md`` beside each set names its upstream and licence.
The workload kinds' upstream examples sit beside their tests, in
``tests/kinds/examples``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
#: HiveD's configs and algorithm test cases (microsoft/hivedscheduler, MIT).
HIVED = DATA / "hived"
#: Kubeflow's PyTorchJob examples (kubeflow/training-operator, Apache-2.0).
KUBEFLOW = DATA / "kubeflow"
#: Upstream examples of the workload kinds beyond PyTorchJob (Volcano, Kubeflow, JobSet, Trainer).
KIND_EXAMPLES = ROOT / "tests" / "kinds" / "examples"
#: Objects the hub tests apply with kubectl (the ACK One walkthrough's policy and job).
HUB = DATA / "hub"
