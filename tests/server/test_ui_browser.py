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


async def store(base: str, more: list[dict[str, Any]]) -> None:
    """The sys.cpu.user points of VALUES, and ``more``, stored (``?sync``)."""
    points = [
        {"metric": "sys.cpu.user", "timestamp": T0 + 60 * i, "value": v, "tags": {"host": h}}
        for h, values in VALUES.items()
        for i, v in enumerate(values)
    ] + more
    async with (
        aiohttp.ClientSession() as http,
        http.post(base + "/api/put?sync", json=points) as reply,
    ):
        assert reply.status == 204


async def test_the_page_draws_the_stored_values(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    base = f"http://127.0.0.1:{daemon.port}"
    await store(
        base, [{"metric": "sys.mem.free", "timestamp": T0, "value": 1, "tags": {"host": "web01"}}]
    )

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


def chart_geometry(driver: Any) -> dict[str, float]:
    svg = driver.find_element("css selector", "#chart svg")
    names = ("x-min", "x-max", "plot-left", "plot-width", "x-step", "y-step")
    return {name: float(svg.get_attribute(f"data-{name}")) for name in names}


def x_offset(geometry: dict[str, float], t: float) -> int:
    """Selenium's pointer offset (from the SVG's centre, 800 px wide) of time ``t``."""
    frac = (t - geometry["x-min"]) / (geometry["x-max"] - geometry["x-min"])
    return round(geometry["plot-left"] + frac * geometry["plot-width"] - 400)


def explore(base: str) -> dict[str, Any]:
    """Two queries on one chart; read the ticks; hover; drag to zoom; zoom out."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    seen: dict[str, Any] = {}
    with browser() as driver:
        driver.set_window_size(1280, 1024)  # the whole chart in view: offsets are from its centre
        driver.get(
            f"{base}/?metric=sys.cpu.user&tags=host%3D*&aggregator=sum&start={T0}&end={T0 + 600}"
        )
        wait_for_chart(driver)
        driver.find_element("id", "add-query").click()
        driver.find_element("css selector", ".extra-m").send_keys("sum:sys.mem.free")
        driver.find_element("id", "graph").click()
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element("id", "chart").get_attribute("data-loads") == "2"
        )
        seen["two"] = wait_for_chart(driver)
        seen["link"] = driver.find_element("id", "permalink").get_attribute("href")
        seen["y_ticks"] = [
            float(t.get_attribute("data-value"))
            for t in driver.find_elements("css selector", "#chart text.y-tick")
        ]
        seen["x_ticks"] = [
            int(t.get_attribute("data-time"))
            for t in driver.find_elements("css selector", "#chart text.x-tick")
        ]
        geometry = seen["geometry"] = chart_geometry(driver)
        svg = driver.find_element("css selector", "#chart svg")

        ActionChains(driver).move_to_element_with_offset(
            svg, x_offset(geometry, T0 + 120), 0
        ).perform()
        WebDriverWait(driver, 10).until(lambda d: d.find_element("id", "hover").is_displayed())
        hover = driver.find_element("id", "hover")
        seen["hover"] = (hover.get_attribute("data-time"), hover.text)

        (
            ActionChains(driver)
            .move_to_element_with_offset(svg, x_offset(geometry, T0 + 55), 0)
            .click_and_hold()
            .move_to_element_with_offset(svg, x_offset(geometry, T0 + 185), 0)
            .release()
            .perform()
        )
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element("id", "chart").get_attribute("data-loads") == "3"
        )
        seen["zoomed"] = wait_for_chart(driver)
        seen["range"] = (
            driver.find_element("id", "start").get_attribute("value"),
            driver.find_element("id", "end").get_attribute("value"),
        )
        driver.find_element("id", "unzoom").click()
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element("id", "chart").get_attribute("data-loads") == "4"
        )
        seen["unzoomed"] = wait_for_chart(driver)
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element("id", "stat-uids").get_attribute("data-metrics") is not None
        )
        seen["uids"] = driver.find_element("id", "stat-uids").get_attribute("data-metrics")
    return seen


async def test_two_queries_ticks_hover_and_zoom(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    base = f"http://127.0.0.1:{daemon.port}"
    await store(
        base,
        [
            {
                "metric": "sys.mem.free",
                "timestamp": T0 + 60 * i,
                "value": 0.25 * i,
                "tags": {"host": "web01"},
            }
            for i in range(6)
        ],
    )

    seen = await asyncio.to_thread(explore, base)

    labels = {series["label"] for series in seen["two"]}
    assert labels == {
        "sys.cpu.user{host=web01}",
        "sys.cpu.user{host=web02}",
        "sys.mem.free{host=web01}",
    }
    assert "m=sum%3Asys.mem.free" in seen["link"]
    # Round ticks: evenly spaced whole steps of 1, 2 or 5 times a power of ten, covering the data.
    step = seen["geometry"]["y-step"]
    assert step in (1.0, 2.0, 0.5)
    assert all(abs(v / step - round(v / step)) < 1e-9 for v in seen["y_ticks"])
    assert seen["y_ticks"][0] <= 0
    assert seen["y_ticks"][-1] >= 8
    time_step = seen["geometry"]["x-step"]
    assert all(t % time_step == 0 for t in seen["x_ticks"])
    assert 2 <= len(seen["x_ticks"]) <= 7
    # Hover: the values of every series at the nearest time.
    moment, text = seen["hover"]
    assert moment == str(T0 + 120)
    assert "sys.cpu.user{host=web01}: 4" in text.splitlines()
    assert "sys.cpu.user{host=web02}: 2" in text.splitlines()
    assert "sys.mem.free{host=web01}: 0.5" in text.splitlines()
    # Zoom: the dragged span becomes the query's range.
    start, end = (int(v) for v in seen["range"])
    assert T0 + 50 <= start <= T0 + 60
    assert T0 + 180 <= end <= T0 + 190
    for series in seen["zoomed"]:
        assert [t for t, _ in series["points"]] == [T0 + 60, T0 + 120, T0 + 180]
    assert {len(series["points"]) for series in seen["unzoomed"]} == {6}
    assert int(seen["uids"]) >= 2
