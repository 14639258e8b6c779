"""The README's quickstart, run as written: the last job waits, says why and when it starts."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fleet.cli.main import main
from fleet.testing import servers
from tests.paths import ROOT

pytestmark = pytest.mark.slow

QUICKSTART = ROOT / "policies" / "jobs" / "quickstart.yaml"
LAST = "team-a/train-5"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``fleet serve`` on its defaults (the example tree and clusters), estimates every second."""
    work = tmp_path_factory.mktemp("serve")
    with servers.serving(work, extra=["--estimate-interval", "1"]) as server:
        yield server.url


def test_the_readme_runs_the_quickstart_and_describes_the_last_job() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert "fleet apply -f policies/jobs/quickstart.yaml" in section
    assert f"fleet describe job {LAST}" in section


def describe(server: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["describe", "job", LAST, "-o", "json", "--server", server]) == 0
    job: dict[str, Any] = json.loads(capsys.readouterr().out)
    return job


def test_the_last_quickstart_job_waits_with_a_reason_and_a_start_in_the_future(
    server: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["apply", "-f", str(QUICKSTART), "--server", server]) == 0
    applied = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in applied] == [f"team-a/train-{i}" for i in range(1, 6)]
    deadline = time.monotonic() + 30
    job = describe(server, capsys)
    while time.monotonic() < deadline:
        job = describe(server, capsys)
        if (job.get("estimatedStart") or {}).get("time") and job.get("reason"):
            break
        time.sleep(0.5)
    assert job["state"] == "Queued", job
    assert job["reason"] == "queue team-a is full: 32 of 32 GPUs used; this job needs 8"
    when = datetime.datetime.fromisoformat(job["estimatedStart"]["time"].replace("Z", "+00:00"))
    assert when > datetime.datetime.now(datetime.UTC)
    # The four others hold the queue's 32 GPUs.
    capsys.readouterr()
    assert main(["get", "jobs", "-o", "json", "--server", server]) == 0
    states = {
        f"{j['namespace']}/{j['name']}": j["state"]
        for j in json.loads(capsys.readouterr().out)["items"]
    }
    assert sorted(k for k, s in states.items() if s != "Queued") == [
        f"team-a/train-{i}" for i in range(1, 5)
    ]
    # And describe's table says both in words.
    assert main(["describe", "job", LAST, "--server", server]) == 0
    text = capsys.readouterr().out
    assert "Waiting reason: queue team-a is full: 32 of 32 GPUs used; this job needs 8" in text
    assert "Estimated start: in " in text
