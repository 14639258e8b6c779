"""Problem details: the JSON a client gets, the helpers, SpecError mapping, the middleware."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import test_utils, web

from fleet.api import problems
from fleet.api.problems import (
    MAX_FIELD_ERRORS,
    PROBLEM_JSON,
    FieldError,
    Problem,
    ProblemError,
    field_error,
    from_spec_error,
    problem_middleware,
    problem_response,
)
from fleet.manifests.errors import SpecError, SpecIssue


def body_of(problem: Problem) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(problem.to_json())
    return data


def test_absent_members_are_left_out_and_field_errors_keep_their_nulls() -> None:
    problem = problems.bad_request("no", errors=[field_error("bad")])
    assert body_of(problem) == {
        "type": "https://fleet.io/problems/bad-request",
        "title": "Bad request",
        "status": 400,
        "detail": "no",
        "errors": [{"document": None, "kind": None, "name": None, "path": "", "message": "bad"}],
    }


def test_the_response_is_problem_json_with_the_status() -> None:
    problem = problems.not_found("no job default/x", instance="/api/v1/jobs/default/x")
    response = problem_response(problem, headers={"X-Thing": "1"})
    assert response.status == 404
    assert response.content_type == PROBLEM_JSON
    assert response.headers["X-Thing"] == "1"
    assert isinstance(response.body, bytes)
    assert json.loads(response.body)["instance"] == "/api/v1/jobs/default/x"


@pytest.mark.parametrize(
    ("problem", "status", "slug"),
    [
        (problems.bad_request("x"), 400, "bad-request"),
        (problems.not_found("x"), 404, "not-found"),
        (problems.conflict("x"), 409, "conflict"),
        (problems.too_large("x"), 413, "too-large"),
        (problems.unsupported_media_type("text/plain", ["application/yaml"]), 415, "unsupported"),
        (problems.invalid([field_error("x")]), 422, "invalid"),
    ],
)
def test_each_helper_has_its_status_and_type(problem: Problem, status: int, slug: str) -> None:
    assert problem.status == status
    assert problem.type.startswith(problems.TYPE_BASE + slug)
    assert problem.title


def test_unsupported_media_type_says_what_is_read() -> None:
    problem = problems.unsupported_media_type(None, ["application/yaml", "text/yaml"])
    assert problem.detail == (
        "the request body has no media type; send one of application/yaml, text/yaml"
    )


def test_invalid_counts_repeats_the_first_and_caps_the_list() -> None:
    one = problems.invalid([field_error("bad", document=2, kind="PyTorchJob", path="spec")])
    assert one.detail == "1 error; nothing was accepted; first: document 2 (PyTorchJob): spec: bad"
    many = [field_error(f"e{i}", document=i) for i in range(MAX_FIELD_ERRORS + 5)]
    capped = problems.invalid(many)
    assert len(capped.errors) == MAX_FIELD_ERRORS
    assert capped.detail is not None
    assert capped.detail.startswith(f"{MAX_FIELD_ERRORS + 5} errors; nothing was accepted")
    assert capped.detail.endswith(f"(the first {MAX_FIELD_ERRORS} are listed)")


def test_a_spec_error_becomes_one_field_error_per_issue() -> None:
    error = SpecError(
        [
            SpecIssue(0, "", "", "", "YAML syntax error at line 3, column 1: oops"),
            SpecIssue(2, "PyTorchJob", "ns/job", "spec.runPolicy", "unknown field"),
        ]
    )
    problem = from_spec_error(error, instance="/api/v1/submissions")
    assert problem.status == 422 and problem.instance == "/api/v1/submissions"
    assert problem.errors == [
        FieldError(
            document=0,
            kind=None,
            name=None,
            path="",
            message="YAML syntax error at line 3, column 1: oops",
        ),
        FieldError(
            document=2,
            kind="PyTorchJob",
            name="ns/job",
            path="spec.runPolicy",
            message="unknown field",
        ),
    ]
    assert problem.detail == (
        "2 errors; nothing was accepted; first: document 0: "
        "YAML syntax error at line 3, column 1: oops"
    )


def test_a_problem_error_carries_its_problem() -> None:
    problem = problems.conflict("default/x was submitted with another spec")
    error = ProblemError(problem)
    assert error.problem is problem
    assert str(error) == "409 Conflict: default/x was submitted with another spec"


def test_a_generic_problem_uses_the_status_phrase() -> None:
    problem = problems.http_problem(405, instance="/x")
    assert body_of(problem) == {
        "type": "about:blank",
        "title": "Method Not Allowed",
        "status": 405,
        "instance": "/x",
    }


# Middleware ---------------------------------------------------------------------------


async def _refuse(request: web.Request) -> web.Response:
    raise ProblemError(problems.not_found(f"no job {request.match_info['name']}"))


async def _elsewhere(request: web.Request) -> web.Response:
    raise ProblemError(problems.conflict("taken", instance="/somewhere"))


async def _gone(request: web.Request) -> web.Response:
    raise web.HTTPGone(text="that was removed")


async def _moved(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ok")


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@pytest.fixture
async def client() -> AsyncIterator[test_utils.TestClient[web.Request, web.Application]]:
    app = web.Application(middlewares=[problem_middleware])
    app.router.add_get("/jobs/{name}", _refuse)
    app.router.add_get("/elsewhere", _elsewhere)
    app.router.add_get("/gone", _gone)
    app.router.add_get("/moved", _moved)
    app.router.add_get("/ok", _ok)
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        yield client


async def test_a_problem_error_is_answered_with_the_request_path_as_instance(
    client: test_utils.TestClient[web.Request, web.Application],
) -> None:
    response = await client.get("/jobs/x")
    assert response.status == 404
    assert response.content_type == PROBLEM_JSON
    data = await response.json(content_type=PROBLEM_JSON)
    assert data["detail"] == "no job x" and data["instance"] == "/jobs/x"
    response = await client.get("/elsewhere")
    assert (await response.json(content_type=PROBLEM_JSON))["instance"] == "/somewhere"


async def test_aiohttp_errors_become_problems(
    client: test_utils.TestClient[web.Request, web.Application],
) -> None:
    response = await client.get("/nowhere")
    assert response.status == 404 and response.content_type == PROBLEM_JSON
    data = await response.json(content_type=PROBLEM_JSON)
    assert data == {
        "type": "about:blank",
        "title": "Not Found",
        "status": 404,
        "instance": "/nowhere",
    }
    response = await client.post("/ok")
    assert response.status == 405 and response.content_type == PROBLEM_JSON
    assert "GET" in response.headers["Allow"]
    response = await client.get("/gone")
    assert response.status == 410
    assert (await response.json(content_type=PROBLEM_JSON))["detail"] == "that was removed"


async def test_success_and_redirects_pass_through(
    client: test_utils.TestClient[web.Request, web.Application],
) -> None:
    response = await client.get("/ok")
    assert response.status == 200 and await response.json() == {"ok": True}
    response = await client.get("/moved", allow_redirects=False)
    assert response.status == 302 and response.headers["Location"] == "/ok"
