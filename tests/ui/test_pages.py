"""The dashboard's pages over HTTP (no browser): security headers, login, forms, paging at scale."""

from __future__ import annotations

import datetime
import re
from collections.abc import Awaitable, Callable
from html import unescape as html_unescape
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from yarl import URL

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.service.settings import POLICIES
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import TOKENS, write_tokens_file
from fleet.ui import app as ui_app
from fleet.ui import views
from fleet.ui.client import COOKIE
from tests.admin.conftest import YAML, Api, Client
from tests.api.test_job_kinds import tfjob
from tests.databases import sqlite_url
from tests.sim.test_forecast import T0, job


def origin(api: Api) -> dict[str, str]:
    url = api.client.make_url("/")
    return {"Origin": f"{url.scheme}://{url.host}:{url.port}"}


async def login(api: Api, who: str) -> None:
    resp = await api.client.post(
        "/ui/login",
        data={"token": TOKENS[who], "next": "/ui/"},
        headers=origin(api),
        allow_redirects=False,
    )
    assert resp.status == 303, await resp.text()
    assert TOKENS[who] not in resp.headers["Location"]


async def test_pages_forbid_inline_script_and_static_files_are_cached_by_digest(api: Api) -> None:
    await login(api, "admin")
    resp = await api.client.get("/ui/")
    assert resp.status == 200
    csp = resp.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert resp.headers["Cache-Control"] == "no-store"
    html = await resp.text()
    assert "<script>" not in html and " style=" not in html and "onclick" not in html
    src = re.search(r'<script src="(/ui/static/fleet\.js\?v=[0-9a-f]+)"', html)
    assert src is not None
    js = await api.client.get(src[1])
    assert js.status == 200 and js.content_type == "text/javascript"
    assert "immutable" in js.headers["Cache-Control"]
    etag = js.headers["ETag"]
    again = await api.client.get(src[1], headers={"If-None-Match": etag})
    assert again.status == 304
    stale = await api.client.get("/ui/static/fleet.js?v=old")
    assert stale.headers["Cache-Control"] == "no-cache"
    missing = await api.client.get("/ui/static/nothing.js")
    assert missing.status == 404


async def test_without_a_token_the_login_form_comes_first(api: Api) -> None:
    resp = await api.client.get("/ui/queues/team-a", allow_redirects=False)
    assert resp.status == 302
    location = URL(resp.headers["Location"])
    assert location.path == "/ui/login" and location.query["next"] == "/ui/queues/team-a"
    bad = await api.client.post(
        "/ui/login", data={"token": "fleet_wrong", "next": "/ui/"}, headers=origin(api)
    )
    assert bad.status == 401
    assert "the token was refused" in await bad.text()
    resp = await api.client.post(
        "/ui/login",
        data={"token": TOKENS["team-a"], "next": "https://elsewhere.example/"},
        headers=origin(api),
        allow_redirects=False,
    )
    assert resp.headers["Location"] == "/ui/"  # never off the dashboard
    cookie = resp.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}=") and "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie and "Path=/ui/" in cookie
    page = await api.client.get("/ui/")
    assert "ci-a (team: team-a)" in await page.text()


async def test_a_form_from_another_origin_is_refused(api: Api) -> None:
    resp = await api.client.post(
        "/ui/login",
        data={"token": TOKENS["admin"]},
        headers={"Origin": "https://evil.example"},
        allow_redirects=False,
    )
    assert resp.status == 403
    assert COOKIE not in resp.headers.get("Set-Cookie", "")


async def test_a_quota_edit_shows_the_dry_run_then_saves_and_a_team_is_refused(api: Api) -> None:
    await login(api, "admin")
    form = {"min:nvidia.com/gpu": "16", "max:nvidia.com/gpu": "24", "action": "preview"}
    preview = await api.client.post("/ui/queues/team-a/quota", data=form, headers=origin(api))
    html = await preview.text()
    assert preview.status == 200, html
    assert "dry run: nothing changed yet" in html and 'id="save"' in html
    tree = await api.call("GET", "/api/v1/queues/team-a", status=200)
    assert tree["max"]["nvidia.com/gpu"] == "32"  # unchanged by the preview
    previewed = re.search(r'name="previewed" value="([^"]*)"', html)
    assert previewed is not None
    # A form changed after its preview is previewed again, not saved.
    changed = {**form, "max:nvidia.com/gpu": "20", "action": "save", "previewed": previewed[1]}
    again = await api.client.post("/ui/queues/team-a/quota", data=changed, headers=origin(api))
    assert "dry run: nothing changed yet" in await again.text()
    tree = await api.call("GET", "/api/v1/queues/team-a", status=200)
    assert tree["max"]["nvidia.com/gpu"] == "32"
    token = html_unescape(previewed[1])
    saved = await api.client.post(
        "/ui/queues/team-a/quota",
        data={**form, "action": "save", "previewed": token},
        headers=origin(api),
    )
    assert saved.status == 200
    assert "quota of team-a saved (version 2)" in await saved.text()
    tree = await api.call("GET", "/api/v1/queues/team-a", status=200)
    assert tree["max"]["nvidia.com/gpu"] == "24"
    # A broken rule comes back with the API's reason, and nothing changes.
    broken = {"min:nvidia.com/gpu": "40", "action": "preview"}
    refused = await api.client.post("/ui/queues/team-a/quota", data=broken, headers=origin(api))
    assert refused.status == 422
    assert "Refused (422)" in await refused.text()
    # A team token reaches the API, which refuses it.
    api.client.session.cookie_jar.clear()
    await login(api, "team-a")
    more = {**form, "max:nvidia.com/gpu": "28"}
    team = await api.client.post("/ui/queues/team-a/quota", data=more, headers=origin(api))
    assert team.status == 403
    assert "may not change one node" in (await team.text()).lower()


async def test_cancel_is_offered_to_the_jobs_queue_only_and_carried_out(api: Api) -> None:
    await api.call(
        "POST",
        "/api/v1/submissions",
        "admin",
        status=201,
        data=pytorchjob("c", duration="10m"),
        headers=YAML,
    )
    await api.settle()
    await login(api, "team-b")
    page = await (await api.client.get("/ui/jobs/team-a/c")).text()
    assert 'id="cancel"' not in page and "Running" in page
    api.client.session.cookie_jar.clear()
    await login(api, "team-a")
    page = await (await api.client.get("/ui/jobs/team-a/c")).text()
    assert 'id="cancel"' in page
    resp = await api.client.post("/ui/jobs/team-a/c/cancel", headers=origin(api))
    assert "cancellation of team-a/c recorded" in await resp.text()
    await api.settle()
    job = await api.call("GET", "/api/v1/jobs/team-a/c", status=200)
    assert job["state"] == "Cancelled"


def _big_tree(leaves: int) -> str:
    children = [
        {"name": f"q{i:04d}", "max": {"nvidia.com/gpu": 8}, "namespaces": [f"ns{i:04d}"]}
        for i in range(leaves)
    ]
    root = {
        "name": "root",
        "min": {"nvidia.com/gpu": 48},
        "max": {"nvidia.com/gpu": 48},
        "children": children,
    }
    tree = {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "big"},
        "spec": {"root": root},
    }
    return yaml.safe_dump(tree)


async def test_pages_stay_paged_with_a_thousand_queues_and_many_jobs(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    database_url: str,
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree.yaml"
    tree.write_text(_big_tree(1000))
    settings = running.settings(database_url, quota=tree)
    clock = VirtualClock(0.0)
    client = await aiohttp_client(create_app(settings, clock=clock))
    # 300 jobs of 8 GPUs in one queue whose max is 8: one runs, the others wait with a reason.
    text = "\n---\n".join(
        pytorchjob(f"j{i:03d}", namespace="ns0007", workers=1, gpus=8) for i in range(300)
    )
    assert (await client.post("/api/v1/submissions", data=text, headers=YAML)).status == 201
    await running.settle(client.app[keys.SERVICE].loop, clock)
    home = await (await client.get("/ui/")).text()
    assert home.count("<tr data-node=") == views.TREE_PAGE
    assert "1001 nodes" in home and 'rel="next"' in home
    last = await (await client.get("/ui/?page=6")).text()
    assert last.count("<tr data-node=") == 1001 - 5 * views.TREE_PAGE
    found = await (await client.get("/ui/?q=q0999")).text()
    assert found.count("<tr data-node=") == 1 and "q0999" in found
    queue = await (await client.get("/ui/queues/q0007")).text()
    pending = queue.split('<table id="pending">')[1].split("</table>")[0]
    assert pending.count('<tr data-job="ns0007/') == views.PENDING_PAGE
    reasons = re.findall(r'<td class="reason">([^<]*)</td>', pending)
    assert len(reasons) == views.PENDING_PAGE and all("q0007" in r for r in reasons), reasons[:3]
    assert "Next pending" in queue
    jobs = await (await client.get("/ui/jobs?queue=q0007")).text()
    assert jobs.count('<tr data-job="') == views.JOBS_PAGE and 'rel="next"' in jobs
    assert ui_app.CSP  # every page above carried it (see the first test)


async def test_the_queue_and_job_pages_show_an_estimated_start_when_there_is_one(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], database_url: str
) -> None:
    clock = VirtualClock(T0)
    settings = running.settings(
        database_url,
        clusters=POLICIES / "clusters" / "lab-2.yaml",
        quota=POLICIES / "lab" / "quota-one-vc.yaml",
        estimate_interval=0,  # refreshed by hand below
    )
    client = await aiohttp_client(create_app(settings, clock=clock))
    text = job("a", gpus=2, run="1h", expected="1h") + "---\n" + job("b", gpus=1, run="5m")
    assert (await client.post("/api/v1/submissions", data=text, headers=YAML)).status == 201
    await running.settle(client.app[keys.SERVICE].loop, clock)
    before = await (await client.get("/ui/jobs/lab/b")).text()
    assert "Estimated start" not in before  # no forecast yet: nothing claimed
    await client.app[keys.ESTIMATOR].refresh()
    expected = datetime.datetime.fromtimestamp(T0 + 3600, datetime.UTC)
    shown = expected.strftime("%Y-%m-%d %H:%M:%S") + " UTC"
    page = await (await client.get("/ui/jobs/lab/b")).text()
    estimate = page.split('id="job-estimate">')[1].split("</dd>")[0]
    assert shown in estimate and "no new submissions" in estimate  # the assumptions on hover
    queue = await (await client.get("/ui/queues/default")).text()
    row = queue.split('<tr data-job="lab/b">')[1].split("</tr>")[0]
    assert shown in row


@pytest.mark.parametrize(
    ("settings", "headers", "secure"),
    [
        pytest.param({}, {}, False, id="plain-http"),
        pytest.param({"public_url": "https://fleet.example.com"}, {}, True, id="https-public-url"),
        pytest.param({"public_url": "http://fleet.example.com"}, {}, False, id="http-public-url"),
        pytest.param({}, {"X-Forwarded-Proto": "https"}, False, id="untrusted-forwarded-proto"),
        pytest.param(
            {"trust_forwarded_proto": True},
            {"X-Forwarded-Proto": "https"},
            True,
            id="trusted-forwarded-proto",
        ),
    ],
)
async def test_the_session_cookie_is_secure_when_clients_use_tls_in_front_of_a_proxy(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    tmp_path: Path,
    settings: dict[str, object],
    headers: dict[str, str],
    secure: bool,
) -> None:
    tokens = write_tokens_file(tmp_path / "tokens.yaml")
    app = create_app(
        running.settings(sqlite_url(tmp_path), tokens_file=tokens, **settings),
        clock=VirtualClock(1_000.0),
    )
    client = await aiohttp_client(app)
    url = client.make_url("/")
    # The browser's origin is the one it used: the proxy's when there is one (an untrusted
    # X-Forwarded-Proto is the client's own word: it changes nothing).
    public = settings.get("public_url")
    scheme = "https" if secure and "X-Forwarded-Proto" in headers else url.scheme
    origin = str(public) if public else f"{scheme}://{url.host}:{url.port}"
    resp = await client.post(
        "/ui/login",
        data={"token": TOKENS["admin"], "next": "/ui/"},
        headers={"Origin": origin, **headers},
        allow_redirects=False,
    )
    assert resp.status == 303, await resp.text()
    cookie = resp.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert ("Secure" in cookie.split("; ")) is secure, cookie


async def test_the_jobs_table_names_each_jobs_kind_and_the_job_page_its_pod_sets(
    api: Api,
) -> None:
    # team-a's max is 32 GPUs: the TFJob's 2 and pt0's 16 leave too few for pt's 16.
    for text in (
        tfjob("tf", workers=2),
        pytorchjob("pt0", workers=2, gpus=8, duration="1h"),
        pytorchjob("pt", workers=2, gpus=8, duration="1h"),
    ):
        await api.call("POST", "/api/v1/submissions", "admin", status=201, data=text, headers=YAML)
    await api.settle()
    await login(api, "team-a")
    page = await (await api.client.get("/ui/jobs")).text()
    kinds = dict(
        re.findall(
            r'<tr data-job="team-a/(\w+)">.*?<td class="kind"><abbr title="[^"]*">(\w+)</abbr>',
            page,
            re.S,
        )
    )
    assert kinds == {"tf": "TFJob", "pt0": "PyTorchJob", "pt": "PyTorchJob"}
    page = await (await api.client.get("/ui/jobs/team-a/tf")).text()
    assert "TFJob (kubeflow.org/v1)" in page
    sets = re.findall(r'<tr><th scope="row">(\w+)</th><td class="num">(\d+)</td>', page)
    assert sets == [("PS", "1"), ("Worker", "2")]
    assert "3 of its pods must start together" in page
    # A gang that waits says so per set.
    page = await (await api.client.get("/ui/jobs/team-a/pt")).text()
    assert 'id="job-gang"' in page and "2/2 pods in gang unschedulable (Worker 2;" in page


async def test_the_overview_sums_up_the_fleet_and_charts_each_queue(api: Api) -> None:
    sampler = api.client.app[keys.SAMPLER]
    await api.settle()
    text = pytorchjob("big", namespace="team-a", workers=1, gpus=8, duration="1h")
    await api.call("POST", "/api/v1/submissions", "admin", status=201, data=text, headers=YAML)
    await api.settle()
    await sampler.take()
    await api.settle(60.0)
    await sampler.take()
    await login(api, "team-b")
    page = await (await api.client.get("/ui/?window=1h")).text()
    assert 'id="sum-gpus-total">48<' in page and 'id="sum-gpus-used">8<' in page
    assert 'id="sum-running">1<' in page and 'id="sum-pending">0<' in page
    assert "Flags" not in page  # the column that was always empty
    for series in ("gpus", "pending", "wait"):
        chart = page.split(f'id="chart-{series}"')[1].split("</figure>")[0]
        lines = re.findall(
            r'<path class="line (vc-\d+) dash-\d" d="([^"]*)" data-queue="([\w-]+)"', chart
        )
        assert sorted(q for _, _, q in lines) == ["sandbox", "team-a", "team-b", "team-c"]
        assert len({c for c, _, _ in lines}) == 4  # a colour per queue
        drawn = [q for _, d, q in lines if d.startswith("M")]
        # A wait is drawn where something was admitted in the hour before.
        assert drawn == (
            ["team-a"] if series == "wait" else ["sandbox", "team-a", "team-b", "team-c"]
        )
    assert re.search(
        r'data-queue="team-a"><svg[^>]*>.*?</svg> team-a <span class="now">8</span>', page
    )
    # The jobs page: GPUs, reason and run time, under the shared column words.
    await api.settle(125.0)
    jobs = await (await api.client.get("/ui/jobs")).text()
    headers = re.findall(r'<th scope="col"[^>]*>([A-Z ]+)</th>', jobs)
    assert headers == list(views.JOB_COLUMNS)
    row = jobs.split('<tr data-job="team-a/big">')[1].split("</tr>")[0]
    assert '<td class="num gpus">8</td>' in row and '<td class="num run-time">3m</td>' in row
    listed = await api.call("GET", "/api/v1/jobs", "team-a", status=200)
    (item,) = listed["items"]
    assert item["gpus"] == 8 and item["startedAt"] and item["runSeconds"] >= 180
    assert "reason" not in item  # a running job waits for nothing
