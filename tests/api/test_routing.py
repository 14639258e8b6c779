"""Each route is declared once: the router, the OpenAPI document and the parsing come from it.

The service's own application is checked route by route against the
declarations (every served API route has exactly one, and the document shows
it with its declared parameters), and a declaration planted in a test
application gets both its document entry and its parameters read, within
its bounds, by the one parser, with the service's problem answers.
"""

from __future__ import annotations

import enum
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pytest
from aiohttp import test_utils, web

from fleet.api.app import create_app
from fleet.api.openapi import openapi_document
from fleet.api.problems import problem_middleware
from fleet.api.routes import ROUTES
from fleet.api.routing import Reply, RouteTable, add_routes, path, query
from fleet.testing import running
from tests.databases import sqlite_url

#: What the application serves without a declaration: the dashboard's pages and metrics.
UNDECLARED = ("/ui", "/favicon.ico", "/metrics")


def test_every_served_api_route_has_exactly_one_declaration_and_is_documented(
    tmp_path: Path,
) -> None:
    app = create_app(running.settings(sqlite_url(tmp_path)))
    declared = {r.operation_id: r for r in ROUTES}
    assert len(declared) == len(ROUTES)
    served: Counter[str] = Counter()
    for aiohttp_route in app.router.routes():
        canonical = aiohttp_route.resource.canonical if aiohttp_route.resource else ""
        if canonical.startswith(UNDECLARED):
            continue
        name = aiohttp_route.name
        assert name in declared, (aiohttp_route.method, canonical)
        r = declared[name]
        assert (aiohttp_route.method, canonical) == (r.method, r.path)
        served[name] += 1
    assert served == dict.fromkeys(declared, 1)
    document = openapi_document(ROUTES)
    for r in ROUTES:
        operation = document["paths"][r.path][r.method.lower()]
        assert operation["operationId"] == r.operation_id
        documented = [(p["name"], p["in"]) for p in operation.get("parameters", [])]
        assert documented == [(p.name, p.location) for p in r.parameters], r.operation_id
        for p, doc in zip(r.parameters, operation.get("parameters", []), strict=True):
            if p.type is int:
                assert (doc["schema"]["minimum"], doc["schema"]["maximum"]) == (p.low, p.high)
            if p.default is not None:
                assert doc["schema"]["default"] == p.default


# A planted declaration -------------------------------------------------------------------


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


PLANTED = RouteTable()


@PLANTED.route(
    "GET",
    "/things/{thing}",
    "getThing",
    "A thing",
    "service",
    parameters=(
        path("thing", "The thing."),
        query("count", "How many.", int, default=3, low=2, high=5),
        query("colour", "Which colour.", Colour),
        query("mode", "The one mode.", Literal["Fast"], invalid="mode must be Fast", single=True),
        query("after", "A version.", int, low=0, high=9, header="X-After"),
        query("dryRun", "A choice the handler sees as dry_run.", Literal["All"]),
        query("continue", "Text, as given."),
    ),
    replies=(Reply(200, "The arguments."),),
)
async def echo(
    request: web.Request,
    *,
    thing: str,
    count: int,
    colour: Colour | None,
    mode: str | None,
    after: int | None,
    dry_run: str | None,
    continue_: str | None,
) -> web.Response:
    values = {
        "thing": thing,
        "count": count,
        "colour": None if colour is None else colour.value,
        "mode": mode,
        "after": after,
        "dry_run": dry_run,
        "continue": continue_,
    }
    return web.json_response(values)


def test_a_declaration_makes_its_document_entry() -> None:
    doc = openapi_document(PLANTED, title="T", version="1")
    operation = doc["paths"]["/things/{thing}"]["get"]
    assert operation["operationId"] == "getThing"
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert list(parameters) == ["thing", "count", "colour", "mode", "after", "dryRun", "continue"]
    assert parameters["thing"]["in"] == "path" and parameters["thing"]["required"] is True
    assert parameters["count"]["schema"] == {
        "type": "integer",
        "minimum": 2,
        "maximum": 5,
        "default": 3,
    }
    assert parameters["count"]["description"] == "How many."
    assert parameters["mode"]["schema"] == {"const": "Fast", "type": "string"}


async def _call(client: test_utils.TestClient[Any, Any], target: str, **kw: Any) -> Any:
    response = await client.get(target, **kw)
    body = await response.json(content_type=None)
    return response.status, body


async def test_a_declaration_makes_its_parsing_with_the_problem_answers() -> None:
    app = web.Application(middlewares=[problem_middleware])
    add_routes(app.router, PLANTED)
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        status, body = await _call(client, "/things/a")
        assert status == 200
        assert body == {
            "thing": "a",
            "count": 3,
            "colour": None,
            "mode": None,
            "after": None,
            "dry_run": None,
            "continue": None,
        }
        query = "count=5&colour=blue&mode=Fast&after=7&dryRun=All&continue=x"
        status, body = await _call(client, f"/things/b?{query}")
        assert status == 200
        assert body == {
            "thing": "b",
            "count": 5,
            "colour": "blue",
            "mode": "Fast",
            "after": 7,
            "dry_run": "All",
            "continue": "x",
        }
        # The header counts instead of the query parameter when it is sent.
        status, body = await _call(client, "/things/c?after=x", headers={"X-After": "4"})
        assert (status, body["after"]) == (200, 4)
        refused = {
            "count=6": "query parameter count must be an integer from 2 to 5",
            "count=1": "query parameter count must be an integer from 2 to 5",
            "count=%C2%B2": "query parameter count must be an integer from 2 to 5",
            "count=-3": "query parameter count must be an integer from 2 to 5",
            "colour=green": "unknown colour 'green'; colours: red, blue",
            "mode=Slow": "mode must be Fast",
            "mode=Fast&mode=Fast": "mode must be Fast",
            "dryRun=Some": "query parameter dryRun must be All",
            "after=10": "query parameter after must be an integer from 0 to 9",
        }
        for given, detail in refused.items():
            status, body = await _call(client, f"/things/d?{given}")
            assert status == 400, given
            assert (body["title"], body["status"], body["detail"]) == (
                "Bad request",
                400,
                detail,
            ), given
        status, body = await _call(client, "/things/e", headers={"X-After": "99"})
        assert (status, body["detail"]) == (400, "header X-After must be an integer from 0 to 9")


def test_a_declaration_that_does_not_fit_its_handler_or_path_is_refused() -> None:
    table = RouteTable()

    async def handler(request: web.Request, *, name: str) -> web.Response:
        raise AssertionError  # pragma: no cover

    ok = Reply(200, "ok")
    with pytest.raises(ValueError, match="the handler takes"):
        table.route("GET", "/x", "x", "X", "service", replies=(ok,))(handler)
    with pytest.raises(ValueError, match="path parameters"):
        table.route(
            "GET", "/x", "x", "X", "service", parameters=(path("name", "n"),), replies=(ok,)
        )(handler)
    with pytest.raises(ValueError, match="has bounds"):
        query("n", "A number without bounds.", int)
    table.route(
        "GET", "/x/{name}", "x", "X", "service", parameters=(path("name", "n"),), replies=(ok,)
    )(handler)
    assert [r.operation_id for r in table] == ["x"]
