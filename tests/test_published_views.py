"""The API, the dashboard, the CLI and the telemetry read the loop's published view only.

Theory of operation: the scheduler loop is the one writer of the core's
state, and it publishes what readers may see as an immutable
:class:`fleet.service.loop.LoopView` (queues, reasons, clusters, draining and
not-ready members).  A reader that reaches into ``loop.state`` sees the
state in the middle of an iteration and ties itself to the core's
internals; this test walks the readers' sources and finds every
``<...>.loop.state`` or ``loop.state``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "fleet"
#: The readers of the loop: every module of these packages, and these modules.
READERS = ("api", "ui", "cli", "service/telemetry.py")


def live_state_reads(source: str, name: str) -> list[str]:
    """``name:line`` of each read of a loop's live state in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Attribute) and node.attr == "state"):
            continue
        owner = node.value
        if (isinstance(owner, ast.Attribute) and owner.attr == "loop") or (
            isinstance(owner, ast.Name) and owner.id == "loop"
        ):
            found.append(f"{name}:{node.lineno}")
    return found


def reader_sources() -> list[Path]:
    out: list[Path] = []
    for name in READERS:
        path = ROOT / name
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def test_readers_of_the_loop_read_its_published_view_only() -> None:
    sources = reader_sources()
    assert len(sources) > 20  # the walk found the packages
    hits = [
        hit
        for path in sources
        for hit in live_state_reads(path.read_text(encoding="utf-8"), str(path))
    ]
    assert hits == []


def test_a_read_of_the_live_state_is_found() -> None:
    source = "def f(svc, loop):\n    return svc.loop.state.draining, loop.state.unready\n"
    assert live_state_reads(source, "planted.py") == ["planted.py:2", "planted.py:2"]
