"""``fleet apply -f TREE``, ``fleet edit quota`` and ``--token`` against a real ``fleet serve``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fleet.cli.main import main
from fleet.service.settings import POLICIES
from fleet.testing import servers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """``fleet serve`` with two tokens; its URL, the admin token, a team-a token."""
    work = tmp_path_factory.mktemp("serve")
    tokens = work / "tokens.yaml"
    made: list[str] = []
    for args in (["ops", "--role", "admin"], ["ci-a", "--role", "team", "--queue", "team-a"]):
        with pytest.MonkeyPatch.context() as mp:
            printed: list[str] = []
            mp.setattr("builtins.print", lambda *a, _to=printed, **k: _to.append(str(a[0])))
            assert main(["token", "create", *args, "--tokens-file", str(tokens)]) == 0
        made.append(printed[0])
    with servers.serving(work, extra=["--tokens-file", str(tokens)]) as server:
        yield server.url, made[0], made[1]
    log = server.log.read_text()
    assert made[0] not in log and made[1] not in log


def fleet(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_apply_a_tree_edit_a_node_and_read_them_back(
    served: tuple[str, str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, admin, _ = served
    tree = yaml.safe_load((POLICIES / "quota" / "team-tree.yaml").read_text())
    tree["spec"]["root"]["children"][1]["children"][1]["max"] = {"nvidia.com/gpu": 4}
    path = tmp_path / "tree.yaml"
    path.write_text(yaml.safe_dump(tree))
    code, out, err = fleet(
        capsys, "apply", "-f", str(path), "--dry-run", "--server", server, "--token", admin
    )
    assert (code, err) == (0, "") and "dry run, nothing changed" in out
    assert "  no running job affected" in out  # it says what it would affect
    code, out, err = fleet(capsys, "apply", "-f", str(path), "--server", server, "--token", admin)
    assert (code, err, out) == (0, "", "quota tree version 2 in force\n")
    monkeypatch.setenv("FLEET_TOKEN", admin)
    code, out, err = fleet(
        capsys, "edit", "quota", "team-a", "--max", "nvidia.com/gpu=16", "--server", server
    )
    assert (code, err, out) == (0, "", "quota tree version 3 in force\n")
    # The queues are the loop's view: read while an iteration runs, it is the last
    # one published, and the next iteration's end publishes the edit.
    deadline = time.monotonic() + 10
    while True:
        code, out, _ = fleet(capsys, "get", "queues", "-o", "json", "--server", server)
        queues = {q["name"]: q for q in json.loads(out)["items"]}
        if queues["team-a"]["max"]["nvidia.com/gpu"] == "16" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert queues["team-a"]["max"]["nvidia.com/gpu"] == "16"
    assert queues["sandbox"]["max"]["nvidia.com/gpu"] == "4"


def test_a_team_token_may_not_edit_and_no_token_is_unauthorized(
    served: tuple[str, str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, _, team = served
    monkeypatch.delenv("FLEET_TOKEN", raising=False)
    code, _, err = fleet(capsys, "edit", "quota", "team-a", "--max", "cpu=1", "--server", server)
    assert code == 1 and "Unauthorized (401)" in err
    code, _, err = fleet(
        capsys, "edit", "quota", "team-a", "--max", "cpu=1", "--server", server, "--token", team
    )
    assert code == 1 and "Forbidden (403)" in err and "ci-a" in err
    code, _, err = fleet(capsys, "edit", "quota", "team-a", "--server", server, "--token", team)
    assert code == 1 and "nothing to change" in err
    code, out, _ = fleet(capsys, "get", "queues", "--server", server, "--token", team)
    assert code == 0 and "team-a" in out


def test_simulate_from_live_sends_the_token_of_the_environment_or_the_context(
    served: tuple[str, str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, admin, _ = served
    tree = tmp_path / "tree.yaml"
    tree.write_text((POLICIES / "quota" / "team-tree.yaml").read_text())
    monkeypatch.delenv("FLEET_TOKEN", raising=False)
    monkeypatch.setenv("FLEET_SERVER", server)
    code, _, err = fleet(capsys, "simulate", "--from-live", "--quota", str(tree))
    assert code == 1 and "Unauthorized (401)" in err
    monkeypatch.setenv("FLEET_TOKEN", admin)
    code, out, err = fleet(capsys, "simulate", "--from-live", "--quota", str(tree))
    assert (code, err) == (0, "") and "Expected wait per queue" in out
    # The same through a context of the config file, the server written without a scheme.
    monkeypatch.delenv("FLEET_TOKEN")
    monkeypatch.delenv("FLEET_SERVER")
    monkeypatch.setenv("FLEET_CONFIG", str(tmp_path / "config.yaml"))
    (tmp_path / "admin-token").write_text(admin + "\n")
    bare = server.removeprefix("http://")
    assert (
        main(["config", "set-context", "live", "--server", bare, "--token-file", "admin-token"])
        == 0
    )
    code, out, err = fleet(capsys, "simulate", "--from-live", "--quota", str(tree))
    assert (code, err) == (0, "") and "Expected wait per queue" in out
    code, out, err = fleet(capsys, "get", "queues", "--context", "live")
    assert (code, err) == (0, "") and "team-a" in out


def test_an_edit_dry_run_shows_the_node_before_and_after(
    served: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    server, admin, _ = served
    code, out, err = fleet(
        capsys, "edit", "quota", "team-c", "--min", "cpu=200", "--dry-run",
        "--server", server, "--token", admin,
    )  # fmt: skip
    assert (code, err) == (0, "")
    assert out == (
        "quota node team-c: dry run, nothing changed; the change would set\n"
        "  min cpu: 256 -> 200\n"
        "and would affect\n"
        "  no running job affected\n"
    )
