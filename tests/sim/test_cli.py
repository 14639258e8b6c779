"""``fleet simulate`` as a user runs it: files, determinism, the Philly smoke replay, errors."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.cli.main import main
from fleet.testing import servers
from fleet.testing.documents import pytorchjob

ROOT = Path(__file__).resolve().parents[2]
PHILLY = ROOT / "data" / "traces" / "philly-vc" / "philly_vc_jobs.csv"
OPENB = ROOT / "data" / "traces" / "alibaba-openb-2023" / "openb_pod_list_default.csv"
POLICIES = ROOT / "policies"
#: Fields of summary.json that measure the run itself (wall clock), not the replay.
WALL_FIELDS = ("wall_s", "jobs_per_s")


@pytest.fixture(scope="module")
def philly_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("layout")
    assert (
        main(
            [
                "simulate",
                "gen-clusters",
                "--trace",
                str(PHILLY),
                "--format",
                "philly",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert (out / "clusters.yaml").is_file() and (out / "quota.yaml").is_file()
    return out


def simulate(layout: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "simulate",
            "--clusters",
            str(layout / "clusters.yaml"),
            "--quota",
            str(layout / "quota.yaml"),
            "--trace",
            str(PHILLY),
            "-o",
            str(out),
            *extra,
        ]
    )


def without_wall(path: Path) -> dict[str, object]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    for key in WALL_FIELDS:
        doc.pop(key)
    return doc


def test_the_same_replay_twice_writes_the_same_bytes(philly_layout: Path, tmp_path: Path) -> None:
    for run in ("a", "b"):
        assert (
            simulate(philly_layout, tmp_path / run, "--limit", "300", "--sample-every", "10m") == 0
        )
    for name in ("jobs.csv", "queues.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert without_wall(tmp_path / "a" / "summary.json") == without_wall(
        tmp_path / "b" / "summary.json"
    )
    text_a = (tmp_path / "a" / "summary.json").read_text("utf-8")
    text_b = (tmp_path / "b" / "summary.json").read_text("utf-8")
    differing = [
        (x, y) for x, y in zip(text_a.splitlines(), text_b.splitlines(), strict=True) if x != y
    ]
    assert all(any(f'"{k}"' in x for k in WALL_FIELDS) for x, _ in differing)


def test_the_first_2000_philly_jobs_replay_to_the_end(philly_layout: Path, tmp_path: Path) -> None:
    assert simulate(philly_layout, tmp_path, "--limit", "2000") == 0
    summary = json.loads((tmp_path / "summary.json").read_text("utf-8"))
    assert summary["policy"] == "fleet"
    assert summary["jobs"] == summary["finished"] == 2000
    delay = summary["queueing_delay_s"]
    assert set(delay) == {"mean", "p50", "p95", "p99"}
    assert 0 <= delay["p50"] <= delay["p95"] <= delay["p99"]
    assert sum(q["jobs"] for q in summary["queues"].values()) == 2000
    assert 0 < summary["gpu_utilisation"] < 1
    assert summary["wall_s"] > 0
    rows = (tmp_path / "jobs.csv").read_text("utf-8").splitlines()
    assert len(rows) == 2001
    assert rows[0].startswith("job,queue,gpus,submit_s,admit_s,start_s,end_s,queueing_delay_s")
    for row in rows[1:]:
        fields = row.split(",")
        submit, start, end, delay_s = (float(fields[i]) for i in (3, 5, 6, 7))
        assert start - submit == pytest.approx(delay_s) and end >= start >= submit


def test_compare_writes_each_policy_a_table_and_plots(
    philly_layout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = simulate(
        philly_layout, tmp_path, "--limit", "150", "--compare", "fleet,capacity,private"
    )
    assert code == 0
    table = capsys.readouterr().out
    for policy in ("fleet", "capacity", "private"):
        summary = json.loads((tmp_path / policy / "summary.json").read_text("utf-8"))
        assert summary["policy"] == policy and summary["jobs"] == 150
        assert any(line.startswith(policy + " ") for line in table.splitlines())
    assert (tmp_path / "compare.txt").read_text("utf-8") == table
    for png in ("delay-cdf.png", "utilisation.png", "vc-p95.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_an_output_directory_the_summary_goes_to_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        [
            "simulate",
            "--format",
            "fleet",
            "--trace",
            str(POLICIES / "sim" / "lab-gang.yaml"),
            "--clusters",
            str(POLICIES / "clusters" / "lab-2.yaml"),
            "--quota",
            str(POLICIES / "lab" / "quota-one-vc.yaml"),
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["queueing_delay_s"] == {"mean": 300.0, "p50": 0.0, "p95": 600.0, "p99": 600.0}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--compare", "fleet,fair"],
            "error: unknown policy 'fair'; known: fleet, capacity, private",
        ),
        (["--compare", "fleet,fleet"], "error: policy 'fleet' is given twice"),
        (["--until", "soon"], "'soon' is not a positive time span"),
        (["--limit", "0"], "'0' is not a positive whole number"),
        (["--load", "fast"], "'fast' is not a positive load (examples: 0.8, or 0.6,0.8,1.0)"),
        (["--load", "0"], "'0' is not a positive load"),
        (["--load", "-0.5"], "'-0.5' is not a positive load"),
        (["--load", "nan"], "'nan' is not a positive load"),
        (["--load", "inf"], "'inf' is not a positive load"),
        (["--load", "0.6,,1"], "'' is not a positive load"),
        (["--load", "0.8,0.80"], "load 0.8 is given twice"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    philly_layout: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    try:
        code = simulate(philly_layout, tmp_path / "out", *extra)
    except SystemExit as e:  # argparse refuses bad option values itself
        code = int(str(e.code))
    assert code != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_trace_queue_missing_from_the_tree_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "simulate",
            "--trace",
            str(PHILLY),
            "--clusters",
            str(POLICIES / "clusters" / "lab-2.yaml"),
            "--quota",
            str(POLICIES / "lab" / "quota-one-vc.yaml"),
            "--limit",
            "5",
            "-o",
            str(tmp_path / "out"),
        ]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "error: job vc-" in err and "is not a leaf of the quota tree (leaves: default)" in err
    assert not (tmp_path / "out").exists()


def test_a_missing_trace_file_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "simulate",
            "--trace",
            "no-such-trace.csv",
            "--clusters",
            str(POLICIES / "clusters" / "lab-2.yaml"),
            "--quota",
            str(POLICIES / "lab" / "quota-one-vc.yaml"),
        ]
    )
    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "no-such-trace.csv" in err[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``fleet serve`` process with the example tree and clusters; its URL."""
    work = tmp_path_factory.mktemp("serve")
    with servers.serving(work) as server:
        yield server.url


@pytest.mark.slow
def test_from_live_reports_what_a_proposed_tree_would_do(
    server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # team-a may use 32 GPUs: two 16-GPU jobs run, an 8-GPU one waits for an hour.
    for name, workers in (("first", 2), ("second", 2), ("third", 1)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(pytorchjob(name, workers=workers, gpus=8, duration="1h"))
        assert main(["apply", "-f", str(path), "--server", server]) == 0
    capsys.readouterr()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        code = main(["describe", "job", "team-a/second", "-o", "json", "--server", server])
        if code == 0 and json.loads(capsys.readouterr().out)["state"] == "Running":
            break
        time.sleep(0.2)
    tree = (POLICIES / "quota" / "team-tree.yaml").read_text(encoding="utf-8")
    proposed = tmp_path / "proposed.yaml"
    proposed.write_text(
        tree.replace(
            "max: {nvidia.com/gpu: 32, cpu: 512, memory: 4Ti}",
            "max: {nvidia.com/gpu: 48, cpu: 768, memory: 6Ti}",
        )
    )
    capsys.readouterr()
    out_dir = tmp_path / "what-if"
    code = main(["simulate", "--from-live", server, "--quota", str(proposed), "-o", str(out_dir)])
    out, err = capsys.readouterr()
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("team-a/third"))
    assert row.split()[-1] == "sooner"
    result = json.loads((out_dir / "what-if.json").read_text("utf-8"))
    assert [j["job"] for j in result["jobs"]] == ["team-a/third"]
    assert "Expected wait per queue" in out
    missing = tmp_path / "missing.yaml"
    missing.write_text(tree.replace("name: team-a", "name: team-z"))
    assert main(["simulate", "--from-live", server, "--quota", str(missing)]) == 1
    assert "no leaf for the queue of job(s) team-a/first (team-a)" in capsys.readouterr().err


def test_load_scales_the_submissions_and_a_higher_load_waits_longer(
    philly_layout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = simulate(
        philly_layout,
        tmp_path,
        "--limit",
        "300",
        "--load",
        "0.5,4",
        "--compare",
        "fleet,fleet-no-memory",
        "--sample-every",
        "30m",
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("load ")]
    assert [line.split(":")[0] for line in lines] == ["load 0.5", "load 4"]
    assert all(" -> " in line and "submissions over" in line for line in lines)
    before = {line.split("offered load ")[1].split(" ->")[0] for line in lines}
    assert len(before) == 1  # the same trace before scaling
    assert lines[0].split("-> ")[1].startswith("0.500") and lines[1].split("-> ")[1].startswith(
        "4.000"
    )
    low, high = (
        json.loads((tmp_path / f"load-{f}" / "fleet" / "summary.json").read_text("utf-8"))
        for f in ("0.5", "4")
    )
    assert low["offered_load"] == pytest.approx(0.5, abs=1e-3)
    assert high["offered_load"] == pytest.approx(4.0, abs=1e-3)
    assert low["jobs"] == high["jobs"] == 300 and high["finished"] == 300
    assert high["queueing_delay_s"]["mean"] > low["queueing_delay_s"]["mean"]
    for f in ("0.5", "4"):
        assert (tmp_path / f"load-{f}" / "fleet-no-memory" / "jobs.csv").is_file()
        assert (tmp_path / f"load-{f}" / "compare.txt").read_text("utf-8") in out
        assert (tmp_path / f"load-{f}" / "vc-mean.png").is_file()
    assert "By load" in out and (tmp_path / "compare.txt").read_text("utf-8") == out
    rows = [line.split() for line in out.split("By load")[1].splitlines()[2:]]
    assert [r[:2] for r in rows] == [
        ["0.5", "fleet"],
        ["0.5", "fleet-no-memory"],
        ["4", "fleet"],
        ["4", "fleet-no-memory"],
    ]
    assert (tmp_path / "load.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_trace_submitted_at_one_moment_has_no_load_to_scale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "simulate",
            "--format",
            "fleet",
            "--trace",
            str(POLICIES / "sim" / "lab-gang.yaml"),
            "--clusters",
            str(POLICIES / "clusters" / "lab-2.yaml"),
            "--quota",
            str(POLICIES / "lab" / "quota-one-vc.yaml"),
            "--load",
            "0.8",
            "-o",
            str(tmp_path / "out"),
        ]
    )
    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "all submitted at one moment" in err[0]
    assert not (tmp_path / "out").exists()


def test_the_alibaba_openb_pods_replay_under_a_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    layout = tmp_path / "layout"
    args = ["simulate", "gen-clusters", "--trace", str(OPENB), "--format", "openb"]
    assert main([*args, "-o", str(layout)]) == 0
    capsys.readouterr()
    code = main(
        [
            "simulate",
            "--format",
            "openb",
            "--trace",
            str(OPENB),
            "--clusters",
            str(layout / "clusters.yaml"),
            "--quota",
            str(layout / "quota.yaml"),
            "--limit",
            "300",
            "--load",
            "1.1",
            "-o",
            str(tmp_path / "out"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "load 1.1: offered load " in err and "-> 1.100" in err
    summary = without_wall(tmp_path / "out" / "summary.json")
    printed = json.loads(out)  # one load, one policy: the summary
    assert {k: v for k, v in printed.items() if k not in WALL_FIELDS} == summary
    assert summary["offered_load"] == pytest.approx(1.1, abs=1e-3)
    assert summary["jobs"] == summary["finished"] == 300
    assert set(summary["past_deadline"]) == {"jobs", "DeadlineExceeded", "MaxRuntimeExceeded"}
    assert summary["fairness"]["windows"] >= 0
