"""The command line's kubectl habits, one row each, against a real ``fleet serve``.

Each row is a command line, its exit status, what its output must hold (in
order, where ``ordered``), what it must not, what it holds exactly once and
how wide its lines may be.  ``{dir}`` in a command line is a directory of
manifests the fixture writes.  The rows run in order against one server.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fleet.cli import remote
from fleet.cli.main import build_parser, main
from fleet.testing import servers
from fleet.testing.documents import pytorchjob

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Habit:
    argv: tuple[str, ...]
    code: int = 0
    has: tuple[str, ...] = ()
    lacks: tuple[str, ...] = ()
    ordered: bool = False
    once: tuple[str, ...] = ()
    width: int | None = None
    polls: int = 0  # --watch: stop after this many polls


def job(name: str, namespace: str = "team-a", *, labels: dict[str, str], **kw: object) -> str:
    policy, document = yaml.safe_load_all(pytorchjob(name, namespace=namespace, **kw))  # type: ignore[arg-type]
    document["metadata"]["labels"] = labels
    return yaml.safe_dump(policy) + "---\n" + yaml.safe_dump(document)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A server with jobs of three namespaces (one opportunistic, running), and a
    directory of manifests; the server's URL and the directory."""
    work = tmp_path_factory.mktemp("habits")
    manifests = work / "manifests"
    (manifests / "sub").mkdir(parents=True)
    (manifests / "one.yaml").write_text(pytorchjob("apply-one", duration="1h"))
    (manifests / "two.yml").write_text(pytorchjob("apply-two", duration="1h"))
    (manifests / "notes.txt").write_text("not a manifest")
    (manifests / "sub" / "three.yaml").write_text(pytorchjob("apply-three", duration="1h"))
    (work / "del-3.yaml").write_text(pytorchjob("del-3", duration="1h"))
    seed = [
        job("habit-a", labels={"app": "bert", "tier": "prod"}, gpus=2, duration="1h"),
        job("habit-b", labels={"app": "gpt", "tier": "dev"}, gpus=1, duration="1h"),
        job("habit-c", "team-b", labels={"app": "bert"}, duration="1h"),
        job("habit-opp", "team-c", labels={}, gpus=4, duration="1h", priority_class="oppo"),
        *(pytorchjob(f"del-{i}", duration="1h") for i in (1, 2, 4)),
        (work / "del-3.yaml").read_text(),
    ]
    with servers.serving(work) as server:
        for i, text in enumerate(seed):
            path = work / f"seed-{i}.yaml"
            path.write_text(text)
            assert main(["apply", "-f", str(path), "--server", server.url]) == 0
        for _ in range(100):  # until the opportunistic job holds its GPUs
            _, found = remote.request(server.url, "GET", "/api/v1/jobs?namespace=team-c")
            if found["items"][0]["mode"] == "opportunistic":
                break
            time.sleep(0.1)
        yield server.url, work


HABITS = [
    # Nouns: singular, plural, short; get KIND NAME [NAME...]
    Habit(("get", "job", "team-a/habit-a"), has=("team-a/habit-a",), lacks=("habit-b",)),
    Habit(("get", "jobs", "team-a/habit-b", "team-a/habit-a"), has=("habit-b", "habit-a")),
    Habit(("get", "q", "team-a"), has=("QUEUE", "team-a"), lacks=("research", "team-b")),
    Habit(("get", "queue", "team-a", "-o", "json"), has=('"name": "team-a"',), lacks=("items",)),
    Habit(("get", "cluster", "east"), has=("east",), lacks=("west",)),
    Habit(("get", "policy", "team-a/habit-a"), has=("habit-a",), lacks=("habit-b",)),
    Habit(("get", "job", "team-a/nope"), code=1, has=("job not found: team-a/nope",)),
    Habit(("get", "job", "habit-c"), has=("team-b/habit-c",), lacks=("habit-a",)),
    Habit(("get", "pods"), code=1, has=("unknown kind 'pods'",)),
    # -o wide|yaml|json|name
    Habit(
        ("get", "jobs", "-o", "wide"),
        has=("REASON", "RUN TIME", "PRIORITY", "USER", "KIND", "PyTorchJob", "test (10)"),
    ),
    Habit(("get", "job", "habit-a", "-n", "team-a", "-o", "yaml"), has=("name: habit-a",)),
    Habit(
        ("get", "jobs", "-n", "team-a", "-o", "name"),
        has=("job/team-a/habit-a\n",),
        lacks=("job/team-b/", "NAME"),
    ),
    Habit(("get", "queues", "-o", "name"), has=("queue/team-a\n", "queue/root\n")),
    # -n, -A
    Habit(("get", "jobs", "-n", "team-b"), has=("\nhabit-c ",), lacks=("habit-a", "team-b/")),
    Habit(("get", "jobs", "-A"), has=("team-a/habit-a", "team-b/habit-c", "team-c/habit-opp")),
    # -l
    Habit(("get", "jobs", "-l", "app=bert"), has=("habit-a", "habit-c"), lacks=("habit-b",)),
    Habit(("get", "jobs", "-l", "app!=bert,tier"), has=("habit-b",), lacks=("habit-a",)),
    Habit(("get", "jobs", "-l", "!tier", "-n", "team-b"), has=("habit-c",)),
    Habit(("get", "jobs", "-l", "a=b=c"), code=1, has=("is not key=value",)),
    # --sort-by: a column, a JSON path
    Habit(
        ("get", "jobs", "-n", "team-a", "-l", "app", "--sort-by", "GPUS"),
        has=("habit-b", "habit-a"),
        ordered=True,
    ),
    Habit(
        ("get", "jobs", "-n", "team-a", "-l", "app", "--sort-by", ".metadata.name", "-o", "name"),
        has=("habit-a", "habit-b"),
        ordered=True,
    ),
    Habit(
        ("get", "jobs", "-l", "app", "--sort-by", ".gpus", "-o", "name"),
        has=("habit-b", "habit-c", "habit-a"),
        ordered=False,
    ),
    Habit(("get", "jobs", "--sort-by", "shoe-size"), code=1, has=("not a column",)),
    # get queues: GPU-first, 100 columns, internal resources hidden, opportunistic shown
    Habit(
        ("get", "queues"),
        has=("QUEUE", "GPUS", "BORROWED", "RUNNING", "PENDING", "team-c"),
        lacks=("kube-queue", "cpu="),
        width=100,
    ),
    Habit(
        ("get", "queues", "-o", "wide"),
        has=("CPU", "MEMORY", "OTHER", "MAX JOBS", "WEIGHT", "SHARE", "PARENT", "+4 opp"),
        lacks=("kube-queue/",),
    ),
    Habit(("get", "queues", "-o", "wide", "--show-internal"), has=("kube-queue/max-jobs=",)),
    # describe queue|cluster|job
    Habit(("describe", "queue", "team-a"), has=("Name:", "team-a", "Fair share:")),
    Habit(("describe", "q", "team-a"), has=("Parent:", "research")),
    Habit(
        ("describe", "cluster", "east"),
        has=("Name:           east", "GPUs:", "In use by queue:", "Nodes:", "GPU TYPE"),
    ),
    Habit(("describe", "cluster", "nowhere"), code=1, has=("no member cluster 'nowhere'",)),
    Habit(("describe", "job", "habit-a", "-n", "team-a"), has=("Name:", "habit-a", "Events:")),
    # get events
    Habit(
        ("get", "events"),
        has=("LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE", "job/team-a/habit-a"),
    ),
    Habit(("get", "ev", "-n", "team-b"), has=("job/team-b/habit-c",), lacks=("team-a/",)),
    Habit(
        ("get", "events", "--for", "job/team-a/habit-a"),
        has=("job/team-a/habit-a", "queued in team-a"),
        lacks=("habit-b", "habit-c"),
    ),
    Habit(("get", "events", "-n", "team-a", "--for", "job/habit-b"), has=("habit-b",)),
    # apply -f repeated, directories, -R
    Habit(
        ("apply", "-f", "{dir}/manifests/one.yaml", "-f", "{dir}/manifests/two.yml"),
        has=("job team-a/apply-one created", "job team-a/apply-two created"),
        ordered=True,
    ),
    Habit(
        ("apply", "-f", "{dir}/manifests"),
        has=("team-a/apply-one unchanged", "team-a/apply-two unchanged"),
        lacks=("apply-three", "directory", "notes"),
    ),
    Habit(("apply", "-f", "{dir}/manifests", "-R"), has=("job team-a/apply-three created",)),
    Habit(("apply", "-f", "{dir}/nothing-here"), code=1, has=("nothing-here: no such file",)),
    # delete several, delete -f
    Habit(
        ("delete", "job", "team-a/del-1", "team-a/del-2"),
        has=("job team-a/del-1 cancelled", "job team-a/del-2 cancelled"),
    ),
    Habit(("delete", "jobs", "del-4", "-n", "team-a"), has=("job team-a/del-4 cancelled",)),
    Habit(
        ("delete", "-f", "{dir}/del-3.yaml"),
        has=("propagationpolicy team-a/del-3 deleted", "job team-a/del-3 cancelled"),
    ),
    Habit(("delete", "job", "team-a/nope", "team-a/apply-one"), code=1, has=("(404)",)),
    Habit(("delete", "job"), code=1, has=("KIND NAME",)),
    # --watch prints the table once, then the rows that change
    Habit(("get", "jobs", "--watch", "--interval", "0"), code=130, once=("NAME",), polls=3),
    Habit(("get", "queues", "-w", "--interval", "0"), code=130, once=("QUEUE", "team-a"), polls=3),
    # completion, version
    Habit(("completion", "bash"), has=("complete -F _fleet fleet", "get)", "queues", "--sort-by")),
    Habit(("completion", "zsh"), has=("bashcompinit", "describe)")),
    Habit(("version",), has=("Client Version: fleet ", "Server Version: fleet ")),
    Habit(("version", "--client"), has=("Client Version: fleet ",), lacks=("Server",)),
]


@pytest.mark.parametrize("habit", HABITS, ids=lambda h: " ".join(h.argv))
def test_kubectl_habit(
    served: tuple[str, Path],
    habit: Habit,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, work = served
    argv = [a.replace("{dir}", str(work)) for a in habit.argv]
    if argv[0] in ("get", "describe", "delete", "apply") or argv == ["version"]:
        argv += ["--server", url]
    if habit.polls:
        polls = iter(range(habit.polls))

        def sleep(seconds: float) -> None:
            if next(polls, None) is None:
                raise KeyboardInterrupt

        monkeypatch.setattr(time, "sleep", sleep)
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    text = out + err
    assert code == habit.code, text
    assert "Traceback" not in text
    at = 0
    for wanted in habit.has:
        assert wanted in text, text
        if habit.ordered:
            found = text.find(wanted, at)
            assert found >= at, f"{wanted!r} out of order in\n{text}"
            at = found + len(wanted)
    for unwanted in habit.lacks:
        assert unwanted not in text, text
    for single in habit.once:
        assert text.count(single) == 1, text
    if habit.width is not None:
        assert max(len(line) for line in out.splitlines()) <= habit.width, out


def test_apply_sends_every_file(
    served: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``apply -f a -f b`` sent only b: both are sent, in order."""
    url, work = served
    first, second = work / "first.yaml", work / "second.yaml"
    first.write_text(pytorchjob("twice-a", duration="1h"))
    second.write_text(pytorchjob("twice-b", duration="1h"))
    capsys.readouterr()
    assert main(["apply", "-f", str(first), "-f", str(second), "--server", url]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "job team-a/twice-a created (queue team-a, Queued)",
        "job team-a/twice-b created (queue team-a, Queued)",
    ]


EXPLAINED = (
    *("apply", "get", "describe", "delete", "edit", "completion", "version"),
    *("check", "plan", "serve", "token", "config", "simulate"),
)


def test_every_command_of_the_kubectl_habits_has_a_description_and_an_example() -> None:
    parser = build_parser()
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in EXPLAINED:
        command = sub.choices[name]
        assert command.description, name
        assert command.epilog and command.epilog.startswith("examples:\n"), name
        assert f"fleet {name}" in command.epilog, name
        assert f"fleet {name}" in command.format_help(), name
