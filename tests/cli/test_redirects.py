"""The ``fleet`` commands follow redirects, and send the bearer token only where it was sent."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from fleet.cli.main import main
from fleet.cli.remote import origin

TOKEN = "fleet_secret-token"


@dataclass
class Recorder:
    """A local HTTP server: ``/moved`` redirects to ``location``; anything else answers JSON."""

    server: http.server.ThreadingHTTPServer
    location: str = ""
    status: int = 302
    seen: list[tuple[str, str | None]] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}"


def start(stack: list[Recorder]) -> Recorder:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            recorder.seen.append((self.path, self.headers.get("Authorization")))
            if self.path.startswith("/moved"):
                self.send_response(recorder.status)
                self.send_header("Location", recorder.location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps({"items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    recorder = Recorder(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler))
    threading.Thread(target=recorder.server.serve_forever, daemon=True).start()
    stack.append(recorder)
    return recorder


@pytest.fixture
def servers() -> Iterator[tuple[Recorder, Recorder]]:
    """Two local servers on two ports: the first redirects, the second is elsewhere."""
    stack: list[Recorder] = []
    try:
        yield start(stack), start(stack)
    finally:
        for recorder in stack:
            recorder.server.shutdown()
            recorder.server.server_close()


def get_clusters(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["get", "clusters", "--server", url, "--token", TOKEN]) == 0, capsys.readouterr()
    capsys.readouterr()


@pytest.mark.parametrize("status", [302, 307])
@pytest.mark.parametrize("where", ["another-port", "another-host"])
def test_a_redirect_to_another_origin_does_not_carry_the_token(
    servers: tuple[Recorder, Recorder],
    capsys: pytest.CaptureFixture[str],
    status: int,
    where: str,
) -> None:
    first, second = servers
    if where == "another-port":
        first.location = second.url() + "/api/v1/clusters"
    else:  # the same port under another name is another origin too
        first.location = first.url("localhost") + "/api/v1/clusters"
    first.status = status
    get_clusters(first.url() + "/moved", capsys)
    target = second if where == "another-port" else first
    assert first.seen[0] == ("/moved/api/v1/clusters", f"Bearer {TOKEN}")
    assert target.seen[-1] == ("/api/v1/clusters", None)


@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_within_the_origin_keeps_the_token(
    servers: tuple[Recorder, Recorder], capsys: pytest.CaptureFixture[str], status: int
) -> None:
    first, second = servers
    first.location = "/api/v1/clusters"  # relative: the same origin
    first.status = status
    get_clusters(first.url() + "/moved", capsys)
    assert first.seen == [
        ("/moved/api/v1/clusters", f"Bearer {TOKEN}"),
        ("/api/v1/clusters", f"Bearer {TOKEN}"),
    ]
    assert second.seen == []


def test_once_dropped_the_token_stays_dropped(
    servers: tuple[Recorder, Recorder], capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = servers
    first.location = second.url() + "/moved/back"
    second.location = first.url() + "/api/v1/clusters"  # and back to where the token was sent
    get_clusters(first.url() + "/moved", capsys)
    assert [auth for _, auth in first.seen + second.seen] == [f"Bearer {TOKEN}", None, None]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://Example.COM/x", ("http", "example.com", 80)),
        ("https://example.com:443/x", ("https", "example.com", 443)),
        ("https://example.com:8443", ("https", "example.com", 8443)),
        ("http://[::1]:8080/", ("http", "::1", 8080)),
        ("http://example.com:notaport/", ("http", "example.com", -1)),
    ],
)
def test_origin(url: str, expected: tuple[str, str, int]) -> None:
    assert origin(url) == expected
