"""The OpenAPI 3.1 document, built from the routes' declarations.

Theory of operation: every route is declared once, beside its handler
(:mod:`fleet.api.routing`: method, path, operation id, summary, parameters
with their types and bounds, the media types of the request body, and every
answer by status: a pydantic model from :mod:`fleet.api.schemas` for JSON,
:class:`~fleet.api.problems.Problem` as ``application/problem+json`` for
errors, or a plain type for YAML and text bodies).  :func:`openapi_document`
writes the document of the declarations it is given (:data:`fleet.api.routes.ROUTES`:
every route the service serves), so what is served and what is documented
come from one place.

:func:`openapi_document` writes no schema by hand: every model's schema comes
from pydantic (``models_json_schema``, the many-model form of
``model_json_schema``, with ``ref_template="#/components/schemas/{model}"``)
and lands in ``components.schemas``; parameters and plain bodies get theirs
from a ``TypeAdapter`` (a number's from its declared bounds).  JSON Schema
2020-12, which pydantic writes, is OpenAPI 3.1's own dialect.  Routes under
``/api/v1`` take a bearer token (reading is open to every token; a team
token submits and cancels only in its queues), so they list 401 and, when
they change something, 403.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable
from typing import Any, Final

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from fleet.api.routing import Parameter, Route

#: Where ``$ref`` points: the document's ``components.schemas``.
REF_TEMPLATE: Final = "#/components/schemas/{model}"
OPENAPI_VERSION: Final = "3.1.0"
BEARER: Final = "bearer"
#: Whether the service checks bearer tokens (it does: fleet.api.auth).
ACCESS_CONTROL: Final = True

TAGS: Final = {
    "jobs": "Submitting, listing, describing and cancelling jobs of every kind Fleet runs.",
    "policies": "Standing PropagationPolicies, which select the jobs of their namespaces.",
    "queues": "The quota tree and its queues.",
    "clusters": "Member clusters.",
    "service": "Health and this document.",
}


# The document -------------------------------------------------------------------------


def _models(routes: Iterable[Route]) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    for r in routes:
        for reply in r.replies:
            body = reply.body
            if isinstance(body, type) and issubclass(body, BaseModel) and body not in found:
                found.append(body)
    return found


def _type_schema(tp: Any) -> dict[str, Any]:
    schema: dict[str, Any] = TypeAdapter(tp).json_schema(ref_template=REF_TEMPLATE)
    return schema


def _parameter(p: Parameter, defs: dict[str, Any]) -> dict[str, Any]:
    schema = _type_schema(p.schema_type)
    defs.update(schema.pop("$defs", {}))
    if p.default is not None:
        schema["default"] = p.default
    return {
        "name": p.name,
        "in": p.location,
        "description": p.description,
        "required": p.required or p.location == "path",
        "schema": schema,
    }


def openapi_document(
    routes: Iterable[Route], *, title: str = "Fleet", version: str | None = None
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (JSON data)."""
    routes = tuple(routes)
    models = _models(routes)
    mode: JsonSchemaMode = "serialization"
    refs, top = models_json_schema([(m, mode) for m in models], ref_template=REF_TEMPLATE)
    components: dict[str, Any] = dict(top.get("$defs", {}))
    paths: dict[str, dict[str, Any]] = {}
    for r in routes:
        operation: dict[str, Any] = {
            "operationId": r.operation_id,
            "summary": r.summary,
            "tags": [r.tag],
            "security": [{BEARER: []}] if r.auth and ACCESS_CONTROL else [],
        }
        if r.description:
            operation["description"] = r.description
        if r.parameters:
            operation["parameters"] = [_parameter(p, components) for p in r.parameters]
        if r.body is not None:
            schema = _type_schema(r.body.type)
            operation["requestBody"] = {
                "required": True,
                "description": r.body.description,
                "content": {media: {"schema": schema} for media in r.body.media_types},
            }
        responses: dict[str, Any] = {}
        for reply in r.replies:
            if reply.status in (401, 403) and not ACCESS_CONTROL:
                continue
            answer: dict[str, Any] = {"description": reply.description}
            if reply.body is not None:
                if (reply.body, mode) in refs:
                    schema = dict(refs[reply.body, mode])
                else:
                    schema = _type_schema(reply.body)
                    components.update(schema.pop("$defs", {}))
                answer["content"] = {media: {"schema": schema} for media in reply.media_types}
            responses[str(reply.status)] = answer
        operation["responses"] = responses
        paths.setdefault(r.path, {})[r.method.lower()] = operation
    used_tags = {r.tag for r in routes}
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": title,
            "version": version or _version(),
            "description": "Multi-cluster queueing and quota federation for GPU training jobs. "
            "Errors are RFC 9457 problem details (application/problem+json) with the field "
            "path of every error.",
        },
        "tags": [{"name": t, "description": d} for t, d in TAGS.items() if t in used_tags],
        "paths": paths,
        "components": {
            "schemas": dict(sorted(components.items())),
            **(
                {"securitySchemes": {BEARER: {"type": "http", "scheme": "bearer"}}}
                if ACCESS_CONTROL
                else {}
            ),
        },
    }


def _version() -> str:
    try:
        return importlib.metadata.version("fleet")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"
