"""``fleet serve``'s first minutes: a taken port is one line, logs fit where they go."""

from __future__ import annotations

import errno
import io
import json
import logging
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.cli.main import main
from fleet.service.telemetry import configure_logging
from fleet.testing import servers


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_a_taken_port_is_one_line_and_exit_status_1(taken_port: int, tmp_path: Path) -> None:
    db = tmp_path / "fleet.db"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fleet.cli.main",
            "serve",
            "--port",
            str(taken_port),
            "--database-url",
            f"sqlite+aiosqlite:///{db}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        f"error: port {taken_port} on 127.0.0.1 is in use; choose another with --port\n"
    )
    assert not db.exists()  # found before anything started


def test_a_port_taken_after_the_check_is_one_line_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from aiohttp import web

    import fleet.api.app as app_module

    def run_app(app: object, **kw: object) -> None:
        raise OSError(errno.EADDRINUSE, "address already in use")

    monkeypatch.setattr(web, "run_app", run_app)
    monkeypatch.setattr("fleet.cli.serve.port_problem", lambda host, port: None)
    monkeypatch.setattr("fleet.service.telemetry.configure_logging", lambda *a: None)
    monkeypatch.setattr(app_module, "create_app", lambda settings: object())
    assert main(["serve", "--port", "18093"]) == 1
    assert capsys.readouterr().err == (
        "error: port 18093 on 127.0.0.1 is in use; choose another with --port\n"
    )


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(
    ("fmt", "terminal", "json_lines"),
    [
        ("auto", True, False),
        ("auto", False, True),
        ("json", True, True),
        ("text", False, False),
    ],
)
@pytest.mark.usefixtures("restore_logging")
def test_logs_are_text_on_a_terminal_and_json_elsewhere_unless_told(
    fmt: str, terminal: bool, json_lines: bool
) -> None:
    stream = Terminal() if terminal else io.StringIO()
    configure_logging("INFO", fmt, stream)  # type: ignore[arg-type]
    logging.getLogger("fleet.test").info("hello %s", "there")
    line = stream.getvalue().strip()
    if json_lines:
        assert json.loads(line)["message"] == "hello there"
    else:
        assert line.endswith("hello there") and not line.startswith("{")


@pytest.mark.slow
def test_a_served_process_logs_json_to_a_file_and_text_when_asked(tmp_path: Path) -> None:
    (tmp_path / "json").mkdir()
    with servers.serving(tmp_path / "json") as server:
        pass
    first = server.log.read_text().splitlines()[0]
    assert json.loads(first)["message"]
    (tmp_path / "text").mkdir()
    with servers.serving(tmp_path / "text", extra=["--log-format", "text"]) as server:
        pass
    first = server.log.read_text().splitlines()[0]
    assert not first.startswith("{") and "database sqlite" in first
