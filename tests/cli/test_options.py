"""The command line itself: ``--version``, help for every option, the input size limit."""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.cli import inputs
from fleet.cli.main import build_parser, main
from fleet.manifests import documents
from tests.manifests.factories import dump, make_cluster, make_job, make_tree


def write(tmp_path: Path, name: str, text: str) -> str:
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return str(f)


# --version ----------------------------------------------------------------------------


def test_version_prints_the_installed_package_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    out, err = capsys.readouterr()
    assert out == f"fleet {importlib.metadata.version('fleet')}\n" and err == ""


# Help ---------------------------------------------------------------------------------


def parsers(
    parser: argparse.ArgumentParser, name: str = "fleet"
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


def every_action() -> Iterator[tuple[str, argparse.Action]]:
    for name, parser in parsers(build_parser()):
        for action in parser._actions:
            yield name, action
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:  # one per subcommand
                    yield name, choice


def test_the_walk_finds_every_subcommand() -> None:
    names = {name for name, _ in parsers(build_parser())}
    assert names == {
        "fleet",
        "fleet check",
        "fleet check quota",
        "fleet check jobs",
        "fleet check clusters",
        "fleet plan",
        "fleet serve",
        "fleet apply",
        "fleet get",
        "fleet describe",
        "fleet delete",
        "fleet edit",
        "fleet token",
        "fleet token create",
        "fleet simulate",
        "fleet simulate gen-clusters",
    }


def test_every_option_argument_and_subcommand_has_a_help_text() -> None:
    missing = [
        f"{name}: {'/'.join(action.option_strings) or action.metavar or action.dest}"
        for name, action in every_action()
        if not action.help or action.help == argparse.SUPPRESS or not action.help.strip()
    ]
    assert missing == []


def test_plan_help_says_what_running_expects(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--running RUNNING PyTorchJobs (and PropagationPolicies) that are already running" in out
    assert "same format as --jobs" in out
    assert "--max-input-size SIZE" in out and "(default: 8MiB)" in out


# Input size limit ---------------------------------------------------------------------


def test_default_limit_is_a_few_mebibytes() -> None:
    assert inputs.DEFAULT_MAX_INPUT_SIZE == 8 * 1024 * 1024
    assert build_parser().parse_args(["check", "quota", "f"]).max_input_size == (
        inputs.DEFAULT_MAX_INPUT_SIZE
    )


@pytest.mark.parametrize(
    ("text", "size"),
    [("100", 100), ("1KiB", 1024), ("512k", 512 * 1024), ("8MiB", 8 << 20), ("2 GiB", 2 << 30)],
)
def test_sizes_are_bytes_or_binary_units(text: str, size: int) -> None:
    assert inputs.parse_size(text) == size


@pytest.mark.parametrize("text", ["", "MiB", "8 MB", "-1", "1.5MiB", "0"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        inputs.parse_size(text)


def test_a_bad_size_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", "quota", "--max-input-size", "lots", "f.yaml"])
    assert info.value.code == 2
    assert "--max-input-size: 'lots' is not a size" in capsys.readouterr().err


@pytest.fixture
def no_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any YAML is parsed."""

    def refuse(text: str) -> object:
        raise AssertionError("an oversized file was parsed")

    monkeypatch.setattr(documents, "parse_documents", refuse)


@pytest.mark.parametrize("what", ["quota", "jobs", "clusters"])
@pytest.mark.usefixtures("no_parsing")
def test_check_refuses_an_oversized_file_before_parsing(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = write(tmp_path, "big.yaml", "# padding\n" * 300)  # 3,000 bytes
    rc = main(["check", what, "--max-input-size", "2KiB", big])
    out, err = capsys.readouterr()
    assert (rc, out) == (1, "")
    assert err == (
        f"error: {big}: the file has 3,000 bytes (2.9 KiB), above the input size limit of "
        "2,048 bytes (2.0 KiB); refused before parsing (raise the limit with --max-input-size)\n"
    )


@pytest.mark.usefixtures("no_parsing")
def test_the_default_limit_applies_without_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:  # sparse: nothing is written but the size
        f.truncate(inputs.DEFAULT_MAX_INPUT_SIZE + 1)
    assert main(["check", "jobs", str(big)]) == 1
    err = capsys.readouterr().err
    assert f"error: {big}: the file has 8,388,609 bytes (8.0 MiB), above the input size" in err
    assert "limit of 8,388,608 bytes (8.0 MiB)" in err


@pytest.mark.parametrize("which", ["quota", "clusters", "jobs", "running"])
def test_plan_refuses_an_oversized_file_naming_it(
    which: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        "quota": write(tmp_path, "tree.yaml", dump(make_tree())),
        "clusters": write(tmp_path, "clusters.yaml", dump(make_cluster())),
        "jobs": write(tmp_path, "jobs.yaml", dump(make_job())),
        "running": write(tmp_path, "running.yaml", dump(make_job("old"))),
    }
    padded = Path(files[which]).read_text(encoding="utf-8") + "#" * 5000 + "\n"
    files[which] = write(tmp_path, "big.yaml", padded)
    argv = ["plan", "--max-input-size", "4KiB"]
    for option, path in files.items():
        argv += [f"--{option}", path]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {files[which]}: the file has ")
    assert "above the input size limit of 4,096 bytes (4.0 KiB)" in err
    assert main([*argv[:1], *argv[3:]]) == 0  # the same files pass with the default limit


def test_a_stream_of_unknown_size_is_cut_one_byte_past_the_limit() -> None:
    with pytest.raises(inputs.InputError) as info:
        inputs.read_input("/dev/zero", 1024)
    assert str(info.value) == (
        "/dev/zero: the file has more than 1,024 bytes (1.0 KiB), above the input size limit "
        "of 1,024 bytes (1.0 KiB); refused before parsing (raise the limit with "
        "--max-input-size)"
    )


def test_a_file_at_the_limit_is_read(tmp_path: Path) -> None:
    f = write(tmp_path, "f.yaml", "x" * 1024)
    assert inputs.read_input(f, 1024) == "x" * 1024


def test_the_planner_itself_refuses_an_oversized_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleet.cli import plan

    running = write(tmp_path, "running.yaml", dump(make_job("old")) + "#" * 5000 + "\n")
    argv = ["plan", "--max-input-size", "4KiB", "--running", running]
    argv += ["--quota", write(tmp_path, "tree.yaml", dump(make_tree()))]
    argv += ["--clusters", write(tmp_path, "clusters.yaml", dump(make_cluster()))]
    argv += ["--jobs", write(tmp_path, "jobs.yaml", dump(make_job()))]
    assert plan.run(build_parser().parse_args(argv)) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {running}: cannot read the running jobs file: the file has ")


# fleet serve's leader election flags ---------------------------------------------------


def test_a_renewal_not_below_the_lease_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/never.db"
    code = main(["serve", "--database-url", url, "--leader-lease", "2", "--leader-renew", "2"])
    assert code == 1
    err = capsys.readouterr().err
    assert "leader_renew_seconds (2.0) must be below leader_lease_seconds (2.0)" in err
    assert not (tmp_path / "never.db").exists()


def test_the_leader_flags_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiohttp import web

    seen: list[object] = []
    monkeypatch.setattr(web, "run_app", lambda app, **kw: seen.append(app))
    import fleet.api.app as app_module
    import fleet.telemetry

    monkeypatch.setattr(fleet.telemetry, "configure_logging", lambda *a: None)
    from fleet.settings import Settings

    made: list[Settings] = []
    monkeypatch.setattr(app_module, "create_app", lambda settings: made.append(settings))
    argv = ["serve", "--leader-lease", "9", "--leader-renew", "3"]
    assert main([*argv, "--advertise-url", "http://10.0.0.7:8080"]) == 0
    (settings,) = made
    assert (settings.leader_lease_seconds, settings.leader_renew_seconds) == (9.0, 3.0)
    assert settings.advertise_url == "http://10.0.0.7:8080"


def test_the_public_url_flags_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiohttp import web

    monkeypatch.setattr(web, "run_app", lambda app, **kw: None)
    import fleet.api.app as app_module
    import fleet.telemetry

    monkeypatch.setattr(fleet.telemetry, "configure_logging", lambda *a: None)
    from fleet.settings import Settings

    made: list[Settings] = []
    monkeypatch.setattr(app_module, "create_app", lambda settings: made.append(settings))
    argv = ["serve", "--public-url", "https://fleet.example.com", "--trust-forwarded-proto"]
    assert main(argv) == 0
    (settings,) = made
    assert str(settings.public_url) == "https://fleet.example.com/"
    assert settings.trust_forwarded_proto is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--public-url", "https://fleet.example.com/fleet"],
            "must be scheme://host[:port] only",
            id="public-url-with-a-path",
        ),
        pytest.param(
            ["--public-url", "ftp://fleet.example.com"], "public_url", id="public-url-not-http"
        ),
    ],
)
def test_a_public_url_that_is_not_an_origin_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/never.db"
    assert main(["serve", "--database-url", url, *argv]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "never.db").exists()


def test_a_short_replica_secret_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_REPLICA_SECRET", "too-short")
    url = f"sqlite+aiosqlite:///{tmp_path}/never.db"
    assert main(["serve", "--database-url", url]) == 1
    err = capsys.readouterr().err
    assert "at least 32" in err and "too-short" not in err
