"""Tokens on the command line: fleet token create, the tokens file's checks, serve's host rule."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from fleet.api.tokens import TokensFileError, TokenStore, hash_token, parse_tokens, read_tokens
from fleet.cli.main import main
from fleet.settings import Settings


def test_token_create_prints_the_token_once_and_stores_only_its_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.yaml"
    assert main(["token", "create", "ci-a", "--role", "team", "--queue", "team-a",
                 "--tokens-file", str(path)]) == 0  # fmt: skip
    token = capsys.readouterr().out.strip()
    assert token.startswith("fleet_") and len(token) > 40
    text = path.read_text()
    assert token not in text
    assert yaml.safe_load(text) == {
        "tokens": [{"name": "ci-a", "role": "team", "queues": ["team-a"],
                    "sha256": hash_token(token)}]
    }  # fmt: skip
    assert path.stat().st_mode & 0o077 == 0
    assert main(["token", "create", "ops", "--role", "admin", "--tokens-file", str(path)]) == 0
    second = capsys.readouterr().out.strip()
    store = TokenStore(path)
    assert store.lookup(token) is not None and store.lookup(token).queues == {"team-a"}  # type: ignore[union-attr]
    assert store.lookup(second) is not None and store.lookup(second).admin  # type: ignore[union-attr]
    assert store.lookup("fleet_guess") is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ci-a", "--role", "team"], "a team token is bound to at least one queue"),
        (["ops", "--role", "admin", "--queue", "x"], "an admin token is bound to no queue"),
        (["bad name", "--role", "admin"], "String should match pattern"),
    ],
    ids=["team-without-queue", "admin-with-queue", "bad-name"],
)
def test_token_create_refuses_what_serve_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    path = tmp_path / "tokens.yaml"
    assert main(["token", "create", *args, "--tokens-file", str(path)]) == 1
    assert message in capsys.readouterr().err
    assert not path.exists()


def test_a_name_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tokens.yaml"
    assert main(["token", "create", "ops", "--role", "admin", "--tokens-file", str(path)]) == 0
    before = path.read_text()
    assert main(["token", "create", "ops", "--role", "admin", "--tokens-file", str(path)]) == 1
    assert "'ops' is named twice" in capsys.readouterr().err
    assert path.read_text() == before


def test_the_tokens_file_lists_every_problem() -> None:
    with pytest.raises(TokensFileError) as info:
        parse_tokens(
            "tokens:\n- {name: a, role: team, sha256: nothex}\n"
            "- {name: b, role: root, sha256: x}\n",
            "t.yaml",
        )
    message = str(info.value)
    assert "tokens.0.sha256" in message and "tokens.1.role" in message
    with pytest.raises(TokensFileError, match="not YAML"):
        parse_tokens("tokens: [", "t.yaml")


def test_a_changed_tokens_file_is_read_again_and_a_broken_one_keeps_the_old(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(f"tokens:\n- {{name: a, role: admin, sha256: {hash_token('fleet_a')}}}\n")
    store = TokenStore(path)
    assert store.lookup("fleet_a") is not None
    path.write_text(f"tokens:\n- {{name: b, role: admin, sha256: {hash_token('fleet_b')}}}\n")
    assert store.lookup("fleet_a") is None and store.lookup("fleet_b") is not None
    path.write_text("tokens: [broken\n")
    assert store.lookup("fleet_b") is not None
    assert read_tokens(tmp_path / "missing.yaml").tokens == []


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::", "example.com"])
def test_without_tokens_only_loopback_hosts_are_allowed(host: str, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="not a loopback address"):
        Settings(host=host)
    assert Settings(host=host, tokens_file=tmp_path / "t.yaml").host == host
    for loopback in ("127.0.0.1", "::1", "localhost"):
        assert Settings(host=loopback).host == loopback


def test_serve_refuses_a_public_host_without_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0"]) == 1
    assert "without --tokens-file every caller is admin" in capsys.readouterr().err


def test_serve_refuses_a_broken_tokens_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("tokens: [{name: a}]\n")
    assert main(["serve", "--tokens-file", str(path)]) == 1
    assert "tokens.0.role" in capsys.readouterr().err
