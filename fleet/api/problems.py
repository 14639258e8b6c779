"""RFC 9457 problem details: every error the API answers with, and where it comes from.

Theory of operation: an error is a :class:`Problem` (``type``, ``title``,
``status``, ``detail``, ``instance``) with one extension, ``errors``: a list
of :class:`FieldError`, each naming the document (0-based index in the YAML
stream, or null), its kind and name, the dotted field path and what is wrong,
so a client can point at every mistake of a request at once.  Each kind of
problem has its own ``type`` URI under :data:`TYPE_BASE` and a fixed
``title``; ``detail`` says what happened this time.  Generic HTTP errors
(a route that does not exist, a method a route does not have) use
``about:blank`` with the status phrase as title, as RFC 9457 recommends.

Code that finds a problem raises :class:`ProblemError`; a handler or
:func:`problem_middleware` turns it into a response with
:func:`problem_response` (``application/problem+json``, with the headers the error carries, such
as ``Retry-After``; members that are
null, and ``errors`` when it is empty, are left out: the RFC wants absent
members rather than nulls).  The
helpers build the common ones (400, 404, 409, 413, 415, 422, 429), and
:func:`from_spec_error` turns a :class:`~fleet.manifests.errors.SpecError`
(every issue of a set of YAML documents) into a 422 with one field error per
issue.  At most :data:`MAX_FIELD_ERRORS` field errors are listed: the detail
says how many there were.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Annotated, Final

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from fleet.manifests.errors import SpecError

#: The media type of every error response.
PROBLEM_JSON: Final = "application/problem+json"
#: Where Fleet's problem types live (``TYPE_BASE + "invalid"``, ...).
TYPE_BASE: Final = "https://fleet.io/problems/"
#: Field errors listed in one response at most.
MAX_FIELD_ERRORS: Final = 100


class FieldError(BaseModel):
    """One thing wrong with one field of one submitted document."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    document: Annotated[int, Field(ge=0)] | None = Field(
        default=None,
        description="0-based index of the document in the YAML stream; null when the error "
        "concerns the request as a whole.",
    )
    kind: str | None = Field(
        default=None, description="The document's kind (PyTorchJob, ...); null when unknown."
    )
    name: str | None = Field(
        default=None,
        description="namespace/name of a namespaced object, name otherwise; null when unknown.",
    )
    path: str = Field(
        default="",
        description="Dotted field path with [i] for list items; empty for the whole document.",
    )
    message: str = Field(description="What is wrong, in words a YAML author uses.")

    def describe(self) -> str:
        """One line: ``document 2 (PyTorchJob default/x): spec.path: message``."""
        what = " ".join(part for part in (self.kind, self.name) if part)
        where = "request" if self.document is None else f"document {self.document}"
        where += f" ({what})" if what else ""
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class Problem(BaseModel):
    """An RFC 9457 problem details object, with field errors as an extension."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str = Field(default="about:blank", description="URI that identifies the kind of problem.")
    title: str = Field(description="Short summary of the kind of problem; the same every time.")
    status: Annotated[int, Field(ge=400, le=599)] = Field(description="The HTTP status code.")
    detail: str | None = Field(
        default=None, description="What went wrong this time, for a human reader."
    )
    instance: str | None = Field(
        default=None, description="URI reference of the request that went wrong."
    )
    errors: list[FieldError] = Field(
        default_factory=list,
        description=f"Every field error found (at most {MAX_FIELD_ERRORS}); "
        "empty for problems that concern no field.",
    )

    def to_json(self) -> bytes:
        """The response body: null members and an empty ``errors`` are left out."""
        data = {k: v for k, v in self.model_dump(mode="json").items() if v not in (None, [])}
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class ProblemError(Exception):
    """Raised to answer a request with ``problem`` (and ``headers``: ``Retry-After``...)."""

    def __init__(self, problem: Problem, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{problem.status} {problem.title}: {problem.detail or ''}".rstrip(": "))
        self.problem = problem
        self.headers = dict(headers or {})


def problem_response(problem: Problem, *, headers: Mapping[str, str] | None = None) -> web.Response:
    """``problem`` as an ``application/problem+json`` response with its status."""
    return web.Response(
        status=problem.status,
        body=problem.to_json(),
        content_type=PROBLEM_JSON,
        headers=headers,
    )


# The common problems ------------------------------------------------------------------


def _problem(
    slug: str,
    title: str,
    status: HTTPStatus,
    detail: str | None,
    instance: str | None,
    errors: Sequence[FieldError] = (),
) -> Problem:
    return Problem(
        type=TYPE_BASE + slug,
        title=title,
        status=int(status),
        detail=detail,
        instance=instance,
        errors=list(errors),
    )


def bad_request(
    detail: str, *, errors: Sequence[FieldError] = (), instance: str | None = None
) -> Problem:
    """400: a request that cannot be read at all (not UTF-8, a malformed parameter)."""
    return _problem("bad-request", "Bad request", HTTPStatus.BAD_REQUEST, detail, instance, errors)


def not_found(detail: str, *, instance: str | None = None) -> Problem:
    """404: the named job, queue or cluster does not exist."""
    return _problem("not-found", "Not found", HTTPStatus.NOT_FOUND, detail, instance)


def conflict(
    detail: str, *, errors: Sequence[FieldError] = (), instance: str | None = None
) -> Problem:
    """409: the request contradicts what is stored (a job resubmitted with another spec)."""
    return _problem("conflict", "Conflict", HTTPStatus.CONFLICT, detail, instance, errors)


def too_large(
    detail: str, *, errors: Sequence[FieldError] = (), instance: str | None = None
) -> Problem:
    """413: the request body is larger than the server reads."""
    return _problem(
        "too-large",
        "Content too large",
        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
        detail,
        instance,
        errors,
    )


def unsupported_media_type(
    media_type: str | None, supported: Iterable[str], *, instance: str | None = None
) -> Problem:
    """415: a request body of a media type the route does not read."""
    given = f"media type {media_type!r}" if media_type else "no media type"
    detail = f"the request body has {given}; send one of {', '.join(supported)}"
    return _problem(
        "unsupported-media-type",
        "Unsupported media type",
        HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
        detail,
        instance,
    )


def too_many_requests(detail: str, *, instance: str | None = None) -> Problem:
    """429: the caller holds as many of something (streams, simulations) as it may."""
    return _problem(
        "too-many-requests", "Too many requests", HTTPStatus.TOO_MANY_REQUESTS, detail, instance
    )


def invalid(
    errors: Sequence[FieldError], *, detail: str | None = None, instance: str | None = None
) -> Problem:
    """422: the request was read but its content is not acceptable; nothing was done.

    Lists at most :data:`MAX_FIELD_ERRORS` errors; the default detail counts
    them and repeats the first, so the detail alone tells what is wrong.
    """
    shown = list(errors)[:MAX_FIELD_ERRORS]
    if detail is None:
        detail = _count(len(errors)) + "; nothing was accepted"
        if shown:
            detail += f"; first: {shown[0].describe()}"
        if len(errors) > len(shown):
            detail += f" (the first {len(shown)} are listed)"
    return _problem(
        "invalid", "Invalid content", HTTPStatus.UNPROCESSABLE_ENTITY, detail, instance, shown
    )


def _count(n: int) -> str:
    return "1 error" if n == 1 else f"{n} errors"


def http_problem(status: int, detail: str | None = None, *, instance: str | None = None) -> Problem:
    """A generic problem (``about:blank``) for any HTTP error status."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    return Problem(status=status, title=title, detail=detail, instance=instance)


def field_error(
    message: str,
    *,
    document: int | None = None,
    kind: str = "",
    name: str = "",
    path: str = "",
) -> FieldError:
    """A field error; empty kind and name mean unknown (null)."""
    return FieldError(
        document=document, kind=kind or None, name=name or None, path=path, message=message
    )


def from_spec_error(error: SpecError, *, instance: str | None = None) -> Problem:
    """A 422 with one field error per issue (document, kind, name, path, message).

    The detail repeats the first issue as one line, so a reader of the status
    line alone still learns what is wrong.
    """
    issues = error.issues
    errors = [
        field_error(i.message, document=i.document, kind=i.kind, name=i.name, path=i.path)
        for i in issues
    ]
    detail = None
    if issues:
        detail = f"{_count(len(issues))}; nothing was accepted; first: {issues[0]}"
        if len(issues) > MAX_FIELD_ERRORS:
            detail += f" (the first {MAX_FIELD_ERRORS} are listed)"
    return invalid(errors, detail=detail, instance=instance)


# Middleware ---------------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def problem_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answers a :class:`ProblemError`, and aiohttp's own HTTP errors, as problem details.

    The request's path becomes the problem's ``instance`` when it has none; an
    ``Allow`` header (405) is kept.  Other exceptions are left to aiohttp.
    """
    try:
        return await handler(request)
    except ProblemError as e:
        problem = e.problem
        if problem.instance is None:
            problem = problem.model_copy(update={"instance": request.path})
        return problem_response(problem, headers=e.headers or None)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        headers = {"Allow": e.headers["Allow"]} if "Allow" in e.headers else None
        default = f"{e.status}: {e.reason}"
        detail = e.text if e.text and e.text != default else None
        return problem_response(
            http_problem(e.status, detail, instance=request.path), headers=headers
        )
