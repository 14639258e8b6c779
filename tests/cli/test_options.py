"""The command line itself: ``--version``, help for every option, the input size limit."""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fleet.cli import inputs
from fleet.cli.main import build_parser, main
from fleet.manifests import documents
from fleet.service.settings import POLICIES
from fleet.testing.servers import free_port
from tests.clusters.kubeconfigs import config, exec_user
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
        "fleet token list",
        "fleet token revoke",
        "fleet config",
        "fleet config view",
        "fleet config get-contexts",
        "fleet config current-context",
        "fleet config use-context",
        "fleet config set-context",
        "fleet simulate",
        "fleet simulate gen-clusters",
        "fleet version",
        "fleet completion",
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
    assert "--running RUNNING jobs (and PropagationPolicies) that are already running" in out
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


@pytest.mark.parametrize(
    "text", ["", "MiB", "8 MB", "-1", "1.5MiB", "0", "١٢", "²KiB", "9" * 5000, "1_000"]
)
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
    monkeypatch.setattr("fleet.cli.serve.port_problem", lambda host, port: None)
    import fleet.api.app as app_module
    import fleet.service.telemetry

    monkeypatch.setattr(fleet.service.telemetry, "configure_logging", lambda *a: None)
    from fleet.service.settings import Settings

    made: list[Settings] = []
    monkeypatch.setattr(app_module, "create_app", lambda settings: made.append(settings))
    argv = ["serve", "--leader-lease", "9", "--leader-renew", "3"]
    assert main([*argv, "--advertise-url", "http://10.0.0.7:8080"]) == 0
    (settings,) = made
    assert (settings.leader_lease_seconds, settings.leader_renew_seconds) == (9.0, 3.0)
    assert settings.advertise_url == "http://10.0.0.7:8080"


# fleet serve: kubeconfigs and secrets ----------------------------------------------------


def serve_without_starting(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Patch ``fleet serve`` to stop short of running the app; the settings it made."""
    from aiohttp import web

    import fleet.api.app as app_module
    import fleet.service.telemetry

    monkeypatch.setattr(web, "run_app", lambda app, **kw: None)
    monkeypatch.setattr("fleet.cli.serve.port_problem", lambda host, port: None)
    monkeypatch.setattr(
        fleet.service.telemetry, "configure_logging", lambda *a: None
    )  # keep caplog
    made: list[object] = []
    monkeypatch.setattr(app_module, "create_app", lambda settings: made.append(settings))
    return made


def test_the_kubeconfig_flags_reach_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fleet.service.settings import DEFAULT_KUBECONFIG_DIR, Settings

    made = serve_without_starting(monkeypatch)
    assert main(["serve"]) == 0
    assert main(["serve", "--kubeconfig-dir", str(tmp_path), "--allow-kubeconfig-exec"]) == 0
    monkeypatch.setenv("FLEET_KUBECONFIG_DIR", "/srv/kubeconfigs")
    assert main(["serve"]) == 0
    default, given, from_env = made
    assert isinstance(default, Settings) and isinstance(given, Settings)
    assert default.kubeconfig_dir == DEFAULT_KUBECONFIG_DIR
    assert default.allow_kubeconfig_exec is False
    assert (given.kubeconfig_dir, given.allow_kubeconfig_exec) == (tmp_path, True)
    assert isinstance(from_env, Settings) and from_env.kubeconfig_dir == Path("/srv/kubeconfigs")


def test_the_start_up_log_and_the_settings_never_show_the_database_password(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    made = serve_without_starting(monkeypatch)
    caplog.set_level(logging.INFO)
    url = "postgresql+asyncpg://fleet:hunter2@db.example:5432/fleet"
    assert main(["serve", "--database-url", url]) == 0
    assert "database postgresql+asyncpg://fleet:***@db.example:5432/fleet" in caplog.text
    assert "hunter2" not in caplog.text
    (settings,) = made
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)


def test_an_unreachable_database_is_an_error_naming_its_url_without_the_password(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import fleet.service.telemetry

    monkeypatch.setattr(
        fleet.service.telemetry, "configure_logging", lambda *a: None
    )  # keep caplog
    port = free_port()  # nothing listens there
    url = f"postgresql+asyncpg://fleet:hunter2@127.0.0.1:{port}/fleet"
    assert main(["serve", "--database-url", url, "--port", "0"]) == 1
    assert f"cannot reach the database postgresql+asyncpg://fleet:***@127.0.0.1:{port}/fleet" in (
        caplog.text
    )
    out, err = capsys.readouterr()
    assert "hunter2" not in caplog.text + out + err


def real_members_file(tmp_path: Path, kubeconfig: str) -> Path:
    """The example clusters with ``edge`` reached through ``kubeconfig``."""
    docs = list(yaml.safe_load_all((POLICIES / "clusters" / "example.yaml").read_text()))
    edge = next(d for d in docs if d["metadata"]["name"] == "edge")
    edge["spec"] = {"kubeconfig": {"path": kubeconfig}, "cells": edge["spec"]["cells"]}
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


@pytest.mark.parametrize(
    ("kubeconfig", "why"),
    [
        ("../outside.yaml", "resolves to a file outside the kubeconfig directory"),
        ("plugin.yaml", "user users[0] 'fleet' (exec) gets credentials from a plugin"),
    ],
    ids=["outside", "exec"],
)
def test_serve_refuses_to_start_on_a_members_kubeconfig_it_does_not_use(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    kubeconfig: str,
    why: str,
) -> None:
    import fleet.service.telemetry

    monkeypatch.setattr(
        fleet.service.telemetry, "configure_logging", lambda *a: None
    )  # keep caplog
    directory = tmp_path / "kubeconfigs"
    directory.mkdir()
    marker = tmp_path / "plugin-ran"
    (tmp_path / "outside.yaml").write_text(config())
    (directory / "plugin.yaml").write_text(config(exec_user(marker)))
    clusters = real_members_file(tmp_path, kubeconfig)
    argv = ["serve", "--database-url", f"sqlite+aiosqlite:///{tmp_path}/f.db", "--port", "0"]
    argv += ["--clusters", str(clusters), "--kubeconfig-dir", str(directory)]
    assert main(argv) == 1
    assert f"cannot start: {clusters}: member cluster edge: spec.kubeconfig.path: " in caplog.text
    assert why in caplog.text
    assert not marker.exists()


def test_the_public_url_flags_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiohttp import web

    monkeypatch.setattr(web, "run_app", lambda app, **kw: None)
    monkeypatch.setattr("fleet.cli.serve.port_problem", lambda host, port: None)
    import fleet.api.app as app_module
    import fleet.service.telemetry

    monkeypatch.setattr(fleet.service.telemetry, "configure_logging", lambda *a: None)
    from fleet.service.settings import Settings

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
