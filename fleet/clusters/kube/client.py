"""One Kubernetes API client per member cluster, and its errors as Fleet's own.

Theory of operation: :func:`connect` reads the member's kubeconfig (a file,
or a mounted secret's file, and optionally a context), checked first by
:mod:`.kubeconfig` (it must lie in the kubeconfig directory and run no
credential plugin unless allowed), into a client configuration of its own —
never the library's global default — and wraps
the library's :class:`ApiClient` in :class:`KubeClient`.  Fleet speaks to
the API server in plain JSON through that client's authenticated transport:
:meth:`KubeClient.request` for one call and :meth:`KubeClient.stream` for a
watch (one JSON object per line).  Everything the transport can raise
(HTTP status codes, refused connections, timeouts, TLS errors) leaves this
module as a :class:`~fleet.clusters.base.ClusterError`:

* 401 and 403: :class:`Refused` (the member refuses Fleet's credentials or
  their rights), a kind of :class:`~fleet.clusters.base.ClusterUnavailable`;
* 404: :class:`NotFound`; 409: :class:`AlreadyExists` (a
  :class:`~fleet.clusters.base.ClusterConflict`); 410: :class:`Gone` (a
  watch's resourceVersion is too old: list again);
* 400 and 422: :class:`Invalid` (a :class:`~fleet.clusters.base.ClusterRejected`);
* anything else, and no answer at all: :class:`Unreachable`.

Each carries ``status`` (0 when there was no HTTP answer) and the API
server's own message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.kube_config import KubeConfigLoader

from fleet.clusters.base import (
    ClusterConflict,
    ClusterError,
    ClusterRejected,
    ClusterUnavailable,
)
from fleet.clusters.kube import kubeconfig
from fleet.clusters.kube.kubeconfig import KubeconfigPolicy

log = logging.getLogger("fleet.clusters.kube")

#: Seconds one ordinary API call may take.
REQUEST_TIMEOUT: Final = 15.0
#: Longest line of a watch stream (one object); the API server's own limit is 3 MiB.
MAX_LINE: Final = 8 * 1024 * 1024

JSON = dict[str, Any]
#: What a caller learns of a kubeconfig the client library cannot use (the log has why).
UNUSABLE: Final = (
    "the kubeconfig could not be used (a context, cluster or user is missing or invalid); "
    "see the server log"
)


class KubeError(ClusterError):
    """An API server answer that is not a success (``status`` 0: no answer at all)."""

    status: int = 0

    def __init__(self, cluster: str, message: str, status: int = 0) -> None:
        super().__init__(cluster, message)
        self.status = status


class Unreachable(KubeError, ClusterUnavailable):
    """No answer, a server error, or too many requests: try again later."""


class Refused(KubeError, ClusterUnavailable):
    """401 or 403: the member does not accept Fleet's credentials, or they lack a right."""


class NotFound(KubeError, ClusterRejected):
    """404: no such object (or no such resource type)."""


class AlreadyExists(KubeError, ClusterConflict):
    """409: the object exists already (or changed meanwhile)."""


class Gone(KubeError, ClusterUnavailable):
    """410: the resourceVersion a watch resumes from is too old."""


class Invalid(KubeError, ClusterRejected):
    """400 or 422: the API server refuses the object as it is."""


def error_for(cluster: str, status: int, what: str, body: object) -> KubeError:
    """The error for an HTTP ``status`` answered to ``what`` (a method and path)."""
    message = body.get("message") if isinstance(body, Mapping) else None
    text = f"{what}: HTTP {status}" + (f": {message}" if message else "")
    if status in (401, 403):
        kind: type[KubeError] = Refused
    elif status == 404:
        kind = NotFound
    elif status == 409:
        kind = AlreadyExists
    elif status == 410:
        kind = Gone
    elif status in (400, 422):
        kind = Invalid
    else:
        kind = Unreachable
    return kind(cluster, text, status)


async def connect(
    cluster: str, path: Path | str, context: str | None, policy: KubeconfigPolicy
) -> KubeClient:
    """A client for member ``cluster`` from the kubeconfig file ``path`` (and ``context``).

    The file is checked first (:func:`.kubeconfig.read`: in the kubeconfig
    directory, no credential plugin unless ``policy`` allows it), before the
    library loads it.  Raises :class:`Invalid` with a fixed message when the
    file is refused or cannot be read or used (the server log has the
    details); nothing is sent to the member here.
    """
    configuration = k8s_client.Configuration()
    try:
        resolved, document = await asyncio.to_thread(kubeconfig.read, path, policy, cluster)
    except kubeconfig.KubeconfigError as e:
        log.warning("member %s: kubeconfig %s refused: %s", cluster, path, e)
        raise Invalid(cluster, e.public) from None
    try:
        loader = KubeConfigLoader(
            config_dict=document,
            active_context=context,
            config_base_path=str(resolved.parent),
        )
        await loader.load_and_set(configuration)
    except Exception as e:  # the loader's errors (ConfigException, ValueError, KeyError, ...)
        # The library's own exceptions name keys and names; any other one may quote a value.
        why = f": {str(e)[:300]}" if isinstance(e, ConfigException) else ""
        log.warning(
            "member %s: kubeconfig %s%s cannot be used: %s%s",
            cluster,
            resolved,
            f" context {context}" if context else "",
            type(e).__name__,
            why,
        )
        raise Invalid(cluster, UNUSABLE) from None
    return KubeClient(cluster, k8s_client.ApiClient(configuration))


class KubeClient:
    """Plain-JSON calls to one member's API server; see the module docstring."""

    def __init__(self, cluster: str, api: k8s_client.ApiClient) -> None:
        self.cluster = cluster
        self._api = api

    async def close(self) -> None:
        await self._api.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: object = None,
        content_type: str = "application/json",
        timeout: float = REQUEST_TIMEOUT,
    ) -> JSON:
        """``method path`` with ``body`` (JSON); the answer's JSON object."""
        what = f"{method} {path}"
        try:
            response = await self._call(method, path, query, body, content_type, timeout)
            async with response:
                raw = await response.read()
                status = response.status
        except KubeError:
            raise
        except (aiohttp.ClientError, OSError, ssl.SSLError, TimeoutError) as e:
            raise Unreachable(self.cluster, f"{what}: {_describe(e)}") from e
        data = _json(raw)
        if not 200 <= status <= 299:
            raise error_for(self.cluster, status, what, data)
        if not isinstance(data, dict):
            raise Unreachable(self.cluster, f"{what}: the answer is not a JSON object", status)
        return data

    async def stream(
        self, path: str, query: Sequence[tuple[str, str]], *, timeout: float
    ) -> AsyncIterator[JSON]:
        """The JSON objects of a watch on ``path``, one per line, until the server ends it."""
        what = f"WATCH {path}"
        try:
            response = await self._call("GET", path, query, None, "application/json", timeout)
            async with response:
                if not 200 <= response.status <= 299:
                    raise error_for(
                        self.cluster, response.status, what, _json(await response.read())
                    )
                while True:
                    line = await response.content.readline()
                    if not line:
                        return
                    if len(line) > MAX_LINE:
                        raise Unreachable(self.cluster, f"{what}: a line over {MAX_LINE} bytes")
                    data = _json(line)
                    if isinstance(data, dict):
                        yield data
        except KubeError:
            raise
        except (aiohttp.ClientError, OSError, ssl.SSLError, TimeoutError) as e:
            raise Unreachable(self.cluster, f"{what}: {_describe(e)}") from e

    async def _call(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: object,
        content_type: str,
        timeout: float,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        client_timeout = aiohttp.ClientTimeout(total=timeout, connect=min(timeout, 10.0))
        response = await self._api.call_api(
            path,
            method,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=client_timeout,
        )
        if not isinstance(response, aiohttp.ClientResponse):
            raise Unreachable(self.cluster, f"{method} {path}: unexpected answer {response!r}")
        return response


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _describe(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
