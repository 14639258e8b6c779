"""Suite-wide fixtures: every scheduler state and placer a test builds is checked.

Theory of operation: the autouse fixture :func:`checked_objects` adds a
watcher to :data:`fleet.core.checks.WATCHERS`, which every
:class:`SchedulerState`, :class:`CapacityPlacer`, :class:`CellPlacer` and
:class:`QuotaTree` calls as it is made (compiled classes cannot be patched
from outside).  Every object made during a test is therefore recorded,
however it was made: directly, through
``tests/core/factories.py``, :mod:`fleet.testing.cells`, the CLI or a hypothesis
example; they are kept alive until teardown, so the objects of every example
of a hypothesis test are checked.  Each one's ``check_invariants()`` runs once
(a scheduler state checks its own tree and placers, so those are skipped), and
the test errors if one raises.  A test that breaks an invariant on purpose
opts out with ``@pytest.mark.corrupts_state``; a test that already failed is
not checked again.  A test may take the fixture by name to see what was built.

The CLI reads no config file of the user's (``FLEET_CONFIG`` is ``/dev/null``).

Databases (helpers in ``tests/databases.py``): ``postgres_url`` is the URL of
the run's PostgreSQL server, from ``FLEET_TEST_POSTGRES_URL`` (unset: the test
fails under ``CI=true`` and is skipped elsewhere); ``database_url`` runs a test
once on SQLite and once on PostgreSQL, each time with a fresh empty database.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Protocol, cast

import pytest

from fleet import compiled_core
from fleet.core import checks
from fleet.core.capacity import CapacityPlacer
from fleet.core.cells.placer import CellPlacer
from fleet.core.quota import QuotaTree
from fleet.core.state import SchedulerState
from tests.databases import (
    fresh_postgres_database,
    in_ci,
    missing_postgres_message,
    postgres_url_from_env,
    sqlite_url,
)
from tests.paths import ROOT

pytest_plugins = ["pytester", "tests.hub.cluster"]  # the hub fixtures: tests/hub and tests/kube

#: Set on a test item when its setup or call failed (see pytest_runtest_makereport).
_FAILED = pytest.StashKey[bool]()

#: Classes whose every instance is recorded when ``__init__`` returns.
# Start-time forecasts run in a thread of each test's service: the worker process
# of the default would start one more interpreter per service the tests run.
# tests/sim/test_forecast.py runs them in that process too.
os.environ.setdefault("FLEET_ESTIMATE_PROCESS", "false")
# The CLI's config file of contexts (fleet.cli.config): none, whatever the user running
# the tests keeps in ~/.config/fleet; a test that wants one names its own.
os.environ["FLEET_CONFIG"] = os.devnull
os.environ.pop("FLEET_CONTEXT", None)


class Checkable(Protocol):
    def check_invariants(self) -> None: ...


class Built:
    """What a test built, in order, and the teardown check over it."""

    def __init__(self) -> None:
        self.objects: list[Checkable] = []

    def add(self, obj: object) -> None:
        self.objects.append(cast(Checkable, obj))

    def __contains__(self, obj: object) -> bool:
        return any(o is obj for o in self.objects)

    def check(self) -> list[str]:
        """Run every object's ``check_invariants()`` once; return the failures."""
        seen: set[int] = set()
        failures: list[str] = []
        # Scheduler states first: each checks its tree and placers itself.
        states = [o for o in self.objects if isinstance(o, SchedulerState)]
        others = [o for o in self.objects if not isinstance(o, SchedulerState)]
        for obj in [*states, *others]:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if isinstance(obj, SchedulerState):
                seen.add(id(obj.tree))
                seen.update(id(p) for p in obj.placers.values())
            try:
                obj.check_invariants()
            except Exception as e:
                failures.append(f"{describe(obj)}: {type(e).__name__}: {e}")
        return failures


def describe(obj: object) -> str:
    if isinstance(obj, SchedulerState):
        return f"SchedulerState over clusters {sorted(obj.placers)}"
    if isinstance(obj, QuotaTree):
        return f"QuotaTree rooted at {obj.nodes()[0]}"
    if isinstance(obj, CapacityPlacer | CellPlacer):
        return f"{type(obj).__name__} of cluster {obj.cluster}"
    return type(obj).__name__


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when in ("setup", "call") and report.failed:
        item.stash[_FAILED] = True
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the tests marked ``interpreted_core`` when the compiled core is in use."""
    if not compiled_core.active():
        return
    skip = pytest.mark.skip(
        reason="replaces a method of a core class, which the compiled core refuses; "
        "run with FLEET_CORE=interpreted (CI does)"
    )
    for item in items:
        if item.get_closest_marker("interpreted_core") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def checked_objects(request: pytest.FixtureRequest) -> Iterator[Built]:
    """Record every scheduler state, quota tree and placer; check them at teardown."""
    objects = Built()
    checks.WATCHERS.append(objects.add)
    try:
        yield objects
    finally:
        checks.WATCHERS.remove(objects.add)
    if request.node.get_closest_marker("corrupts_state") is not None:
        return
    if request.node.stash.get(_FAILED, False):
        return
    failures = objects.check()
    if failures:
        pytest.fail(
            "check_invariants() failed at teardown (mark the test corrupts_state if "
            "it breaks an invariant on purpose):\n  " + "\n  ".join(failures),
            pytrace=False,
        )


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The URL of the run's PostgreSQL server (``FLEET_TEST_POSTGRES_URL``).

    Unset: the test fails under ``CI=true`` (PostgreSQL tests never go missing
    from CI unnoticed) and is skipped elsewhere, with the reason.
    """
    url = postgres_url_from_env()
    if url is None:
        if in_ci():
            pytest.fail(missing_postgres_message(), pytrace=False)
        pytest.skip(missing_postgres_message())
    return url


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgresql),
    ]
)
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh empty database per test, once on SQLite and once on PostgreSQL.

    SQLite: a file in the test's ``tmp_path`` (created on first connection).
    PostgreSQL: a database of its own on the ``postgres_url`` server, dropped at
    teardown.  A test must dispose of its engines before it returns.
    """
    if request.param == "sqlite":
        yield sqlite_url(tmp_path)
        return
    maintenance_url: str = request.getfixturevalue("postgres_url")
    async with fresh_postgres_database(maintenance_url) as url:
        yield url


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the project's sources and import contracts (the layering tests plant
    imports in it)."""
    for name in ("fleet", "tools"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path
