"""The suite's data is part of the repository; the conformance table is a file, not output."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import paths
from tests.cells import conftest as cells_conftest

#: Data sets under tests/data and what their SOURCE.md must name.
SOURCES = {
    paths.HIVED: ("https://github.com/microsoft/hivedscheduler", "MIT License"),
    paths.KUBEFLOW: ("https://github.com/kubeflow/training-operator", "Apache License"),
}


@pytest.mark.parametrize("folder", sorted(SOURCES), ids=lambda p: p.name)
def test_data_sets_live_in_the_repository_with_their_source(folder: Path) -> None:
    assert folder.resolve().is_relative_to(paths.ROOT)
    files = [p for p in folder.rglob("*") if p.is_file() and p.name != "SOURCE.md"]
    assert files
    source = (folder / "SOURCE.md").read_text(encoding="utf-8")
    for fact in SOURCES[folder]:
        assert fact in source
    listed = re.findall(r"`([^`]+\.yaml)`", source)
    for f in files:  # every copied file is named (or matched by a pattern) in SOURCE.md
        name = f.relative_to(folder).as_posix()
        assert any(fnmatch.fnmatchcase(name, pattern) for pattern in listed), name


def test_cell_tests_read_hived_data_from_the_repository() -> None:
    assert cells_conftest.REFERENCE == paths.HIVED
    assert (paths.HIVED / "v1-master" / "algorithm-test-cases.yaml").is_file()
    assert (paths.HIVED / "v1-master" / "config" / "design-hivedscheduler.yaml").is_file()


def test_no_source_reads_a_path_outside_the_repository() -> None:
    # Spelled in pieces so that this file does not match itself.
    outside = ("FLEET_" + "REFERENCE", "shared" + "/reference", '"shared" / ' + '"reference"')
    offenders = [
        f"{path.relative_to(paths.ROOT)}: {marker}"
        for top in ("fleet", "tests", "bench", "scripts")
        for path in sorted((paths.ROOT / top).rglob("*"))
        if path.is_file() and path.suffix in ("", ".py", ".md", ".toml", ".cfg")
        for marker in outside
        if marker in path.read_text(encoding="utf-8", errors="replace")
    ]
    assert offenders == []


def test_conformance_table_is_written_to_a_file_not_printed(tmp_path: Path) -> None:
    table = tmp_path / "table.txt"
    env = {**os.environ, "FLEET_CONFORMANCE_TABLE": str(table)}
    test = "tests/cells/test_hived_conformance.py::test_hived_algorithm_conformance"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", test],
        cwd=paths.ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "HiveD conformance" not in run.stdout + run.stderr
    assert "1 passed" in run.stdout
    text = table.read_text(encoding="utf-8")
    assert text.startswith("HiveD conformance (scenario, step, outcome):\n")
    assert "  normalOperations" in text
