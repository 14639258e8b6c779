"""A command whose reader goes away (``fleet plan | head``) stops quietly.

Its output pipe has no reader: the command exits with the status of a
process that SIGPIPE ended (141), as ``ls | head`` leaves ``ls``, and writes
no traceback.  A broken pipe that is not standard output (a member's or the
server's connection) is still an error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
PLAN = [
    "plan",
    "--quota",
    "policies/quota/team-tree.yaml",
    "--clusters",
    "policies/clusters/example.yaml",
    "--jobs",
    "policies/jobs/examples.yaml",
]


def test_a_plan_whose_reader_is_gone_exits_141_without_a_traceback() -> None:
    read, write = os.pipe()
    os.close(read)  # nobody will read what the command prints
    try:
        done = subprocess.run(
            [sys.executable, "-m", "fleet.cli.main", *PLAN],
            stdout=write,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            text=True,
        )
    finally:
        os.close(write)
    assert done.returncode == cli_main.READER_GONE, done.stderr
    assert done.stderr == ""


def test_the_same_plan_with_a_reader_prints_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fleet.cli.main", *PLAN], capture_output=True, cwd=ROOT, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ADMITTED")


def test_a_broken_pipe_that_is_not_standard_output_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise BrokenPipeError(32, "Broken pipe")  # as a closed connection would

    parser = argparse.ArgumentParser()
    parser.set_defaults(handler=broken)
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    with pytest.raises(BrokenPipeError):
        cli_main.main([])
