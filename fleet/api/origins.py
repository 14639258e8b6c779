"""Which ``Host`` a request may name, which ``Origin`` a write may come from, and whether
the client reached Fleet over TLS.

Theory of operation:

* **No tokens, loopback names only.**  Without a tokens file every caller is
  the admin and Fleet listens on loopback only; but a web page whose name
  an attacker points at 127.0.0.1 (DNS rebinding) would reach it as that
  admin.  The browser then sends the attacker's name as ``Host``, so in
  this mode :func:`host_and_origin` answers any ``Host`` other than
  ``localhost`` or a loopback address literal (``127.0.0.1``, ``[::1]``...),
  with any port, with a 421 problem (Misdirected Request: this server does
  not answer for that name) before any route runs, the dashboard's
  included.  Any port is accepted because a loopback name cannot be
  rebound, and a port forward (``ssh -L``, ``kubectl port-forward``) shows
  its own.  With a tokens file any ``Host`` is served: the bearer token,
  which a page cannot send on its own, is what grants access.
* **Writes from the server's own origin only.**  In every mode, a ``POST``,
  ``PUT``, ``PATCH`` or ``DELETE`` (to the API or the dashboard) that sends
  an ``Origin`` must name the server's own origin, else 403: the scheme
  the client used (:func:`scheme`), the request's ``Host``, or the origin
  of ``public_url``.  A write without ``Origin`` (the CLI, curl, another
  replica) passes: browsers send it on every cross-origin write.  The
  dashboard's forms must carry one (:func:`same_origin`, which it is given
  at setup since it imports nothing of the API).
* **TLS behind a proxy.**  :func:`scheme` is ``https`` when aiohttp itself
  sees TLS, or when ``trust_forwarded_proto`` is set and the proxy's
  ``X-Forwarded-Proto`` says ``https``; a client's own header is ignored
  otherwise.  :func:`secure` (the dashboard's cookie is ``Secure``) also
  holds whenever ``public_url`` is https: clients reach Fleet over TLS
  then, whatever the last hop is.

Hosts and origins are compared as (scheme, lower-case host, port), the
port filled in from the scheme when absent; one parser
(:func:`split_host`) reads every ``Host`` and the authority of every
``Origin``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Awaitable, Callable
from typing import Final

from aiohttp import web

from fleet.api import keys
from fleet.api.problems import Problem, problem_response
from fleet.service.settings import Settings

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Methods that change something: they must come from the server's own origin.
WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_AUTHORITY: Final = re.compile(
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[A-Za-z0-9._~-]+))(?::(?P<port>[0-9]{1,5}))?"
)
_ORIGIN: Final = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]+)")

Origin = tuple[str, str, int]


def split_host(authority: str) -> tuple[str, int | None] | None:
    """``host[:port]`` as (lower-case host, port or None); None when it is not one.

    An IPv6 literal keeps its brackets (``[::1]``), as ``Host`` writes it.
    """
    found = _AUTHORITY.fullmatch(authority)
    if found is None:
        return None
    port = int(found["port"]) if found["port"] is not None else None
    if port is not None and port > 65535:
        return None
    if found["v6"] is not None:
        try:
            ipaddress.IPv6Address(found["v6"])
        except ValueError:
            return None
        return f"[{found['v6'].lower()}]", port
    return found["name"].lower(), port


def loopback_host(host: str | None) -> bool:
    """Whether a ``Host`` header names this machine's loopback: ``localhost`` or a loopback
    address literal, with or without a port."""
    parts = split_host(host or "")
    if parts is None:
        return False
    name = parts[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def _origin(scheme: str, authority: str) -> Origin | None:
    scheme = scheme.lower()
    parts = split_host(authority)
    if scheme not in _DEFAULT_PORTS or parts is None:
        return None
    host, port = parts
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def parse_origin(value: str) -> Origin | None:
    """An ``Origin`` header (``scheme://host[:port]``) as a comparable triple; None for
    ``null`` or anything else that is not an http(s) origin."""
    found = _ORIGIN.fullmatch(value.strip())
    return None if found is None else _origin(found["scheme"], found["authority"])


def _settings(request: web.Request) -> Settings:
    return request.app[keys.SETTINGS]


def scheme(request: web.Request) -> str:
    """``https`` when the client reached Fleet over TLS as far as Fleet can tell (see the
    module docstring), else ``http``."""
    if request.secure:
        return "https"
    if _settings(request).trust_forwarded_proto:
        forwarded = request.headers.get("X-Forwarded-Proto", "")
        if forwarded.split(",")[0].strip().lower() == "https":
            return "https"
    return "http"


def secure(request: web.Request) -> bool:
    """Whether a cookie set in answer to ``request`` must be ``Secure``."""
    public = _settings(request).public_url
    return scheme(request) == "https" or (public is not None and public.scheme == "https")


def own_origins(request: web.Request) -> set[Origin]:
    """The origins ``request``'s server answers as: its scheme and Host, and ``public_url``."""
    found: set[Origin] = set()
    host = request.headers.get("Host")
    if host is not None and (mine := _origin(scheme(request), host)) is not None:
        found.add(mine)
    public = _settings(request).public_url
    if public is not None and public.host is not None:
        authority = public.host if public.port is None else f"{public.host}:{public.port}"
        if (theirs := _origin(public.scheme, authority)) is not None:
            found.add(theirs)
    return found


def same_origin(request: web.Request, origin: str) -> bool:
    """Whether ``origin`` (an ``Origin`` header) is the server's own (see the docstring)."""
    parsed = parse_origin(origin)
    return parsed is not None and parsed in own_origins(request)


def _refused(status: int, title: str, slug: str, detail: str, request: web.Request) -> web.Response:
    problem = Problem(
        type=f"https://fleet.io/problems/{slug}",
        title=title,
        status=status,
        detail=detail,
        instance=request.path,
    )
    return problem_response(problem)


@web.middleware
async def host_and_origin(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse foreign Host names without tokens, and foreign origins' writes (see above)."""
    if not request.app[keys.TOKENS].configured and not loopback_host(request.headers.get("Host")):
        host = request.headers.get("Host")
        named = "no Host header" if host is None else f"Host {host[:100]!r}"
        return _refused(
            421,
            "Misdirected request",
            "misdirected",
            f"{named} is not a loopback name: without a tokens file every caller is admin, so "
            "Fleet answers only requests to localhost, 127.0.0.1 or [::1]",
            request,
        )
    origin = request.headers.get("Origin")
    if request.method in WRITES and origin is not None and not same_origin(request, origin):
        return _refused(
            403,
            "Forbidden",
            "foreign-origin",
            f"a {request.method} from origin {origin[:100]!r} is refused: writes are accepted "
            "from this server's own origin only (or from clients that send no Origin)",
            request,
        )
    return await handler(request)
