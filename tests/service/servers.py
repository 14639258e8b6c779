"""Starting ``fleet serve`` as a real process for tests: a free port, readiness, logs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The replicas' shared secret (followers forward the leader's routes with it).
REPLICA_ENV = {"FLEET_REPLICA_SECRET": "test-replica-secret-of-32-chars!"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(
    database_url: str,
    port: int,
    log: Path,
    *,
    cwd: Path | None = None,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``fleet serve`` on ``port`` and ``database_url``, once ``/readyz`` answers 200.

    ``env``: environment variables added to this process's.  Its output is
    appended to ``log``; AssertionError with that log if it exits
    or is not ready within 30 s.
    """
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleet.cli.main",
                "serve",
                "--port",
                str(port),
                "--database-url",
                database_url,
                "--schedule-interval",
                "0.2",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
        )
    url = f"http://127.0.0.1:{port}/readyz"
    for _ in range(300):
        if proc.poll() is not None:
            raise AssertionError("fleet serve exited:\n" + log.read_text())
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return proc
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    stop(proc)
    raise AssertionError("fleet serve did not become ready:\n" + log.read_text())


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``fleet serve`` (kill it if it does not stop within 30 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
