"""The dashboard in a real browser: Debian's chromium, headless, driven by Playwright.

A real ``fleet serve`` (:mod:`fleet.testing.servers`) runs on SQLite with the
example quota tree and simulated clusters and a tokens file (an admin, a
team-a and a team-b token), sampling the history every second.  The tests
share one browser and act as a person would: log in, read the tree, follow a
submission from the queue page to the cell map until it succeeds (the pages
update themselves from the event stream, nothing reloads them), cancel a
job, edit a quota as admin and be refused as a team, mark a node bad, read
the summary and the charts over time, search the jobs, tell jobs apart on
the cell map; at 1024 px wide no page scrolls sideways and the quota gauges
line up.  They check what a person sees: text, visible elements, and the
colour of cells by virtual cluster.  Each page's
screenshot is saved in ``$FLEET_UI_SCREENSHOTS`` if set, else in
``ui-screenshots/`` of pytest's cache directory (``.pytest_cache/d/``), or of
its temporary directory when the cache is off.

The browser is ``/usr/bin/chromium`` (``scripts/run-tests`` installs Debian's
package when it is missing); Playwright downloads nothing.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from fleet.testing import servers
from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import TOKENS, bearer, write_tokens_file

CHROMIUM: Final = Path("/usr/bin/chromium")
CHROMIUM_ARGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Seconds a person would wait for a page to show a change.
PATIENCE_MS: Final = 30_000
expect.set_options(timeout=PATIENCE_MS)
SCREENSHOTS_ENV: Final = "FLEET_UI_SCREENSHOTS"


class Fleet:
    """The running server: its URL, its SQLite file and the API as a client script would
    call it."""

    def __init__(self, url: str, database: Path) -> None:
        self.url = url
        self.database = database
        self.started = time.time()

    def call(
        self,
        method: str,
        path: str,
        who: str = "admin",
        body: bytes | None = None,
        content_type: str = "application/yaml",
    ) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=body,
            method=method,
            headers={**bearer(who), "Content-Type": content_type},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            data = resp.read()
        return json.loads(data) if data else None

    def submit(self, text: str, who: str = "admin") -> Any:
        return self.call("POST", "/api/v1/submissions", who, text.encode())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("browser")
    tokens = write_tokens_file(work / "tokens.yaml")
    extra = ["--tokens-file", str(tokens), "--history-interval", "1"]  # charts fill at once
    with servers.serving(work, extra=extra) as server:
        yield Fleet(server.url, work / "fleet.db")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium package "
            "(scripts/run-tests does so when it can)"
        )
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def shots(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get(SCREENSHOTS_ENV)
    cache = getattr(request.config, "cache", None)  # None with -p no:cacheprovider
    if where:
        folder = Path(where)
    elif cache is not None:
        folder = cache.mkdir("ui-screenshots")
    else:
        folder = tmp_path_factory.mktemp("ui-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser: Browser, fleet: Fleet) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1366, "height": 860}, base_url=fleet.url)
    context.set_default_timeout(PATIENCE_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield opened
    finally:
        context.close()
    assert errors == [], errors  # no script error on any page


def log_in(page: Page, who: str, next_path: str = "/ui/") -> None:
    page.goto(next_path)
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    page.get_by_label("Bearer token").fill(TOKENS[who])
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#who")).to_contain_text(
        {"admin": "ops", "team-a": "ci-a", "team-b": "ci-b"}[who]
    )
    assert TOKENS[who] not in page.url


def background(page: Page, selector: str) -> str:
    """The computed background colour of the first element ``selector`` finds (in one step, so
    a live update cannot swap the element in between)."""
    value: str = page.evaluate(
        "s => getComputedStyle(document.querySelector(s)).backgroundColor", selector
    )
    return value


def test_the_tree_after_logging_in(page: Page, shots: Path) -> None:
    page.goto("/ui/")
    assert "/ui/login" in page.url
    page.screenshot(path=shots / "login.png")
    page.get_by_label("Bearer token").fill("fleet_not-a-token")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#login-error")).to_have_text("the token was refused")
    log_in(page, "admin")
    expect(page.get_by_role("heading", name="Quota tree")).to_be_visible()
    rows = page.locator("table.tree tbody tr")
    expect(rows).to_have_count(7)
    team_a = page.locator('tr[data-node="team-a"]')
    expect(team_a.get_by_role("link", name="team-a")).to_be_visible()
    gauge = team_a.get_by_role("img", name="nvidia.com/gpu: used 0 of max 32, min 16")
    expect(gauge).to_be_visible()
    # Keyboard: the first Tab reaches the skip link, which leads to the content.
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Skip to content")
    page.screenshot(path=shots / "tree.png", full_page=True)


def test_a_submission_from_queued_to_the_cell_map_to_succeeded(
    page: Page, fleet: Fleet, shots: Path
) -> None:
    log_in(page, "admin", "/ui/queues/sandbox")
    # sandbox may use 8 GPUs: the first job takes them, the second waits for it.
    fleet.submit(pytorchjob("blocker", namespace="sandbox", gpus=8, duration="8s"))
    fleet.submit(pytorchjob("follow", namespace="sandbox", gpus=8, duration="25s"))
    fleet.submit(pytorchjob("neighbour", namespace="team-a", gpus=4, duration="10m"))
    pending = page.locator('#pending tr[data-job="sandbox/follow"]')
    expect(pending).to_be_visible()  # the page updated itself
    expect(pending.locator("td.reason")).to_contain_text("sandbox")
    expect(pending.locator("td").first).to_have_text("1")
    expect(page.locator('#running tr[data-job="sandbox/blocker"]')).to_contain_text("borrowed")
    page.screenshot(path=shots / "queue.png", full_page=True)

    page.get_by_role("link", name="sandbox/follow").click()
    expect(page.locator("#job-state")).to_have_text("Queued")
    expect(page.locator("#job-reason")).to_contain_text("sandbox")
    expect(page.locator("#documents")).to_contain_text("kind: PyTorchJob")
    expect(page.locator("#job-state")).to_have_text("Running", timeout=PATIENCE_MS)
    expect(page.locator("#placement tbody tr")).to_have_count(1)
    expect(page.locator("#events")).to_contain_text("Admitted")
    cluster = page.locator("#job-facts a[href^='/ui/clusters/']").inner_text()
    page.screenshot(path=shots / "job.png", full_page=True)

    page.goto(f"/ui/clusters/{cluster}")
    cells = page.locator('#cellmap li[data-job="sandbox/follow"]')
    expect(cells).to_have_count(8)
    expect(cells.first).to_be_visible()
    expect(cells.first).to_contain_text("b")  # borrowed, said in text as well as colour
    sandbox_colour = background(page, '#cellmap li[data-job="sandbox/follow"]')
    legend_colour = background(page, '#legend [data-vc="sandbox"] .cell-sample')
    free_colour = background(page, "#legend .cell-sample.vc-free")
    assert sandbox_colour == legend_colour != free_colour
    colours = page.evaluate(
        "s => Array.from(document.querySelectorAll(s), e => getComputedStyle(e).backgroundColor)",
        "#legend [data-vc] .cell-sample",
    )
    assert len(colours) >= 2 and "" not in colours
    assert len(set(colours)) == len(colours)  # no two queues alike on one map
    title = cells.first.get_attribute("title") or ""
    assert "sandbox/follow" in title and "Running" in title and "borrowed" in title
    neighbour = fleet.call("GET", "/api/v1/jobs/team-a/neighbour")
    if neighbour["cluster"] == cluster:
        team_colour = background(page, '#cellmap li[data-job="team-a/neighbour"]')
        assert team_colour not in (sandbox_colour, free_colour)
    page.screenshot(path=shots / "cluster.png", full_page=True)

    page.goto("/ui/jobs/sandbox/follow")
    expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=2 * PATIENCE_MS)
    expect(page.locator("#events")).to_contain_text("Succeeded")
    expect(page.locator("#cancel")).to_have_count(0)


def test_cancelling_a_job(page: Page, fleet: Fleet) -> None:
    fleet.submit(pytorchjob("to-cancel", namespace="team-b", gpus=1, duration="10m"))
    log_in(page, "team-a", "/ui/jobs/team-b/to-cancel")
    expect(page.locator("#job-state")).to_have_text("Running")
    expect(page.locator("#cancel")).to_have_count(0)  # not team-a's job
    page.get_by_role("button", name="Log out").click()
    log_in(page, "team-b", "/ui/jobs/team-b/to-cancel")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel job").click()
    expect(page.get_by_role("status").filter(has_text="cancellation")).to_be_visible()
    expect(page.locator("#job-state")).to_have_text("Cancelled")
    expect(page.locator("#events")).to_contain_text("Cancelled")


def test_an_admin_edits_a_quota_with_a_dry_run_and_a_team_is_refused(
    page: Page, fleet: Fleet, shots: Path
) -> None:
    log_in(page, "admin", "/ui/queues/team-b")
    page.get_by_label("max nvidia.com/gpu").fill("40")
    page.get_by_role("button", name="Preview (dry run)").click()
    expect(page.locator("#dry-run")).to_contain_text("nothing changed yet")
    expect(page.locator("#patch")).to_contain_text('"nvidia.com/gpu": "40"')
    tree = fleet.call("GET", "/api/v1/queues/team-b")
    assert tree["max"]["nvidia.com/gpu"] == "48"  # the preview changed nothing
    page.screenshot(path=shots / "quota-dry-run.png", full_page=True)
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status").filter(has_text="quota of team-b saved")).to_be_visible()
    expect(page.locator(".bars")).to_contain_text("/ 40")
    assert fleet.call("GET", "/api/v1/queues/team-b")["max"]["nvidia.com/gpu"] == "40"

    page.get_by_role("button", name="Log out").click()
    log_in(page, "team-b", "/ui/queues/team-b")
    expect(page.get_by_text("Only an admin token may change the tree")).to_be_visible()
    page.get_by_label("max nvidia.com/gpu").fill("48")
    page.get_by_role("button", name="Preview (dry run)").click()
    expect(page.locator("#quota-problem")).to_contain_text("Refused (403)")
    assert fleet.call("GET", "/api/v1/queues/team-b")["max"]["nvidia.com/gpu"] == "40"


def test_a_node_marked_bad_shows_on_the_cell_map(page: Page, fleet: Fleet, shots: Path) -> None:
    log_in(page, "admin", "/ui/clusters/east")
    row = page.locator("#cellmap tbody tr").last
    node = row.get_attribute("data-node")
    row.get_by_role("textbox").fill("fan failure")
    row.get_by_role("button", name="Mark bad").click()
    expect(page.get_by_role("status").filter(has_text=f"node {node} marked bad")).to_be_visible()
    bad = page.locator(f'#cellmap tr[data-node="{node}"]')
    expect(bad.locator(".bad-flag")).to_have_text("✕ bad: fan failure")
    expect(bad.locator("li.cell.bad").first).to_be_visible()
    hatch = "s => getComputedStyle(document.querySelector(s)).backgroundImage"
    bad_cell = f'#cellmap tr[data-node="{node}"] li.cell'
    assert "repeating-linear-gradient" in page.evaluate(hatch, bad_cell)
    assert page.evaluate(hatch, "#cellmap tr:not(.bad-node) li.cell") == "none"
    page.screenshot(path=shots / "cluster-bad-node.png", full_page=True)
    clusters = fleet.call("GET", "/api/v1/clusters")
    east = next(c for c in clusters["items"] if c["name"] == "east")
    assert node in east["badNodes"]
    bad.get_by_role("button", name="Mark healthy").click()
    expect(page.locator(f'#cellmap tr[data-node="{node}"] .bad-flag')).to_have_count(0)


def test_without_the_event_stream_the_page_falls_back_to_polling(page: Page, fleet: Fleet) -> None:
    page.route("**/ui/events*", lambda route: route.abort())
    log_in(page, "admin", "/ui/jobs")
    fleet.submit(pytorchjob("polled", namespace="team-c", gpus=1, duration="8s"))
    page.goto("/ui/jobs/team-c/polled")
    assert page.locator("#job-state").inner_text() != "Succeeded"  # the page must change
    expect(page.locator("#live-status")).to_contain_text("polling")
    expect(page.locator("#job-state")).to_have_text("Succeeded", timeout=2 * PATIENCE_MS)


#: The leaf queues of the example tree, as the charts and the cell map name them.
LEAVES: Final = ("sandbox", "team-a", "team-b", "team-c")
#: The pages a person visits, checked at 1024 px wide.
PAGES: Final = (
    "/ui/",
    "/ui/?window=7d",
    "/ui/jobs",
    "/ui/clusters",
    "/ui/clusters/east",
    "/ui/queues/team-a",
    "/ui/jobs/team-b/wide-a",
)


@pytest.fixture
def narrow(browser: Browser, fleet: Fleet) -> Iterator[Page]:
    """A page 1024 px wide and 768 high, as a laptop or a projector shows it."""
    context = browser.new_context(viewport={"width": 1024, "height": 768}, base_url=fleet.url)
    context.set_default_timeout(PATIENCE_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield opened
    finally:
        context.close()
    assert errors == [], errors


def test_the_overview_shows_the_fleet_now_and_over_time(
    narrow: Page, fleet: Fleet, shots: Path
) -> None:
    fleet.submit(pytorchjob("wide-a", namespace="team-b", gpus=4, duration="10m"))
    fleet.submit(pytorchjob("wide-b", namespace="team-b", gpus=2, duration="10m"))
    log_in(narrow, "admin", "/ui/?window=1h")
    expect(narrow.locator("#sum-gpus-total")).to_have_text("48")
    used = int(narrow.locator("#sum-gpus-used").inner_text())
    free = int(narrow.locator("#sum-gpus-free").inner_text())
    assert used >= 6 and used + free <= 48
    expect(narrow.locator("#summary")).to_contain_text("Wait p95 (last hour)")
    for series in ("gpus", "pending", "wait"):
        chart = narrow.locator(f"#chart-{series}")
        expect(chart.locator("path.line[data-queue]")).to_have_count(len(LEAVES))
        for leaf in LEAVES:
            expect(chart.locator(f'.chart-legend li[data-queue="{leaf}"]')).to_contain_text(leaf)
        expect(chart.locator("text.xlabel").first).to_be_visible()
    expect(narrow.locator("#chart-wait path.line[data-fleet]")).to_have_count(1)
    # team-b's line reaches its 6 GPUs once a sample has them (the page is read again).
    for _ in range(30):
        narrow.reload()
        if narrow.locator('#chart-gpus li[data-queue="team-b"] .now').inner_text() == "6":
            break
        narrow.wait_for_timeout(500)
    expect(narrow.locator('#chart-gpus li[data-queue="team-b"] .now')).to_have_text("6")
    path = narrow.locator('#chart-gpus path.line[data-queue="team-b"]').get_attribute("d") or ""
    assert path.startswith("M") and "L" in path  # a line through several samples
    narrow.screenshot(path=shots / "overview.png", full_page=True)


def test_at_1024_px_no_page_scrolls_sideways_and_the_gauges_line_up(
    narrow: Page, fleet: Fleet
) -> None:
    fleet.submit(pytorchjob("wide-a", namespace="team-b", gpus=4, duration="10m"))
    log_in(narrow, "admin", "/ui/")
    for url in PAGES:
        narrow.goto(url)
        expect(narrow.locator("h1")).to_be_visible()
        expect(narrow.locator("#summary #sum-gpus-total")).to_have_text("48")  # every page
        width = narrow.evaluate("document.documentElement.scrollWidth")
        assert width <= 1024, f"{url} is {width} px wide"
    narrow.goto("/ui/")
    boxes = narrow.evaluate(
        "Array.from(document.querySelectorAll('table.tree svg.gauge'), g => {"
        " const r = g.getBoundingClientRect(); return [r.left, r.width]; })"
    )
    assert len(boxes) >= 7
    lefts, widths = {round(b[0]) for b in boxes}, {round(b[1]) for b in boxes}
    assert len(lefts) == 1 and len(widths) == 1, boxes


def test_the_search_box_filters_the_jobs_list(narrow: Page, fleet: Fleet, shots: Path) -> None:
    fleet.submit(pytorchjob("find-alpha", namespace="team-c", gpus=1, duration="10m"))
    fleet.submit(pytorchjob("find-beta", namespace="team-a", gpus=2, duration="10m"))
    log_in(narrow, "admin", "/ui/jobs")
    table = narrow.locator("#jobs")
    expect(table.locator("thead th")).to_have_text(
        [
            "NAME",
            "QUEUE",
            "STATE",
            "GPUS",
            "CLUSTER",
            "AGE",
            "START",
            "REASON",
            "RUN TIME",
            "PRIORITY",
            "KIND",
        ]
    )
    beta = table.locator('tr[data-job="team-a/find-beta"]')
    expect(beta.locator("td.gpus")).to_have_text("2")
    expect(beta.locator("td.run-time")).not_to_have_text("")
    box = narrow.get_by_label("Search this page")
    box.fill("alpha")
    expect(table.locator("tbody tr:visible")).to_have_count(1)
    expect(table.locator("tbody tr:visible")).to_contain_text("team-c/find-alpha")
    box.fill("team-a running")  # queue and state, every word must match
    visible = table.locator("tbody tr:visible")
    expect(visible.first).to_be_visible()
    for text in visible.all_inner_texts():
        assert "team-a" in text and "Running" in text
    expect(narrow.locator("#job-search-count")).to_contain_text("shown")
    box.fill("")
    narrow.screenshot(path=shots / "jobs.png", full_page=True)


def test_the_cell_map_names_queues_and_tells_their_jobs_apart(
    narrow: Page, fleet: Fleet, shots: Path
) -> None:
    for i in range(3):
        fleet.submit(pytorchjob(f"shade-{i}", namespace="team-c", gpus=2, duration="10m"))
    log_in(narrow, "admin", "/ui/clusters")
    placed: dict[str, str] = {}
    for _ in range(60):
        placed = {
            f"team-c/shade-{i}": found["cluster"]
            for i in range(3)
            if (found := fleet.call("GET", f"/api/v1/jobs/team-c/shade-{i}"))["cluster"]
        }
        if len(placed) == 3:
            break
        narrow.wait_for_timeout(500)
    cluster = max(set(placed.values()), key=list(placed.values()).count)
    narrow.goto(f"/ui/clusters/{cluster}")
    legend = narrow.locator('#legend [data-vc="team-c"]')
    expect(legend).to_contain_text("team-c")
    expect(legend.locator(".cell-sample")).to_have_text("TC")  # the queue's initials
    here = [job for job, where in placed.items() if where == cluster]
    assert len(here) >= 2, placed
    jobs = narrow.locator('#job-legend li[data-vc="team-c"]')
    for job in here:  # the legend names every job on the map
        expect(jobs.filter(has_text=job)).to_have_count(1)
    shades = set()
    for job in here:
        cell = narrow.locator(f'#cellmap li[data-job="{job}"]').first
        expect(cell).to_contain_text("TC")
        assert job in (cell.get_attribute("title") or "")
        classes = (cell.get_attribute("class") or "").split()
        shades.add(next(c for c in classes if c.startswith("shade-")))
    assert len(shades) == len(here)  # jobs of one queue look different
    narrow.screenshot(path=shots / "cluster-jobs.png", full_page=True)


def test_a_day_of_history_on_the_overview(narrow: Page, fleet: Fleet, shots: Path) -> None:
    """A day of samples from before the server started (written into its store as the
    sampler writes them: a busy day of four queues), then the live ones."""
    first = fleet.started - 24 * 3600
    rows = []
    for i in range(int((fleet.started - 120 - first) // 60)):
        at, hour = first + 60 * i, i / 60
        load = {
            "team-a": round(14 + 10 * math.sin(hour / 3.8)),
            "team-b": round(12 + 9 * math.sin(hour / 2.9 + 1.3)),
            "team-c": round(9 + 7 * math.sin(hour / 5.1 + 2.1)),
            "sandbox": 8 if 9 <= hour % 24 <= 13 else 0,
        }
        depth = {
            q: max(0, round((2 + k) * math.sin(hour / (1.3 + 0.6 * k) + k)))
            for k, q in enumerate(load)
        }
        wait = {q: 30 + 400 * d for q, d in depth.items()}
        for q in load:
            rows.append((at, q, load[q], max(1, load[q] // 4), depth[q], wait[q], 3))
        rows.append((at, "", sum(load.values()), 9, sum(depth.values()), max(wait.values()), 12))
    with sqlite3.connect(fleet.database) as db:
        db.executemany("INSERT OR REPLACE INTO queue_samples VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    log_in(narrow, "admin", "/ui/?window=24h")
    gpus = narrow.locator("#chart-gpus")
    expect(gpus.locator("path.line[data-queue]")).to_have_count(len(LEAVES))
    path = gpus.locator('path.line[data-queue="team-a"]').get_attribute("d") or ""
    assert path.count("L") > 200  # a day of samples, merged to what the width shows
    expect(narrow.locator('nav.windows a[aria-current="page"]')).to_have_text("last 24h")
    narrow.screenshot(path=shots / "overview-day.png", full_page=True)
