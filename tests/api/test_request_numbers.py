"""Numbers in requests: every query parameter, continue token and cursor is ASCII digits in bounds.

Each place a route reads a number from a request is listed in :data:`PLACES`
with the values it must refuse: Unicode digits that ``str.isdigit()`` accepts
(``²``, ``١٢``), a number of 5,000 digits (``int()`` refuses more than
4,300), signs, exponents, spaces and a trailing newline.  Each must be a 400
problem naming the parameter, never a 500 and never read as another number.
The numbers are read before anything is stored or looked up, so SQLite
alone is enough.  The dashboard's page numbers fall back to page 1.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.core.digits import MAX_DIGITS, parse_digits
from fleet.testing import running
from fleet.testing.tokens import TOKENS, bearer, write_tokens_file
from tests.admin.conftest import YAML, Api, Client
from tests.databases import sqlite_url

HUGE = "9" * 5_000
#: Texts that are no number of any parameter (some of them are to ``str.isdigit()``).
NOT_NUMBERS = {
    "superscript two": "²",
    "arabic-indic twelve": "١٢",
    "fullwidth one": "１",
    "negative": "-1",
    "plus sign": "+1",
    "5000 digits": HUGE,
    "19 digits": "1" * 19,
    "exponent": "1e3",
    "underscore": "1_0",
    "leading space": " 1",
    "trailing newline": "1\n",
    "empty": "",
    "word": "abc",
}


def _token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@dataclass(frozen=True)
class Place:
    """Where a route reads a number: ``param`` of ``method path``, and what else to send."""

    method: str
    path: str
    param: str
    #: Below the parameter's lower bound (None: there is no such value to send).
    too_low: str | None = "0"
    #: Wraps a value as the parameter carries it (a continue token's number).
    wrap: Callable[[str], str] = str
    header: bool = False
    kw: tuple[tuple[str, Any], ...] = ()


QUOTA = (("data", "not read"), ("headers", YAML))
PLACES = {
    "jobs limit": Place("GET", "/api/v1/jobs", "limit"),
    "jobs continue": Place("GET", "/api/v1/jobs", "continue", None, lambda n: _token(f"job:{n}")),
    "tree history limit": Place("GET", "/api/v1/quota-tree/history", "limit"),
    "tree history continue": Place(
        "GET", "/api/v1/quota-tree/history", "continue", None, lambda n: _token(f"tree:{n}")
    ),
    "audit limit": Place("GET", "/api/v1/audit", "limit"),
    "audit continue": Place(
        "GET", "/api/v1/audit", "continue", None, lambda n: _token(f"audit:{n}")
    ),
    "simulation horizon": Place(
        "POST", "/api/v1/quota-tree?dryRun=Simulate", "horizon", "59", kw=QUOTA
    ),
    "events after": Place("GET", "/api/v1/events", "after", None),
    "events Last-Event-ID": Place("GET", "/api/v1/events", "Last-Event-ID", None, header=True),
    "cell map limit": Place("GET", "/api/v1/clusters/east/cells", "limit"),
    "cell map continue": Place(
        "GET", "/api/v1/clusters/east/cells", "continue", None, lambda n: f"node:{n}"
    ),
}


@pytest.fixture
async def api(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], tmp_path: Path
) -> AsyncIterator[Api]:
    clock = VirtualClock(1_000.0)
    tokens = write_tokens_file(tmp_path / "t.yaml")
    app = create_app(running.settings(sqlite_url(tmp_path), tokens_file=tokens), clock=clock)
    yield Api(await aiohttp_client(app), clock)


@pytest.mark.parametrize("place", PLACES.values(), ids=PLACES.keys())
async def test_a_number_that_is_not_ascii_digits_in_bounds_is_a_400_naming_it(
    api: Api, place: Place
) -> None:
    values = dict(NOT_NUMBERS)
    if place.too_low is not None:
        values["below the bound"] = place.too_low
    if place.header:  # HTTP strips a header's spaces; a newline cannot be sent; "" is absent
        skip = ("leading space", "trailing newline", "empty")
        values = {k: v for k, v in values.items() if k not in skip}
    for label, value in values.items():
        raw = place.wrap(value)
        headers = dict(bearer("admin"))
        kw = dict(place.kw)
        headers.update(kw.pop("headers", {}))
        if place.header:
            headers[place.param] = raw
            params = {}
        else:
            params = {place.param: raw}
        resp = await api.client.request(
            place.method, place.path, params=params, headers=headers, **kw
        )
        text = await resp.text()
        assert resp.status == 400, f"{label}: {resp.status} {text[:300]}"
        assert resp.content_type == "application/problem+json", label
        assert place.param in (await resp.json())["detail"], f"{label}: {text[:300]}"


async def _login(api: Api) -> None:
    url = api.client.make_url("/")
    resp = await api.client.post(
        "/ui/login",
        data={"token": TOKENS["admin"], "next": "/ui/"},
        headers={"Origin": f"{url.scheme}://{url.host}:{url.port}"},
        allow_redirects=False,
    )
    assert resp.status == 303


async def test_a_page_number_that_is_not_ascii_digits_is_page_one_on_the_dashboard(
    api: Api,
) -> None:
    await _login(api)
    first = await (await api.client.get("/ui/")).text()
    for label, value in {**NOT_NUMBERS, "zero": "0", "a million": "1000000"}.items():
        for path in ("/ui/", "/ui/queues/team-a"):
            resp = await api.client.get(path, params={"page": value})
            assert resp.status == 200, f"{path} {label}: {resp.status}"
            if path == "/ui/":
                assert await resp.text() == first, label


async def test_the_dashboards_event_relay_answers_a_bad_version_with_a_400(api: Api) -> None:
    await _login(api)
    for value in ("²", HUGE, "-1"):
        resp = await api.client.get("/ui/events", params={"after": value})
        assert resp.status == 400, value


@pytest.mark.parametrize(
    ("text", "low", "high", "expected"),
    [
        pytest.param("0", 0, 10, 0, id="zero"),
        pytest.param("007", 0, 10, 7, id="leading zeros"),
        pytest.param("10", 0, 10, 10, id="upper bound"),
        pytest.param("11", 0, 10, None, id="above"),
        pytest.param("1", 2, 10, None, id="below"),
        pytest.param("9" * MAX_DIGITS, 0, 10**MAX_DIGITS, 10**MAX_DIGITS - 1, id="longest"),
        *(
            pytest.param(v, 0, 10**MAX_DIGITS, None, id=k)
            for k, v in NOT_NUMBERS.items()
            if k != "19 digits"
        ),
        pytest.param("1" * 19, 0, 10**20, None, id="19 digits"),
    ],
)
def test_the_one_parser_reads_ascii_digits_only(
    text: str, low: int, high: int, expected: int | None
) -> None:
    assert parse_digits(text, low=low, high=high) == expected
