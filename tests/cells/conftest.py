"""Shared helpers for the cell allocator tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).parent / "fixtures"
# The shared reference material sits beside the checkout (../shared); override
# with FLEET_REFERENCE. In CI (CI=true) its absence is an error, not a skip.
REFERENCE = (
    Path(
        os.environ.get(
            "FLEET_REFERENCE",
            Path(__file__).resolve().parents[3] / "shared" / "reference",
        )
    )
    / "hived-tests"
)
if os.environ.get("CI") == "true" and not REFERENCE.exists():
    raise RuntimeError(f"HiveD reference data not found at {REFERENCE}")


def load_yaml(path: Path) -> Any:
    with path.open() as f:
        return yaml.safe_load(f)
