"""``fleet apply|get|describe|delete`` against a real ``fleet serve`` on a SQLite file."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.cli.main import main
from fleet.testing import servers
from fleet.testing.documents import pytorchjob

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``fleet serve`` process with the example tree and clusters; its URL."""
    work = tmp_path_factory.mktemp("serve")
    with servers.serving(work) as server:
        yield server.url


def fleet(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``fleet ARGV`` in process; its exit code, stdout and stderr."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def submit(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, **kw: Any
) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(pytorchjob(name, **kw))
    code, out, err = fleet(capsys, "apply", "-f", str(path), "--server", server)
    assert (code, err) == (0, ""), err
    return out


def job_state(server: str, capsys: pytest.CaptureFixture[str], ref: str) -> str:
    code, out, _ = fleet(capsys, "describe", "job", ref, "-o", "json", "--server", server)
    assert code == 0
    state: str = json.loads(out)["state"]
    return state


# apply ------------------------------------------------------------------------------------


def test_apply_creates_then_leaves_unchanged(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(pytorchjob("apply-a", duration="1h"))
    code, out, err = fleet(capsys, "apply", "-f", str(path), "--server", server)
    assert (code, err) == (0, "")
    assert out == "job team-a/apply-a created (queue team-a, Queued)\n"
    code, out, _ = fleet(capsys, "apply", "-f", str(path), "--server", server)
    assert code == 0
    assert out.startswith("job team-a/apply-a unchanged (queue team-a, ")


def test_apply_says_which_jobs_of_a_submission_it_created(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first, second = tmp_path / "first.yaml", tmp_path / "both.yaml"
    first.write_text(pytorchjob("apply-old", duration="1h"))
    second.write_text(first.read_text() + "---\n" + pytorchjob("apply-new", duration="1h"))
    assert fleet(capsys, "apply", "-f", str(first), "--server", server)[0] == 0
    code, out, err = fleet(capsys, "apply", "-f", str(second), "--server", server)
    assert (code, err) == (0, "")
    old, new = out.splitlines()
    assert old.startswith("job team-a/apply-old unchanged (queue team-a, ")
    assert new == "job team-a/apply-new created (queue team-a, Queued)"


def test_apply_reads_stdin(
    server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    stdin = io.TextIOWrapper(io.BytesIO(pytorchjob("apply-stdin", duration="1h").encode()))
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, _ = fleet(capsys, "apply", "-f", "-", "--server", server)
    assert code == 0
    assert out.startswith("job team-a/apply-stdin created")


def test_apply_of_an_invalid_submission_prints_the_field_errors(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(pytorchjob("apply-bad", namespace="nobody-owns-this"))
    code, out, err = fleet(capsys, "apply", "-f", str(path), "--server", server)
    assert code == 1
    assert out == ""
    assert err.startswith("error: ")
    assert "(422)" in err or "(400)" in err
    assert "nobody-owns-this" in err
    assert "Traceback" not in err


def test_apply_of_a_missing_file(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = fleet(capsys, "apply", "-f", str(tmp_path / "nope.yaml"), "--server", server)
    assert (code, out) == (1, "")
    assert "nope.yaml" in err


# get -------------------------------------------------------------------------------------


def test_get_jobs_table(server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    submit(server, capsys, tmp_path, "get-table", duration="1h")
    code, out, err = fleet(capsys, "get", "jobs", "--server", server)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    # The job table's columns are the shared vocabulary's (fleet.service.columns).
    assert lines[0].split() == ["NAME", "QUEUE", "STATE", "GPUS", "CLUSTER", "AGE", "START"]
    row = next(line for line in lines if line.startswith("team-a/get-table "))
    assert row.split()[1] == "team-a"
    assert row.split()[3] == "1"
    assert row.split()[5].endswith(("s", "m"))
    code, out, err = fleet(capsys, "get", "jobs", "-o", "wide", "--server", server)
    assert (code, err) == (0, "")
    row = next(line for line in out.splitlines() if line.startswith("team-a/get-table "))
    assert row.split()[-1] == "PyTorchJob"


def test_get_jobs_filters(server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    submit(server, capsys, tmp_path, "get-filter-b", namespace="team-b", duration="1h")
    code, out, _ = fleet(
        capsys, "get", "jobs", "--queue", "team-b", "-o", "json", "--server", server
    )
    assert code == 0
    items = json.loads(out)["items"]
    assert "get-filter-b" in {j["name"] for j in items}
    assert {j["queue"] for j in items} == {"team-b"}


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_get_jobs_json_and_yaml(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, output: str
) -> None:
    submit(server, capsys, tmp_path, f"get-{output}", duration="1h")
    code, out, _ = fleet(capsys, "get", "jobs", "-o", output, "--server", server)
    assert code == 0
    data = json.loads(out) if output == "json" else yaml.safe_load(out)
    job = next(j for j in data["items"] if j["name"] == f"get-{output}")
    assert job["namespace"] == "team-a"
    assert job["queue"] == "team-a"
    assert {"uid", "state", "priorityClass", "priority", "mode", "cluster", "submittedAt"} <= set(
        job
    )


def test_get_jobs_with_an_unknown_state_is_a_readable_error(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = fleet(capsys, "get", "jobs", "--state", "Sleeping", "--server", server)
    assert (code, out) == (1, "")
    assert "(400)" in err
    assert "unknown state 'Sleeping'" in err
    assert "Traceback" not in err


def test_get_queues(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fleet(capsys, "get", "queues", "--server", server)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["QUEUE", "GPUS", "BORROWED", "RUNNING", "PENDING"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"root", "research", "platform", "team-a", "team-b", "team-c", "sandbox"}
    assert rows["team-a"][1].split("/")[1] == "16"  # used/min/max
    assert rows["sandbox"][1].split("/")[1] == "0"  # no guarantee
    code, out, err = fleet(capsys, "get", "queues", "-o", "wide", "--server", server)
    wide = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert wide["root"][-1] == "-"  # PARENT
    assert wide["team-a"][-1] == "research"


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_get_queues_json_and_yaml(
    server: str, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    code, out, _ = fleet(capsys, "get", "queues", "-o", output, "--server", server)
    assert code == 0
    data = json.loads(out) if output == "json" else yaml.safe_load(out)
    team_a = next(q for q in data["items"] if q["name"] == "team-a")
    assert team_a["parent"] == "research"
    assert team_a["min"]["nvidia.com/gpu"] == "16"


def test_get_clusters(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fleet(capsys, "get", "clusters", "--server", server)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "HEALTH", "GPUS", "USED", "FREE", "LABELS"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"east", "west", "edge"}
    assert rows["east"][1] == "Healthy"
    assert rows["east"][2] == "24"
    assert "region=east" in rows["east"][5]


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_get_clusters_json_and_yaml(
    server: str, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    code, out, _ = fleet(capsys, "get", "clusters", "-o", output, "--server", server)
    assert code == 0
    data = json.loads(out) if output == "json" else yaml.safe_load(out)
    gpus = {c["name"]: c["gpus"]["total"] for c in data["items"]}
    assert gpus == {"east": 24, "west": 16, "edge": 8}


# describe, delete ------------------------------------------------------------------------


def test_describe_job(server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    submit(server, capsys, tmp_path, "describe-a", gpus=2, duration="1h")
    code, out, err = fleet(capsys, "describe", "job", "team-a/describe-a", "--server", server)
    assert (code, err) == (0, "")
    fields = dict(
        line.split(":", 1) for line in out.splitlines() if ":" in line and not line[0].isspace()
    )
    assert fields["Name"].strip() == "describe-a"
    assert fields["Namespace"].strip() == "team-a"
    assert fields["Queue"].strip() == "team-a"
    assert "Placement:" in out
    assert "Events:" in out
    assert "REPLICA" in out
    assert fields["Kind"].strip() == "PyTorchJob"
    assert fields["API version"].strip() == "kubeflow.org/v1"
    assert fields["Gang minimum"].strip() == "1 pod (its pods may start one at a time)"
    assert fields["Requests"].strip().startswith("2 GPUs")
    pod_sets = out.split("Pod sets:\n", 1)[1].splitlines()
    assert pod_sets[0].split() == ["ROLE", "PODS", "MIN", "PLACED", "PER-POD", "IN-ALL"]
    role, pods, minimum, placed, per_pod, _ = re.split(r"\s{3,}", pod_sets[1].strip())
    assert (role, pods, minimum) == ("Worker", "1", "-")
    assert per_pod.startswith("2 GPUs")
    assert placed in ("0", "1")  # placed once the server's loop has admitted it


def test_describe_job_json(server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    submit(server, capsys, tmp_path, "describe-json", duration="1h")
    code, out, _ = fleet(
        capsys, "describe", "job", "team-a/describe-json", "-o", "json", "--server", server
    )
    assert code == 0
    job = json.loads(out)
    assert (job["namespace"], job["name"], job["queue"]) == ("team-a", "describe-json", "team-a")
    assert job["request"]["nvidia.com/gpu"] == "1"


def test_describe_a_missing_job_is_a_readable_error(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = fleet(capsys, "describe", "job", "team-a/not-there", "--server", server)
    assert (code, out) == (1, "")
    assert err.startswith("error: ")
    assert "(404)" in err
    assert "no job team-a/not-there" in err


def test_a_job_reference_needs_a_namespace(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fleet(capsys, "describe", "job", "no-namespace", "--server", server)
    assert (code, out) == (1, "")
    assert "NAMESPACE/NAME" in err


def test_delete_job(server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    submit(server, capsys, tmp_path, "delete-a", duration="1h")
    code, out, err = fleet(capsys, "delete", "job", "team-a/delete-a", "--server", server)
    assert (code, err) == (0, "")
    assert out == "job team-a/delete-a cancelled\n"
    for _ in range(100):
        if job_state(server, capsys, "team-a/delete-a") == "Cancelled":
            break
        time.sleep(0.1)
    assert job_state(server, capsys, "team-a/delete-a") == "Cancelled"
    code, out, err = fleet(capsys, "delete", "job", "team-a/delete-a", "--server", server)
    assert (code, out) == (1, "")
    assert "(409)" in err
    assert "has ended (Cancelled)" in err


def test_delete_a_missing_job(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = fleet(capsys, "delete", "job", "team-a/not-there", "--server", server)
    assert (code, out) == (1, "")
    assert "(404)" in err


# Stored policies -------------------------------------------------------------------------


def test_a_policy_alone_is_applied_listed_used_and_deleted(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    standing = {
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": "cli-standing", "namespace": "team-c"},
        "spec": {
            "priority": 2,
            "resourceSelectors": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}],
        },
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(standing))
    code, out, err = fleet(capsys, "apply", "-f", str(path), "--server", server)
    assert (code, err) == (0, "")
    assert out == "propagationpolicy team-c/cli-standing stored\n"

    code, out, err = fleet(capsys, "get", "policies", "--namespace", "team-c", "--server", server)
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "PRIORITY", "SELECTS", "AGE"]
    assert row.split()[:4] == ["team-c", "cli-standing", "2", "PyTorchJob"]

    # A job of team-c without a policy of its own is governed by it.
    _, job = yaml.safe_load_all(pytorchjob("cli-governed", namespace="team-c", duration="1h"))
    path.write_text(yaml.safe_dump(job))
    code, out, err = fleet(capsys, "apply", "-f", str(path), "--server", server)
    assert (code, err) == (0, ""), err
    code, out, err = fleet(capsys, "describe", "job", "team-c/cli-governed", "--server", server)
    assert (code, err) == (0, "")
    assert "Policy:         cli-standing (stored)\n" in out

    code, out, err = fleet(capsys, "delete", "policy", "team-c/cli-standing", "--server", server)
    assert (code, err, out) == (0, "", "propagationpolicy team-c/cli-standing deleted\n")
    code, out, err = fleet(capsys, "delete", "policy", "team-c/cli-standing", "--server", server)
    assert (code, out) == (1, "")
    assert "(404)" in err
    code, out, _ = fleet(capsys, "get", "policies", "--namespace", "team-c", "--server", server)
    assert out.splitlines()[1:] == []


def test_describe_says_the_policy_came_with_the_submission(
    server: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    submit(server, capsys, tmp_path, "describe-policy", duration="1h")
    code, out, _ = fleet(capsys, "describe", "job", "team-a/describe-policy", "--server", server)
    assert code == 0
    assert "Policy:         describe-policy (in the submission)\n" in out


# An unreachable server -------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["get", "jobs"],
        ["get", "queues"],
        ["get", "clusters"],
        ["describe", "job", "team-a/x"],
        ["delete", "job", "team-a/x"],
        ["get", "policies"],
        ["delete", "policy", "team-a/x"],
    ],
)
def test_an_unreachable_server(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    url = f"http://127.0.0.1:{servers.free_port()}"
    code, out, err = fleet(capsys, *argv, "--server", url)
    assert (code, out) == (1, "")
    assert err.startswith(f"error: cannot reach the Fleet server at {url}: ")
    assert err.count("\n") == 1


def test_the_server_comes_from_the_environment(
    server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_SERVER", server + "/")
    code, out, _ = fleet(capsys, "get", "clusters")
    assert code == 0
    assert "east" in out
