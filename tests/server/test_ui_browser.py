"""The query page in a real browser: Debian's headless Chromium driven by selenium.

The daemon runs on the test's event loop; selenium is blocking, so the browser is driven from
a worker thread. The page draws each series as an SVG polyline whose ``data-points``
attribute holds the [timestamp, value] pairs it plotted, which the test compares with what
was stored.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
import pytest

from tests.server.conftest import MakeTsd

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

pytestmark = [
    pytest.mark.slow,  # a real browser
    pytest.mark.skipif(
        shutil.which(CHROMIUM) is None or shutil.which(CHROMEDRIVER) is None,
        reason="needs Debian's chromium and chromium-driver"
        " (apt-get install chromium chromium-driver)",
    ),
]

T0 = 1_699_999_200
VALUES = {"web01": [3, 5, 4, 8, 6, 7], "web02": [1, 1, 2, 3, 5, 8]}


@contextmanager
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for_chart(driver: Any) -> list[dict[str, Any]]:
    """Wait until the page has drawn (or failed), then read the series it drew."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(
        lambda d: d.find_element("id", "chart").get_attribute("data-state") in ("done", "error")
    )
    status = driver.find_element("id", "status").text
    assert driver.find_element("id", "chart").get_attribute("data-state") == "done", status
    return [
        {
            "label": line.get_attribute("data-label"),
            "points": json.loads(line.get_attribute("data-points")),
            "drawn": line.get_attribute("points"),
        }
        for line in driver.find_elements("css selector", "#chart svg polyline.series")
    ]


def use_the_form(base: str) -> tuple[list[str], list[dict[str, Any]], str]:
    """Type a metric (reading the suggestions), tags, range; press Graph; follow the link."""
    from selenium.webdriver.support.ui import Select, WebDriverWait

    with browser() as driver:
        driver.get(base + "/")
        metric = driver.find_element("id", "metric")

        def suggested(d: Any) -> list[str]:
            options = d.find_elements("css selector", "#metric-suggestions option")
            return [o.get_attribute("value") for o in options]

        # On load the page lists every metric; typing narrows the list.
        WebDriverWait(driver, 30).until(lambda d: len(suggested(d)) == 2)
        metric.send_keys("sys.c")
        WebDriverWait(driver, 30).until(lambda d: len(suggested(d)) == 1)
        suggestions = suggested(driver)
        metric.send_keys("pu.user")
        driver.find_element("id", "tags").send_keys("host=*")
        Select(driver.find_element("id", "aggregator")).select_by_visible_text("sum")
        for field, value in (("start", str(T0)), ("end", str(T0 + 600))):
            box = driver.find_element("id", field)
            box.clear()
            box.send_keys(value)
        driver.find_element("id", "graph").click()
        drawn = wait_for_chart(driver)
        link = driver.find_element("id", "permalink").get_attribute("href")
        return suggestions, drawn, link


def open_link(link: str) -> list[dict[str, Any]]:
    with browser() as driver:
        driver.get(link)
        return wait_for_chart(driver)


async def test_the_page_draws_the_stored_values(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    base = f"http://127.0.0.1:{daemon.port}"
    points = [
        {"metric": "sys.cpu.user", "timestamp": T0 + 60 * i, "value": v, "tags": {"host": h}}
        for h, values in VALUES.items()
        for i, v in enumerate(values)
    ] + [{"metric": "sys.mem.free", "timestamp": T0, "value": 1, "tags": {"host": "web01"}}]
    async with (
        aiohttp.ClientSession() as http,
        http.post(base + "/api/put?sync", json=points) as reply,
    ):
        assert reply.status == 204

    suggestions, drawn, link = await asyncio.to_thread(use_the_form, base)

    assert suggestions == ["sys.cpu.user"]
    expected = {
        f"sys.cpu.user{{host={h}}}": [[T0 + 60 * i, v] for i, v in enumerate(values)]
        for h, values in VALUES.items()
    }
    assert {series["label"]: series["points"] for series in drawn} == expected
    for series in drawn:  # one drawn vertex per stored point
        assert len(series["drawn"].split()) == len(series["points"])
    # The link reproduces the query: a fresh browser draws the same chart from it.
    assert "metric=sys.cpu.user" in link
    again = await asyncio.to_thread(open_link, link)
    assert {series["label"]: series["points"] for series in again} == expected


async def test_the_page_shows_query_errors(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    base = f"http://127.0.0.1:{daemon.port}"

    def ask_for_unknown_metric() -> tuple[str | None, str]:
        from selenium.webdriver.support.ui import WebDriverWait

        with browser() as driver:
            driver.get(f"{base}/?metric=nope&start={T0}&aggregator=sum")
            WebDriverWait(driver, 30).until(
                lambda d: d.find_element("id", "chart").get_attribute("data-state") == "error"
            )
            state = driver.find_element("id", "chart").get_attribute("data-state")
            return state, driver.find_element("id", "status").text

    state, status = await asyncio.to_thread(ask_for_unknown_metric)
    assert state == "error"
    assert status == "No such name for 'metrics': 'nope' (400)"
