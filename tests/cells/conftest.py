"""Shared helpers for the cell allocator tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).parent / "fixtures"
REFERENCE = Path("/work/shared/reference/hived-tests")


def load_yaml(path: Path) -> Any:
    with path.open() as f:
        return yaml.safe_load(f)
