"""The CLI's config file of contexts and where each command sends its requests."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

import pytest
import yaml

from fleet.cli import config
from fleet.cli.main import build_parser, main
from fleet.testing import servers


def write_config(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def two_contexts(tmp_path: Path) -> dict[str, str]:
    """An environment whose config file holds ``prod`` (current) and ``lab``."""
    (tmp_path / "lab-token").write_text("fleet_lab\n")
    path = write_config(
        tmp_path / "config.yaml",
        {
            "current-context": "prod",
            "contexts": [
                {"name": "prod", "server": "https://prod.example:443", "token": "fleet_prod"},
                {"name": "lab", "server": "lab.example:8080", "token-file": "lab-token"},
            ],
        },
    )
    return {"FLEET_CONFIG": str(path)}


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        # The current context when nothing else is said.
        ({}, {}, ("https://prod.example:443", "fleet_prod")),
        # FLEET_CONTEXT picks another; a relative token-file is read beside the config.
        ({}, {"FLEET_CONTEXT": "lab"}, ("http://lab.example:8080", "fleet_lab")),
        # --context beats FLEET_CONTEXT and FLEET_SERVER.
        (
            {"context": "lab"},
            {"FLEET_CONTEXT": "prod", "FLEET_SERVER": "env.example"},
            ("http://lab.example:8080", "fleet_lab"),
        ),
        # FLEET_SERVER and FLEET_TOKEN beat the current context.
        (
            {},
            {"FLEET_SERVER": "env.example:1", "FLEET_TOKEN": "fleet_env"},
            ("http://env.example:1", "fleet_env"),
        ),
        # --server and --token beat everything.
        (
            {"server": "flag.example:2", "token": "fleet_flag", "context": "lab"},
            {"FLEET_SERVER": "env.example:1", "FLEET_TOKEN": "fleet_env"},
            ("http://flag.example:2", "fleet_flag"),
        ),
        # A context's token goes only to its own server.
        ({"server": "elsewhere.example:3"}, {}, ("http://elsewhere.example:3", None)),
        ({"server": "https://prod.example:443/"}, {}, ("https://prod.example:443", "fleet_prod")),
    ],
)
def test_flags_beat_the_environment_which_beats_the_current_context(
    two_contexts: dict[str, str],
    flags: dict[str, str],
    env: dict[str, str],
    expected: tuple[str, str | None],
) -> None:
    assert config.resolve(env={**two_contexts, **env}, **flags) == expected


def test_without_a_config_file_the_default_server() -> None:
    missing = {"FLEET_CONFIG": "/nonexistent/fleet/config.yaml"}
    assert config.resolve(env=missing) == ("http://127.0.0.1:8080", None)
    assert config.config_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/fleet/config.yaml")


def test_an_unknown_context_is_one_clear_error(two_contexts: dict[str, str]) -> None:
    with pytest.raises(config.ConfigError, match="--context 'nope': no such context"):
        config.resolve(context="nope", env=two_contexts)
    with pytest.raises(config.ConfigError, match="FLEET_CONTEXT 'nope': no such context"):
        config.resolve(env={**two_contexts, "FLEET_CONTEXT": "nope"})


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("127.0.0.1:18090", "http://127.0.0.1:18090"),
        ("localhost", "http://localhost"),
        ("https://fleet.example.com/", "https://fleet.example.com"),
        ("HTTP://[::1]:8080", "HTTP://[::1]:8080"),
    ],
)
def test_a_server_without_a_scheme_is_http(given: str, url: str) -> None:
    assert config.normalize_server(given) == url


@pytest.mark.parametrize("given", ["ftp://x", "http://", "host:99999", "host:port", "h?q=1"])
def test_a_bad_server_is_refused(given: str) -> None:
    with pytest.raises(config.ConfigError, match="is not a server address"):
        config.normalize_server(given)


def test_a_server_without_a_scheme_is_reached_over_http(
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = servers.free_port()
    assert main(["get", "jobs", "--server", f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot reach the Fleet server at http://127.0.0.1:{port}: ")
    assert "unknown url type" not in err


def test_a_bad_server_value_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["get", "queues", "--server", "http://"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: --server 'http://' is not a server")


def every_remote_command() -> list[list[str]]:
    return [
        ["apply", "-f", "x.yaml"],
        ["edit", "quota", "team-a", "--max", "cpu=1"],
        ["get", "jobs"],
        ["describe", "job", "a/b"],
        ["delete", "job", "a/b"],
        ["simulate", "--from-live", "--quota", "q.yaml"],
    ]


@pytest.mark.parametrize("argv", every_remote_command(), ids=lambda a: a[0])
def test_every_remote_command_takes_a_context(argv: list[str]) -> None:
    args: argparse.Namespace = build_parser().parse_args(
        [*argv, "--context", "lab", "--server", "s", "--token", "t"]
    )
    assert (args.context, args.server, args.token) == ("lab", "s", "t")


def fleet(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_config_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fleet" / "config.yaml"
    monkeypatch.setenv("FLEET_CONFIG", str(path))
    code, _, err = fleet(capsys, "config", "current-context")
    assert code == 1 and "no current context" in err
    code, out, err = fleet(
        capsys, "config", "set-context", "prod", "--server", "prod.example:8080", "--token", "s3"
    )
    assert (code, err) == (0, "") and "it is the current one" in out
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert fleet(capsys, "config", "set-context", "lab", "--server", "lab:1")[0] == 0
    assert fleet(capsys, "config", "set-context", "lab", "--token-file", "~/t")[0] == 0
    assert yaml.safe_load(path.read_text()) == {
        "current-context": "prod",
        "contexts": [
            {"name": "prod", "server": "http://prod.example:8080", "token": "s3"},
            {"name": "lab", "server": "http://lab:1", "token-file": "~/t"},
        ],
    }
    code, out, _ = fleet(capsys, "config", "view")
    assert code == 0 and "s3" not in out and "token: REDACTED" in out
    code, out, _ = fleet(capsys, "config", "get-contexts")
    lines = out.splitlines()
    assert lines[0].split() == ["CURRENT", "NAME", "SERVER", "AUTH"]
    assert lines[1].split() == ["*", "prod", "http://prod.example:8080", "token"]
    assert lines[2].split() == ["lab", "http://lab:1", "token-file"]
    assert fleet(capsys, "config", "use-context", "lab")[:2] == (0, "switched to context lab\n")
    assert fleet(capsys, "config", "current-context")[1] == "lab\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    code, _, err = fleet(capsys, "config", "use-context", "nope")
    assert code == 1 and err == f"error: no context 'nope' in {path} (contexts: prod, lab)\n"
    code, _, err = fleet(capsys, "config", "set-context", "new")
    assert code == 1 and "give its --server" in err
    code, _, err = fleet(capsys, "config", "set-context", "new", "--server", "ftp://x")
    assert code == 1 and err.count("\n") == 1


def test_a_broken_config_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path / "config.yaml", {"contexts": [{"name": "a", "sever": "x"}]})
    monkeypatch.setenv("FLEET_CONFIG", str(path))
    code, out, err = fleet(capsys, "get", "jobs")
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and f"config file {path}: contexts.0.sever" in err
