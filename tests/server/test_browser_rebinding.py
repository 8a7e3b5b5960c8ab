"""DNS rebinding in headless Chromium (issue 25).

A hostile page is served from ``http://evil.example:PORT/``; then the name is re-pointed at
the TSD. Here Chromium's ``--host-resolver-rules`` maps ``evil.example`` to 127.0.0.1 for the
whole run and the test swaps the servers instead: the attacker's server answers on PORT,
stops, and the TSD starts on the same port. To the browser, the page and the TSD are then
one origin (``Host`` and ``Origin`` both say ``evil.example:PORT``), so the same-origin
policy lets the page read every answer and the Origin comparison passes. The page tries
``/diediedie`` (an ``<img>`` and a fetch), a put, and reads ``/api/query`` (once without a
``Referer``) and ``/api/suggest``; the daemon must refuse each, as the name is not one of its own.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import aiohttp
from aiohttp import web

from tests.server.conftest import MakeTsd
from tests.server.support import storage_snapshot
from tests.server.test_ui_browser import (  # noqa: F401 (pytestmark: skip without chromium)
    browser,
    by_label,
    pytestmark,
    wait_for_chart,
)
from tsd.daemon import Daemon

T0 = 1_700_000_000
SECRET = [17, 23, 42]  # the values a rebound page must not read
REBIND = "--host-resolver-rules=MAP evil.example 127.0.0.1, MAP tsd.example 127.0.0.1"

ATTACK = """<!doctype html><html><head><title>loading</title></head><body><pre id="out"></pre>
<script>
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
const attempt = async (path, init) => {
  try {
    const reply = await fetch(path, Object.assign({cache: "no-store"}, init || {}));
    return [reply.status, await reply.text()];
  } catch (e) { return ["failed", String(e)]; }
};
(async () => {
  document.title = "waiting";
  // Until the name answers from the TSD, the page's own server answers "attacker"; the
  // test says "go" once the TSD holds its data.
  while (!window.go) await sleep(50);
  for (;;) {
    const [status, text] = await attempt("/whoami");
    if (status !== "failed" && text !== "attacker") break;
    await sleep(100);
  }
  await new Promise((done) => {
    const img = new Image(); img.onload = img.onerror = done;
    img.referrerPolicy = "no-referrer"; img.src = "/diediedie";
  });
  const seen = {
    query: await attempt("/api/query?start=%(t0)d&m=sum:secret.m"),
    // no Referer, and a GET carries no Origin: only Sec-Fetch-Site says "browser"
    quiet: await attempt("/api/query?start=%(t0)d&m=sum:secret.m", {referrerPolicy: "no-referrer"}),
    // and Accept-Language blanked: the browser still sends the header
    blank: await attempt("/api/query?start=%(t0)d&m=sum:secret.m",
                         {referrerPolicy: "no-referrer", headers: {"Accept-Language": ""}}),
    suggest: await attempt("/api/suggest?type=metrics"),
    put: await attempt("/api/put?sync", {method: "POST", body: JSON.stringify(
      {metric: "evil.m", timestamp: %(t0)d, value: 1, tags: {h: "a"}})}),
    diediedie: await attempt("/diediedie"),
    quiet_diediedie: await attempt("/diediedie", {referrerPolicy: "no-referrer"}),
  };
  document.getElementById("out").textContent = JSON.stringify(seen);
  document.title = "done";
})();
</script></body></html>"""


async def attacker_site() -> tuple[web.AppRunner, int]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=ATTACK % {"t0": T0}, content_type="text/html")

    async def whoami(request: web.Request) -> web.Response:
        return web.Response(text="attacker")

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/whoami", whoami)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


async def store_secret(daemon: Daemon) -> None:
    points = [
        {"metric": "secret.m", "timestamp": T0 + 60 * i, "value": v, "tags": {"h": "a"}}
        for i, v in enumerate(SECRET)
    ]
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://127.0.0.1:{daemon.port}/api/put?sync", json=points) as reply,
    ):
        assert reply.status == 204


async def rebind_to_tsd(make_tsd: MakeTsd, **keys: str) -> tuple[Daemon, dict[str, Any], Any]:
    """Open the attack page, swap its server for a TSD holding secret.m, and return the
    daemon, what the page saw, and the storage snapshot taken before the page acted."""
    runner, port = await attacker_site()
    waiting, swapped = threading.Event(), threading.Event()

    def attack() -> dict[str, Any]:
        from selenium.webdriver.support.ui import WebDriverWait

        with browser(REBIND) as driver:
            driver.get(f"http://evil.example:{port}/")
            WebDriverWait(driver, 30).until(lambda d: d.title == "waiting")
            waiting.set()
            assert swapped.wait(60)
            driver.execute_script("window.go = true")
            WebDriverWait(driver, 60).until(lambda d: d.title == "done")
            seen: dict[str, Any] = json.loads(driver.find_element("id", "out").text)
            return seen

    attacking = asyncio.create_task(asyncio.to_thread(attack))
    try:
        assert await asyncio.to_thread(waiting.wait, 60)
    finally:
        await runner.cleanup()
    daemon = await make_tsd(**{"tsd.network.port": str(port), **keys})
    await store_secret(daemon)
    before = await storage_snapshot(daemon)
    swapped.set()
    return daemon, await attacking, before


async def test_a_rebound_page_changes_and_reads_nothing(make_tsd: MakeTsd) -> None:
    daemon, seen, before = await rebind_to_tsd(make_tsd)

    assert not daemon.shutdown_requested
    assert await storage_snapshot(daemon) == before
    for name in ("query", "quiet", "blank", "suggest", "put", "diediedie", "quiet_diediedie"):
        status, text = seen[name]
        assert status == 403, (name, text)
        error = json.loads(text)["error"]
        assert error["message"] == "Host not allowed"
        assert "tsd.http.allowed_hosts" in error["details"]
        assert "secret.m" not in text
    # the <img>, /whoami and the seven fetches reached the daemon and were refused
    assert daemon.registry.counter("http.foreign_host_refused").value >= 9
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{daemon.port}/api/version") as reply,
    ):
        assert reply.status == 200


async def test_the_same_page_reads_everything_on_an_allowed_name(make_tsd: MakeTsd) -> None:
    """The control: listing the name (here with diediedie off, to keep the daemon) lets the
    very same page read the data, so the test above fails if the rule goes away."""
    daemon, seen, _ = await rebind_to_tsd(
        make_tsd, **{"tsd.http.allowed_hosts": "evil.example", "tsd.no_diediedie": "true"}
    )
    for name in ("query", "quiet", "blank"):
        status, text = seen[name]
        assert status == 200
        assert json.loads(text)[0]["dps"] == {str(T0 + 60 * i): v for i, v in enumerate(SECRET)}
    assert seen["suggest"] == [200, '["secret.m"]']
    assert not daemon.shutdown_requested


async def test_the_tsd_page_works_on_a_listed_name(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd(**{"tsd.http.allowed_hosts": "tsd.example"})
    await store_secret(daemon)

    def look(name: str) -> tuple[list[dict[str, Any]], str | None]:
        from selenium.webdriver.support.ui import WebDriverWait

        with browser(REBIND) as driver:
            driver.get(f"http://{name}:{daemon.port}/?metric=secret.m&start={T0}&end={T0 + 600}")
            drawn = wait_for_chart(driver)
            WebDriverWait(driver, 30).until(
                lambda d: d.find_element("id", "daemon").get_attribute("data-state") is not None
            )
            return drawn, driver.find_element("id", "daemon").get_attribute("data-state")

    for name in ("tsd.example", "localhost"):
        drawn, stats = await asyncio.to_thread(look, name)
        assert by_label(drawn) == {
            "secret.m{h=a}": (0, [[T0 + 60 * i, v] for i, v in enumerate(SECRET)])
        }, name
        assert stats == "done", name
