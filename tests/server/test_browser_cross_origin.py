"""A page from another origin, opened in headless Chromium, aims the daemon's admin and
write endpoints (issue 13): ``<img>`` GETs of /diediedie, /api/uid/assign and an
annotation delete by method_override, a text/plain form POST to /api/put, a no-cors
fetch POST to /api/uid/assign and a DELETE of an annotation. Afterwards the daemon is
alive, every request that reached it was refused, and storage is unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.server.conftest import MakeTsd
from tests.server.support import storage_snapshot
from tests.server.test_ui_browser import browser, pytestmark  # noqa: F401 (skip without chromium)

T0 = 1_700_000_000
#: An annotation whose text would run script if the browser rendered it as HTML.
TRAP = "<img src=x onerror=\"document.title='rendered'\">"

PAGE = """<!doctype html><html><head><title>loading</title></head><body>
<iframe name="sink"></iframe>
<form id="put" method="POST" enctype="text/plain" target="sink"
      action="{tsd}/api/put?sync"><input
  name='{{"metric":"evil.form","timestamp":{t0},"value":1,"tags":{{"h":"a"}},"x":"'
  value='"}}'></form>
<script>
const tsd = "{tsd}";
const image = (path) => new Promise((done) => {{
  const img = new Image(); img.onload = img.onerror = done; img.src = tsd + path;
}});
const settle = (p) => p.then(() => "sent", (e) => "failed");
const sent = Promise.all([
  image("/diediedie"),
  image("/api/uid/assign?metric=evil.img"),
  image("/api/annotation?start_time={t0}&method_override=delete"),
  settle(fetch(tsd + "/api/uid/assign", {{method: "POST", mode: "no-cors",
    body: '{{"metric":["evil.fetch"]}}'}})),
  settle(fetch(tsd + "/api/annotation?start_time={t0}", {{method: "DELETE"}})),
  new Promise((done) => {{
    document.querySelector("iframe").onload = done;
    document.getElementById("put").submit();
  }}),
]);
sent.then(() => {{ document.title = "done"; }});
</script></body></html>"""


@pytest.fixture
async def foreign_site() -> AsyncIterator[tuple[dict[str, str], int]]:
    """A tiny web server on another port; the browser reaches it as ``localhost``, another
    site than the daemon's ``127.0.0.1``."""
    app = web.Application()
    pages: dict[str, str] = {}

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=pages["/"], content_type="text/html")

    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield pages, port
    await runner.cleanup()


def open_and_wait(url: str) -> str:
    from selenium.webdriver.support.ui import WebDriverWait

    with browser() as driver:
        driver.get(url)
        WebDriverWait(driver, 30).until(lambda d: d.title == "done")
        return str(driver.title)


def read_json_directly(url: str) -> tuple[str, str]:
    """Open a JSON answer in the browser itself: its title and the text it shows."""
    with browser() as driver:
        driver.get(url)
        return str(driver.title), str(driver.find_element("tag name", "body").text)


async def test_foreign_page_changes_nothing(
    make_tsd: MakeTsd, foreign_site: tuple[dict[str, str], int]
) -> None:
    daemon = await make_tsd(**{"tsd.http.query.allow_delete": "true"})
    tsd = f"http://127.0.0.1:{daemon.port}"
    async with aiohttp.ClientSession() as http:
        point = {"metric": "good.m", "timestamp": T0, "value": 1, "tags": {"h": "a"}}
        async with http.post(tsd + "/api/put?sync", json=point) as reply:
            assert reply.status == 204
        note = {"startTime": T0, "description": TRAP}
        async with http.post(tsd + "/api/annotation", json=note) as reply:
            assert reply.status == 200
    before = await storage_snapshot(daemon)
    refused = daemon.registry.counter("http.cross_origin_refused")
    pages, port = foreign_site
    pages["/"] = PAGE.format(tsd=tsd, t0=T0)

    assert await asyncio.to_thread(open_and_wait, f"http://localhost:{port}/") == "done"

    assert not daemon.shutdown_requested
    assert await storage_snapshot(daemon) == before
    # three images, the form and the no-cors fetch reached the daemon and were refused;
    # the DELETE needed a CORS preflight, which the daemon (CORS off) did not grant.
    assert refused.value == 5
    # Stored text is data: opened directly, the browser shows the JSON, runs nothing.
    title, shown = await asyncio.to_thread(
        read_json_directly, f"{tsd}/api/annotation?start_time={T0}"
    )
    assert title != "rendered"
    assert "<img src=x onerror=" in shown  # shown as text
