"""``fleet serve``'s history flags: read, checked, and refused before anything starts."""

from __future__ import annotations

import pytest

from fleet.cli import serve
from fleet.cli.main import build_parser, main
from fleet.service.settings import Settings


def test_the_history_settings_default_to_a_minute_and_a_week() -> None:
    settings = Settings()
    assert (settings.history_interval, settings.history_retention) == (60.0, 7 * 24 * 3600.0)
    args = build_parser().parse_args(
        ["serve", "--history-interval", "15", "--history-retention", "48h"]
    )
    assert (args.history_interval, args.history_retention) == (15.0, "48h")
    assert args.handler is serve.run


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--history-retention", "a week"], "--history-retention: 'a week' is not a duration"),
        (["--history-interval", "-1"], "history_interval"),
        (["--history-retention", "0s"], "history_retention"),
    ],
)
def test_bad_history_flags_are_refused_in_one_line(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", *flags]) == 1
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1
