"""Tokens on the command line: fleet token create, the tokens file's checks, serve's host rule."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from fleet.api.tokens import TokensFileError, TokenStore, hash_token, parse_tokens, read_tokens
from fleet.cli.main import main
from fleet.service.settings import Settings


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


def test_token_create_writes_through_no_symlink_planted_beside_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.yaml"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    (tmp_path / "tokens.yaml.tmp").symlink_to(victim)  # the temporary name once used
    create = ["token", "create", "ops", "--role", "admin", "--tokens-file", str(path)]
    assert main(create) == 0
    token = capsys.readouterr().out.strip()
    assert victim.read_text() == "precious\n"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o644
    assert not path.is_symlink()
    assert TokenStore(path).lookup(token) is not None


def test_token_create_never_lets_others_read_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file the new text is in is 0600 whenever it is renamed or its mode is changed."""
    path = tmp_path / "tokens.yaml"
    seen: list[tuple[str, str, int, set[str]]] = []

    def spying(name: str) -> object:
        real = getattr(os, name)

        def spy(src: str | os.PathLike[str], *args: object, **kw: object) -> object:
            present = {p.name for p in tmp_path.iterdir()}
            seen.append((name, os.fspath(src), stat.S_IMODE(os.stat(src).st_mode), present))
            return real(src, *args, **kw)

        return spy

    monkeypatch.setattr(os, "replace", spying("replace"))
    monkeypatch.setattr(os, "chmod", spying("chmod"))
    old_umask = os.umask(0o022)  # the usual umask: a file opened the plain way would be 0644
    try:
        for name in ("ops", "ci-a"):
            argv = ["token", "create", name, "--role", "admin", "--tokens-file", str(path)]
            assert main(argv) == 0
    finally:
        os.umask(old_umask)
    capsys.readouterr()
    assert [(call, mode) for call, _, mode, _ in seen] == [("replace", 0o600)] * 2
    for _, src, _, present in seen:
        assert present <= {"tokens.yaml", Path(src).name}  # nothing else was ever created
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["tokens.yaml"]  # no temporary file left


@pytest.mark.parametrize(
    ("mode", "warned"),
    [(0o600, None), (0o644, None), (0o620, "its group"), (0o602, "everyone")],
    ids=["owner-only", "world-readable", "group-writable", "world-writable"],
)
def test_a_tokens_file_others_may_write_is_warned_about_at_start_and_when_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, warned: str | None
) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text(f"tokens:\n- {{name: a, role: admin, sha256: {hash_token('fleet_a')}}}\n")
    path.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="fleet.api.tokens"):
        store = TokenStore(path)
        assert store.lookup("fleet_a") is not None  # unchanged: not warned about again
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if warned is None:
        assert messages == []
        path.chmod(0o660)  # the mode changes while the server runs
        with caplog.at_level(logging.WARNING, logger="fleet.api.tokens"):
            assert store.lookup("fleet_a") is not None
        messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        warned, mode = "its group", 0o660
    assert messages == [
        f"tokens file {path} is writable by {warned} (mode {mode:04o}): whoever can write it "
        "can add an admin token; make it writable by its owner only (chmod go-w)"
    ]


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


def test_token_list_shows_names_roles_and_queues_but_no_hashes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.yaml"
    for args in (["ops", "--role", "admin"], ["ci-a", "--role", "team", "--queue", "team-a"]):
        assert main(["token", "create", *args, "--tokens-file", str(path)]) == 0
    capsys.readouterr()
    assert main(["token", "list", "--tokens-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert [line.split() for line in out.splitlines()] == [
        ["NAME", "ROLE", "QUEUES"],
        ["ops", "admin", "-"],
        ["ci-a", "team", "team-a"],
    ]
    hashes = [t.sha256 for t in read_tokens(path).tokens]
    assert not any(h in out for h in hashes)
    assert main(["token", "list", "--show-hashes", "--tokens-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert all(h in out for h in hashes)


def test_token_revoke_removes_the_token_and_keeps_the_file_private(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.yaml"
    monkeypatch.setenv("FLEET_TOKENS_FILE", str(path))
    assert main(["token", "create", "ops", "--role", "admin"]) == 0
    assert main(["token", "create", "old", "--role", "admin"]) == 0
    kept, revoked = capsys.readouterr().out.split()
    path.chmod(0o600)
    assert main(["token", "revoke", "old"]) == 0
    assert capsys.readouterr().out == f"token old revoked: removed from {path}\n"
    store = TokenStore(path)
    assert store.lookup(revoked) is None and store.lookup(kept) is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert main(["token", "revoke", "old"]) == 1
    assert capsys.readouterr().err == f"error: no token 'old' in {path} (tokens: ops)\n"
    assert [t.name for t in read_tokens(path).tokens] == ["ops"]
