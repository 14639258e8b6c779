"""Property-based API test generated from the OpenAPI document, against a real ``fleet serve``.

schemathesis draws requests for every operation of the document (valid and
invalid parameters and bodies) and sends them, with an admin token, to a
``fleet serve`` process on a SQLite file; every answer must be below 500, of
a documented status and media type, and match its documented schema.
Every query parameter of every operation also gets text that only looks
like a number (``²``, ``١٢``, 5,000 digits, then drawn ones: the driver's
``numbers`` round).  Afterwards the server must still be healthy and ready.  A larger run is
``bench/bench_fuzz.py``.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.api.routes import ROUTES
from fleet.testing import servers
from fleet.testing.fuzz import EVERY_PARAMETER, NUMBERS, fuzz
from fleet.testing.tokens import admin_tokens_file

pytestmark = pytest.mark.slow

ADMIN = "fleet_fuzz-admin-token"
EXAMPLES = 15


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("fuzz")
    tokens = admin_tokens_file(work / "tokens.yaml", ADMIN, name="fuzz")
    with servers.serving(work, extra=["--tokens-file", str(tokens)]) as server:
        yield server.url, server.log


def test_no_input_breaks_the_api_and_the_server_stays_healthy(
    server: tuple[str, Path],
) -> None:
    url, log = server
    result = fuzz(url, {"Authorization": f"Bearer {ADMIN}"}, examples=EXAMPLES)
    assert result.failures == [], "\n\n".join(f"{op}: {e}" for op, e in result.failures)
    operations = {label.rsplit(" (", 1)[0] for label in result.per_operation}
    # schemathesis leaves out the route of the document it was given.
    assert operations == {f"{r.method} {r.path}" for r in ROUTES} - {"GET /api/v1/openapi.json"}
    positive = [n for label, n in result.per_operation.items() if label.endswith("(positive)")]
    assert all(n > 0 for n in positive), result.per_operation
    with_query = {
        f"{r.method} {r.path}" for r in ROUTES if any(p.location == "query" for p in r.parameters)
    }
    numbers = {
        label.rsplit(" (", 1)[0]: n
        for label, n in result.per_operation.items()
        if label.endswith(f"({NUMBERS})")
    }
    assert set(numbers) == with_query - {"GET /api/v1/openapi.json"}
    # Each of EVERY_PARAMETER in each query parameter, and drawn ones.
    for route in ROUTES:
        label = f"{route.method} {route.path}"
        if label in numbers:
            query = [p for p in route.parameters if p.location == "query"]
            assert numbers[label] > len(query) * len(EVERY_PARAMETER), (label, numbers[label])
    for path in ("/healthz", "/readyz"):
        with urllib.request.urlopen(url + path, timeout=10) as resp:
            assert resp.status == 200, path
            assert json.load(resp)
    assert "unexpected error answering" not in log.read_text()
