"""The OpenAPI document: valid 3.1, every served route of the design, schemas from the models."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from aiohttp import test_utils, web
from openapi_spec_validator import validate

from fleet.api import openapi, schemas
from fleet.api.openapi import REF_TEMPLATE, openapi_document
from fleet.api.problems import PROBLEM_JSON, Problem
from fleet.api.routes import ROUTES, route
from fleet.api.routing import JOB_PATH, Reply, RouteTable, add_routes
from fleet.core.lifecycle import JobState

#: The routes of docs/design/api-and-access.md, *The route table* (``GET /metrics``
#: is kept out of it and of the OpenAPI document).
DESIGN_ROUTES = {
    ("GET", "/api/v1/history"),
    ("PUT", "/api/v1/quota-tree"),
    ("PATCH", "/api/v1/quota-tree/nodes/{name}"),
    ("GET", "/api/v1/quota-tree/history"),
    ("PUT", "/api/v1/clusters/{name}/nodes/{node}/health"),
    ("PUT", "/api/v1/clusters/{name}"),
    ("DELETE", "/api/v1/clusters/{name}"),
    ("GET", "/api/v1/audit"),
    ("POST", "/api/v1/submissions"),
    ("GET", "/api/v1/jobs"),
    ("GET", "/api/v1/jobs/{namespace}/{name}"),
    ("GET", "/api/v1/job-events"),
    ("DELETE", "/api/v1/jobs/{namespace}/{name}"),
    ("GET", "/api/v1/policies"),
    ("GET", "/api/v1/policies/{namespace}/{name}"),
    ("DELETE", "/api/v1/policies/{namespace}/{name}"),
    ("GET", "/api/v1/queues"),
    ("GET", "/api/v1/queues/{name}"),
    ("GET", "/api/v1/quota-tree"),
    ("GET", "/api/v1/clusters"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/api/v1/openapi.json"),
    ("POST", "/api/v1/quota-tree"),  # dryRun=Simulate: what a proposed tree would do
    # the dashboard's read routes (fleet.api.live)
    ("GET", "/api/v1/whoami"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/clusters/{name}/cells"),
    ("GET", "/api/v1/jobs/{namespace}/{name}/submitted"),
}
NOT_SERVED = {("GET", "/metrics")}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi_document(ROUTES)


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def test_the_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    assert document["openapi"] == "3.1.0"
    validate(document)
    json.dumps(document, allow_nan=False)


def test_every_served_route_of_the_design_is_there(document: dict[str, Any]) -> None:
    served = {(method, path) for method, path, _ in operations(document)}
    assert served == DESIGN_ROUTES
    assert not served & NOT_SERVED


def test_operation_ids_are_unique_and_name_the_routes(document: dict[str, Any]) -> None:
    ids = [op["operationId"] for _, _, op in operations(document)]
    assert len(ids) == len(set(ids)) == len(ROUTES)
    for r in ROUTES:
        assert route(r.operation_id) is r
    with pytest.raises(KeyError):
        route("nope")


def test_path_parameters_match_the_path_templates(document: dict[str, Any]) -> None:
    for _, path, op in operations(document):
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
        assert declared == set(re.findall(r"\{(\w+)\}", path)), path


def _refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref":
                yield item
            else:
                yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def test_every_reference_resolves(document: dict[str, Any]) -> None:
    components = document["components"]["schemas"]
    refs = set(_refs(document))
    assert refs
    for ref in refs:
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in components, ref


def test_the_component_schemas_are_the_models_own(document: dict[str, Any]) -> None:
    components = document["components"]["schemas"]
    for model in (*schemas.RESPONSE_MODELS, Problem):
        own = model.model_json_schema(ref_template=REF_TEMPLATE, mode="serialization")
        defs = own.pop("$defs", {})
        assert components[model.__name__] == own, model.__name__
        for name, schema in defs.items():
            assert components[name] == schema, name


def test_errors_are_problem_details_and_api_routes_take_a_bearer_token(
    document: dict[str, Any],
) -> None:
    for method, path, op in operations(document):
        for status, answer in op["responses"].items():
            if int(status) >= 400 and status != "503":
                assert answer["content"] == {
                    PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}
                }, (method, path, status)
        r = route(op["operationId"])
        if r.access == "open":
            assert op["security"] == [] and "401" not in op["responses"], (method, path)
        else:
            assert op["security"] == [{"bearer": []}], (method, path)
            assert "401" in op["responses"], (method, path)
        # 403 is documented exactly where a valid token can be refused.
        assert ("403" in op["responses"]) == (r.access in ("team", "admin")), (method, path)
    schemes = document["components"]["securitySchemes"]
    assert schemes == {"bearer": {"type": "http", "scheme": "bearer"}}


def test_the_submission_route_reads_yaml_and_lists_its_problems(
    document: dict[str, Any],
) -> None:
    op = document["paths"]["/api/v1/submissions"]["post"]
    assert set(op["requestBody"]["content"]) == {
        "application/yaml",
        "application/x-yaml",
        "text/yaml",
    }
    assert {"201", "400", "409", "413", "415", "422"} <= set(op["responses"])
    created = op["responses"]["201"]["content"]["application/json"]["schema"]
    assert created == {"$ref": "#/components/schemas/SubmissionResult"}


def test_the_job_list_parameters(document: dict[str, Any]) -> None:
    op = document["paths"]["/api/v1/jobs"]["get"]
    params = {p["name"]: p for p in op["parameters"]}
    assert set(params) == {"queue", "state", "namespace", "cluster", "uid", "limit", "continue"}
    assert params["state"]["schema"]["enum"] == [state.value for state in JobState]
    assert params["limit"]["schema"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 1000,
        "default": 100,
    }


# Registering handlers -----------------------------------------------------------------

PLANTED = RouteTable()


@PLANTED.route(
    "GET", "/healthz", "liveness", "Live", "service", access="open", replies=(Reply(200, "ok"),)
)
async def _live(request: web.Request) -> web.Response:
    return schemas.json_response(schemas.Liveness())


@PLANTED.route(
    "GET",
    "/api/v1/openapi.json",
    "openapi",
    "The document",
    "service",
    access="open",
    replies=(Reply(200, "ok"),),
)
async def _openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document(ROUTES))


@PLANTED.route(
    "GET",
    "/api/v1/jobs/{namespace}/{name}",
    "getJob",
    "A job",
    "jobs",
    parameters=JOB_PATH,
    replies=(Reply(200, "ok"),),
)
async def _job(request: web.Request, *, namespace: str, name: str) -> web.Response:
    return web.json_response({"namespace": namespace, "name": name})


async def test_handlers_are_registered_by_operation_id() -> None:
    app = web.Application()
    add_routes(app.router, PLANTED)
    assert str(app.router["getJob"].url_for(namespace="a", name="b")) == "/api/v1/jobs/a/b"
    async with test_utils.TestClient(test_utils.TestServer(app)) as client:
        response = await client.get("/healthz")
        assert (await response.json())["status"] == "ok"
        response = await client.get("/api/v1/jobs/team-a/train")
        assert await response.json() == {"namespace": "team-a", "name": "train"}
        response = await client.get("/api/v1/openapi.json")
        validate(await response.json())
        response = await client.delete("/api/v1/jobs/team-a/train")
        assert response.status == 405


def test_a_route_declared_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"GET /healthz \(liveness\) is declared twice"):
        add_routes(web.Application().router, [*PLANTED, route("liveness")])
    app = web.Application()
    add_routes(app.router, ROUTES)
    assert len(app.router.routes()) >= len(ROUTES)


def test_a_smaller_table_makes_a_smaller_document() -> None:
    doc = openapi_document([route("liveness")], title="T", version="1")
    assert list(doc["paths"]) == ["/healthz"]
    assert doc["info"]["title"] == "T" and doc["info"]["version"] == "1"
    assert set(doc["components"]["schemas"]) == {"Liveness"}
    assert [t["name"] for t in doc["tags"]] == ["service"]
    validate(doc)


def test_the_models_of_the_table_are_pydantic_models() -> None:
    for r in ROUTES:
        for reply in r.replies:
            body = reply.body
            if body is None or body in (str, dict[str, Any]):
                continue
            assert isinstance(body, type) and issubclass(body, pydantic.BaseModel), r
    assert openapi.OPENAPI_VERSION == "3.1.0"
