"""``fleet serve`` as a real process for tests and benchmarks: a free port, readiness, logs.

Theory of operation: :func:`launch` starts ``python -m fleet.cli.main serve``
on a port and database, its output appended to a log file, and returns at
once; :func:`wait_ready` polls ``/readyz`` until it answers 200, and raises
AssertionError with the log if the process exits or is not ready in time;
:func:`start` does both, and :func:`stop` terminates the process (kills it if
it does not stop within 30 s).  :func:`serving` is the usual case as a context
manager: a server on a SQLite file of its own in a work directory, on a free
port, stopped when the block ends.  Replicas on one PostgreSQL database share
:data:`REPLICA_ENV`'s secret.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

#: The replicas' shared secret (followers forward the leader's routes with it).
REPLICA_ENV = {"FLEET_REPLICA_SECRET": "test-replica-secret-of-32-chars!"}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(
    database_url: str,
    port: int,
    log: Path,
    *,
    cwd: Path | None = None,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    schedule_interval: float = 0.2,
    prefix: Sequence[str] = (),
    python_args: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """``fleet serve`` on ``port`` and ``database_url``, started (not yet ready).

    ``extra``: more arguments; ``env``: environment variables added to this
    process's; ``prefix``: a command to run it under (a profiler);
    ``python_args``: the interpreter's own arguments before ``-m fleet.cli.main``
    (``-m cProfile -o FILE``).  Its output is appended to ``log``.
    """
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                *prefix,
                sys.executable,
                *python_args,
                "-m",
                "fleet.cli.main",
                "serve",
                "--port",
                str(port),
                "--database-url",
                database_url,
                "--schedule-interval",
                str(schedule_interval),
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
        )


def wait_ready(
    proc: subprocess.Popen[bytes], port: int, log: Path, *, within: float = 30.0
) -> None:
    """Return once ``/readyz`` answers 200; AssertionError with the log if it exits or
    is not ready ``within`` seconds (the process is stopped then)."""
    url = f"http://127.0.0.1:{port}/readyz"
    for _ in range(round(within * 10)):
        if proc.poll() is not None:
            raise AssertionError("fleet serve exited:\n" + log.read_text())
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    stop(proc)
    raise AssertionError("fleet serve did not become ready:\n" + log.read_text())


def start(
    database_url: str,
    port: int,
    log: Path,
    *,
    cwd: Path | None = None,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    schedule_interval: float = 0.2,
    prefix: Sequence[str] = (),
    python_args: Sequence[str] = (),
    ready_within: float = 30.0,
) -> subprocess.Popen[bytes]:
    """``fleet serve`` on ``port`` and ``database_url``, once ``/readyz`` answers 200.

    The arguments are :func:`launch`'s; AssertionError with the log if it exits
    or is not ready within ``ready_within`` seconds.
    """
    proc = launch(
        database_url,
        port,
        log,
        cwd=cwd,
        extra=extra,
        env=env,
        schedule_interval=schedule_interval,
        prefix=prefix,
        python_args=python_args,
    )
    wait_ready(proc, port, log, within=ready_within)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate ``fleet serve`` (kill it if it does not stop within 30 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass(frozen=True, slots=True)
class Server:
    """A running ``fleet serve``: its base URL, log file and process."""

    url: str
    log: Path
    proc: subprocess.Popen[bytes]


@contextmanager
def serving(
    work: Path,
    *,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    schedule_interval: float = 0.2,
) -> Iterator[Server]:
    """``fleet serve`` on a free port and the SQLite file ``work/fleet.db``, run in
    ``work`` and logging to ``work/serve.log``; stopped when the block ends."""
    port = free_port()
    log = work / "serve.log"
    proc = start(
        f"sqlite+aiosqlite:///{work / 'fleet.db'}",
        port,
        log,
        cwd=work,
        extra=extra,
        env=env,
        schedule_interval=schedule_interval,
    )
    try:
        yield Server(f"http://127.0.0.1:{port}", log, proc)
    finally:
        stop(proc)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
