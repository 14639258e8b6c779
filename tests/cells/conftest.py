"""Shared helpers for the cell allocator tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.paths import HIVED

FIXTURES = Path(__file__).parent / "fixtures"
#: HiveD's configs and algorithm test cases, kept in the repository (see its SOURCE.md).
REFERENCE = HIVED


def load_yaml(path: Path) -> Any:
    with path.open() as f:
        return yaml.safe_load(f)
