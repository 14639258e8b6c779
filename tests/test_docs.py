"""The changelog, the version and the decision records agree with each other.

A release moves the changelog's "Unreleased" notes under a new version,
raises ``version`` in ``pyproject.toml`` (what ``fleet --version`` prints
once installed) and the chart's ``appVersion`` to it, and tags the commit
``vX.Y.Z`` (README, "Releasing").  Every decision record says under its
title whether it is current, amended or superseded, and the records' index
(``docs/decisions/README.md``) lists each one.
"""

from __future__ import annotations

import re
import tomllib

from tests import paths

VERSION_HEADING = re.compile(r"^## (\d+)\.(\d+)\.(\d+) — .+ \(\d{4}-\d{2}-\d{2}\)$")


def _project_version() -> str:
    with (paths.ROOT / "pyproject.toml").open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert isinstance(version, str)
    return version


def _headings() -> list[str]:
    text = (paths.ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.startswith("## ")]


def test_the_changelog_has_unreleased_notes_on_top_then_versions_newest_first() -> None:
    headings = _headings()
    assert headings[0] == "## Unreleased"
    versions = []
    for heading in headings[1:]:
        match = VERSION_HEADING.match(heading)
        assert match, f"not a version heading: {heading!r}"
        versions.append(tuple(int(part) for part in match.groups()))
    assert versions and versions == sorted(versions, reverse=True)
    assert len(set(versions)) == len(versions)


def test_the_project_version_is_the_newest_released_version() -> None:
    newest = VERSION_HEADING.match(_headings()[1])
    assert newest is not None
    assert _project_version() == ".".join(newest.groups())


def test_the_charts_app_version_is_the_project_version() -> None:
    chart = (paths.ROOT / "deploy" / "helm" / "fleet" / "Chart.yaml").read_text(encoding="utf-8")
    assert f'appVersion: "{_project_version()}"' in chart.splitlines()


def test_every_decision_record_says_its_status_and_is_indexed() -> None:
    folder = paths.ROOT / "docs" / "decisions"
    index = (folder / "README.md").read_text(encoding="utf-8")
    records = sorted(folder.glob("[0-9][0-9][0-9][0-9]-*.md"))
    assert records
    for record in records:
        lines = record.read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith(f"# {record.name[:4]} "), record.name
        assert lines[1] == "", record.name
        assert re.match(r"Status: (current|superseded|partly superseded)\b", lines[2]), record.name
        assert f"[{record.name[:4]}]({record.name})" in index, record.name
