"""The query page in a real browser: Debian's headless Chromium driven by selenium.

The daemon runs on the test's event loop; selenium is blocking, so the browser is driven from
a worker thread. The page draws each series as an SVG path whose ``data-points``
attribute holds the [timestamp, value] pairs it plotted, which the test compares with what
was stored; ``data-gaps``, ``data-axis``, the markers and the svg's ``data-*`` attributes say
how it drew them.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.server.conftest import MakeTsd
from tsd.daemon import Daemon

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
FREE = [10, 20, 15, 30, 25, 40]  # sys.mem.free{host=web01}, the second query
NOTE = "<b>deploy</b> & <i>restart</i>"  # annotation text: must show as text, not markup


@contextmanager
def browser(*flags: str) -> Iterator[Any]:
    """Headless Chromium with the test flags, plus ``flags`` (``--host-resolver-rules``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1100,900")
    for flag in flags:
        options.add_argument(flag)
    # UTC: time labels (and where a new day's date shows) do not depend on the machine.
    service = Service(executable_path=CHROMEDRIVER, env={**os.environ, "TZ": "UTC"})
    driver = webdriver.Chrome(service=service, options=options)
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
            "query": int(line.get_attribute("data-query")),
            "points": json.loads(line.get_attribute("data-points")),
            "drawn": line.get_attribute("d"),
            "axis": line.get_attribute("data-axis"),
            "gaps": json.loads(line.get_attribute("data-gaps")),
        }
        for line in driver.find_elements("css selector", "#chart svg path.series")
    ]


def vertices(d: str) -> list[int]:
    """The number of vertices of each run (``M`` starts one) of a path's ``d``."""
    return [len(run.split("L")) for run in d.split("M")[1:]]


def by_label(drawn: list[dict[str, Any]]) -> dict[str, tuple[int, list[list[float]]]]:
    return {series["label"]: (series["query"], series["points"]) for series in drawn}


def ticks(driver: Any, kind: str) -> list[float]:
    found = driver.find_elements("css selector", f"#chart svg text.{kind}")
    return [float(t.get_attribute("data-v")) for t in found]


def is_one_two_five(step: float) -> bool:
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    return any(math.isclose(mantissa, m) for m in (1, 2, 5, 10))


def plot_offset(driver: Any, t: float) -> tuple[Any, int, int]:
    """The svg and the offset from its centre (selenium's origin) of time ``t``, mid-height."""
    svg = driver.find_element("css selector", "#chart svg")
    box = {k: float(svg.get_attribute(f"data-{k}")) for k in ("x-min", "x-max")}
    left, width = (float(svg.get_attribute(f"data-plot-{k}")) for k in ("left", "width"))
    x = left + (t - box["x-min"]) / (box["x-max"] - box["x-min"]) * width
    return svg, round(x - float(svg.get_attribute("width")) / 2), 0


def use_the_page(base: str) -> dict[str, Any]:
    """Two queries through the form (reading the suggestions), a hover, a drag-to-zoom."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import Select, WebDriverWait

    seen: dict[str, Any] = {}
    with browser() as driver:
        driver.get(base + "/")

        def suggested(d: Any) -> list[str]:
            # Read in one script, in the page's own turn: the page replaces the options as
            # the user types, so options found in one call can be gone by the next.
            values: list[str] = d.execute_script(
                "return Array.from(document.querySelectorAll("
                "'#metric-suggestions option'), option => option.value)"
            )
            return values

        # On load the page lists every metric; typing narrows the list.
        WebDriverWait(driver, 30).until(lambda d: len(suggested(d)) == 2)
        first = driver.find_elements("css selector", "#queries .query")[0]
        first.find_element("css selector", ".metric").send_keys("sys.c")
        WebDriverWait(driver, 30).until(lambda d: len(suggested(d)) == 1)
        seen["suggestions"] = suggested(driver)
        first.find_element("css selector", ".metric").send_keys("pu.user")
        first.find_element("css selector", ".tags").send_keys("host=*")
        Select(first.find_element("css selector", ".aggregator")).select_by_visible_text("sum")
        driver.find_element("id", "add-query").click()
        second = driver.find_elements("css selector", "#queries .query")[1]
        second.find_element("css selector", ".metric").send_keys("sys.mem.free")
        Select(second.find_element("css selector", ".aggregator")).select_by_visible_text("max")
        for field, value in (("start", str(T0)), ("end", str(T0 + 600))):
            box = driver.find_element("id", field)
            box.clear()
            box.send_keys(value)
        driver.find_element("id", "graph").click()
        seen["drawn"] = wait_for_chart(driver)
        seen["yticks"], seen["xticks"] = ticks(driver, "ytick"), ticks(driver, "xtick")
        svg = driver.find_element("css selector", "#chart svg")
        seen["time_step"] = svg.get_attribute("data-time-step")
        seen["y_range"] = [float(svg.get_attribute(f"data-y-{k}")) for k in ("min", "max")]
        title = svg.find_element("css selector", "path.annotation title")
        seen["note"] = title.get_attribute("textContent")
        seen["markup_in_chart"] = len(driver.find_elements("css selector", "#chart b, #chart i"))

        # Hover over the third point: the tooltip lists every series' stored value there.
        svg, dx, dy = plot_offset(driver, T0 + 120)
        ActionChains(driver).move_to_element_with_offset(svg, dx, dy).perform()
        tip = driver.find_element("id", "tooltip")
        WebDriverWait(driver, 10).until(lambda d: tip.get_attribute("data-t") is not None)
        seen["hover_t"] = float(tip.get_attribute("data-t"))
        seen["hover"] = {
            row.get_attribute("data-label"): float(row.get_attribute("data-v"))
            for row in tip.find_elements("css selector", ".value")
        }

        # Drag from just before the 2nd point to just after the 4th: the page asks again.
        svg, x_from, dy = plot_offset(driver, T0 + 60 - 15)
        _, x_to, _ = plot_offset(driver, T0 + 180 + 15)
        (
            ActionChains(driver)
            .move_to_element_with_offset(svg, x_from, dy)
            .click_and_hold()
            .move_by_offset(x_to - x_from, 0)
            .release()
            .perform()
        )
        seen["zoomed"] = wait_for_chart(driver)
        seen["zoom_range"] = [
            int(driver.find_element("id", k).get_attribute("value")) for k in ("start", "end")
        ]
        seen["link"] = driver.find_element("id", "permalink").get_attribute("href")

        # The status view, fed by /api/stats.
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element("id", "daemon").get_attribute("data-state") == "done"
        )
        seen["status"] = {
            row.find_element("tag name", "th").text: row.find_element("tag name", "td").text
            for row in driver.find_elements("css selector", "#daemon-stats tr")
        }
    return seen


def open_link(link: str) -> list[dict[str, Any]]:
    with browser() as driver:
        driver.get(link)
        return wait_for_chart(driver)


async def test_the_page_charts_two_queries_hovers_and_zooms(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    base = f"http://127.0.0.1:{daemon.port}"
    points = [
        {"metric": "sys.cpu.user", "timestamp": T0 + 60 * i, "value": v, "tags": {"host": h}}
        for h, values in VALUES.items()
        for i, v in enumerate(values)
    ] + [
        {"metric": "sys.mem.free", "timestamp": T0 + 60 * i, "value": v, "tags": {"host": "web01"}}
        for i, v in enumerate(FREE)
    ]
    async with aiohttp.ClientSession() as http:
        async with http.post(base + "/api/put?sync", json=points) as reply:
            assert reply.status == 204
        query = f"/api/query?start={T0}&m=max:sys.mem.free&show_tsuids=true"
        async with http.get(base + query) as reply:
            tsuid = (await reply.json())[0]["tsuids"][0]
        note = {"tsuid": tsuid, "startTime": T0 + 240, "description": NOTE}
        async with http.post(base + "/api/annotation", json=note) as reply:
            assert reply.status == 200, await reply.text()
        async with http.get(base + "/api/stats") as reply:
            added = sum(
                int(r["value"]) for r in await reply.json() if r["metric"] == "tsd.datapoints.added"
            )

    seen = await asyncio.to_thread(use_the_page, base)

    assert seen["suggestions"] == ["sys.cpu.user"]
    stored = {
        f"sys.cpu.user{{host={h}}}": (0, [[T0 + 60 * i, v] for i, v in enumerate(values)])
        for h, values in VALUES.items()
    }
    stored["sys.mem.free{host=web01}"] = (1, [[T0 + 60 * i, v] for i, v in enumerate(FREE)])
    assert by_label(seen["drawn"]) == stored
    for series in seen["drawn"]:  # one line through every stored point
        assert vertices(series["drawn"]) == [len(series["points"])]
        assert series["gaps"] == []

    # y ticks: evenly spaced 1-2-5 steps spanning every value.
    yticks = seen["yticks"]
    steps = {round(b - a, 9) for a, b in zip(yticks, yticks[1:], strict=False)}
    assert len(steps) == 1
    assert is_one_two_five(steps.pop())
    assert seen["y_range"] == [yticks[0], yticks[-1]]
    assert yticks[0] <= 1
    assert yticks[-1] >= 40
    # x ticks: a whole number of seconds or minutes apart, each on a multiple of that step.
    step = int(seen["time_step"][:-1]) * {"s": 1, "m": 60}[seen["time_step"][-1]]
    xticks = seen["xticks"]
    assert len(xticks) >= 3
    assert all(t % step == 0 for t in xticks)
    assert {b - a for a, b in zip(xticks, xticks[1:], strict=False)} == {step}

    # Annotation text is text: no element made from it.
    assert NOTE in seen["note"]
    assert seen["markup_in_chart"] == 0

    assert seen["hover_t"] == T0 + 120
    assert seen["hover"] == {label: points[2][1] for label, (_, points) in stored.items()}

    start, end = seen["zoom_range"]
    assert T0 + 30 <= start <= T0 + 60
    assert T0 + 180 <= end <= T0 + 210
    zoomed = {
        label: (query, [p for p in points if start <= p[0] <= end])
        for label, (query, points) in stored.items()
    }
    assert by_label(seen["zoomed"]) == zoomed
    assert all(len(points) == 3 for _, points in zoomed.values())

    # The link reproduces the zoomed view with both queries: a fresh browser draws it again.
    again = await asyncio.to_thread(open_link, seen["link"])
    assert by_label(again) == zoomed

    assert seen["status"]["Points added"] == str(added)
    assert "Storage calls" in seen["status"]


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


async def test_the_page_works_behind_basic_auth(make_tsd: MakeTsd, tmp_path: Path) -> None:
    """With authentication on, the browser's own basic-auth credentials reach every request
    the page makes (same-origin fetches), through the origin guard."""
    from tests.server.test_auth import SECRETS, basic, users_file

    daemon = await make_tsd(
        **{
            "tsd.core.authentication.enable": "true",
            "tsd.core.authentication.users_file": str(users_file(tmp_path)),
        }
    )
    points = [
        {"metric": "sys.cpu.user", "timestamp": T0 + 60 * i, "value": v, "tags": {"host": "a"}}
        for i, v in enumerate(FREE)
    ]
    base = f"http://127.0.0.1:{daemon.port}"
    async with (
        aiohttp.ClientSession(headers=basic("writer")) as http,
        http.post(base + "/api/put?sync", json=points) as reply,
    ):
        assert reply.status == 204

    def look() -> tuple[list[dict[str, Any]], str | None]:
        from selenium.webdriver.support.ui import WebDriverWait

        with browser() as driver:
            # Credentials in the URL: the browser answers the 401 challenge with them.
            authed = base.replace("http://", f"http://reader:{SECRETS['reader']}@")
            driver.get(f"{authed}/?metric=sys.cpu.user&start={T0}&end={T0 + 600}")
            drawn = wait_for_chart(driver)
            WebDriverWait(driver, 30).until(
                lambda d: d.find_element("id", "daemon").get_attribute("data-state") is not None
            )
            return drawn, driver.find_element("id", "daemon").get_attribute("data-state")

    drawn, stats_state = await asyncio.to_thread(look)
    assert by_label(drawn) == {
        "sys.cpu.user{host=a}": (0, [[T0 + 60 * i, v] for i, v in enumerate(FREE)])
    }
    assert stats_state == "done"


async def test_a_relative_range_refreshes_by_itself(make_tsd: MakeTsd) -> None:
    """``start=1h-ago`` with a 10 s refresh: a point stored after the page drew appears on the
    chart without a click."""
    daemon = await make_tsd()
    base = f"http://127.0.0.1:{daemon.port}"
    now = int(time.time())
    first = [
        {"metric": "live.m", "timestamp": now - 600 + 60 * i, "value": i, "tags": {"h": "a"}}
        for i in range(5)
    ]
    late = {"metric": "live.m", "timestamp": now, "value": 99, "tags": {"h": "a"}}

    async def put(body: Any) -> None:
        async with (
            aiohttp.ClientSession() as http,
            http.post(base + "/api/put?sync", json=body) as reply,
        ):
            assert reply.status == 204

    await put(first)
    drawn_once = threading.Event()
    stored_late = threading.Event()

    def watch() -> tuple[list[dict[str, Any]], str, list[dict[str, Any]]]:
        from selenium.common.exceptions import StaleElementReferenceException
        from selenium.webdriver.support.ui import WebDriverWait

        with browser() as driver:
            driver.get(f"{base}/?metric=live.m&start=1h-ago&refresh=10")
            before = wait_for_chart(driver)
            chosen = driver.find_element("id", "range").get_attribute("value")
            drawn_once.set()
            assert stored_late.wait(30)
            # The page redraws on each refresh: an element found just before a redraw is
            # stale when read, so the wait tries again rather than failing.
            WebDriverWait(driver, 40, ignored_exceptions=(StaleElementReferenceException,)).until(
                lambda d: len(json.loads(
                    d.find_element("css selector", "#chart path.series")
                    .get_attribute("data-points")
                )) == 6
            )  # fmt: skip
            return before, chosen, wait_for_chart(driver)

    watching = asyncio.create_task(asyncio.to_thread(watch))
    assert await asyncio.to_thread(drawn_once.wait, 60)
    await put(late)
    stored_late.set()
    before, chosen, after = await watching
    assert chosen == "1h-ago"
    assert by_label(before) == {"live.m{h=a}": (0, [[p["timestamp"], p["value"]] for p in first])}
    assert by_label(after) == {
        "live.m{h=a}": (0, [[p["timestamp"], p["value"]] for p in [*first, late]])
    }


# -- markers, the right axis, log scale, gaps, labels (issue 25) -------------------------------

#: gap.m: a run every minute, a lone point, another run (gaps of 4 minutes around it)
GAPPY = [0, 60, 120, 180, 240, 480, 720, 780, 840, 900, 960, 1020, 1080, 1140, 1200]
BIG = [1_000_000 + 50_000 * i for i in range(21)]  # a counter, every minute
SMALL = [0.5 + (i % 4) * 0.5 for i in range(21)]  # a load average beside it
DECADES = [1, 10, 100, 1000, 0, 1, 10]  # wide.m: the 0 has no place on a log scale
B0 = T0 + 6000  # 23:40 UTC: a chart of 20 minutes from here ends at midnight

SVG_STATE = """
const svg = document.querySelector('#chart svg');
const text = Array.from(svg.querySelectorAll('text')).map((t) => {
  const b = t.getBBox();
  return [t.getAttribute('class'), t.textContent, b.x, b.width, Number(t.dataset.v)];
});
const markers = Array.from(svg.querySelectorAll('circle.marker')).map((c) => ({
  label: c.dataset.label, t: Number(c.dataset.t), v: Number(c.dataset.v),
  cx: Number(c.getAttribute('cx')), cy: Number(c.getAttribute('cy'))}));
const attrs = {};
for (const a of svg.attributes) attrs[a.name] = a.value;
return {attrs, text, markers, link: document.getElementById('permalink').href,
        legend: Array.from(document.querySelectorAll('#legend li')).map((li) => li.textContent)};
"""


async def put_sync(daemon: Daemon, points: list[dict[str, Any]]) -> str:
    """Store ``points`` through /api/put?sync; the daemon's base URL."""
    base = f"http://127.0.0.1:{daemon.port}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(base + "/api/put?sync", json=points) as reply,
    ):
        assert reply.status == 204
    return base


def chart_state(driver: Any, form: bool = False) -> dict[str, Any]:
    """What the chart drew (and, with ``form``, the scale and axis choices shown)."""
    from selenium.webdriver.support.ui import Select

    drawn = wait_for_chart(driver)
    state: dict[str, Any] = driver.execute_script(SVG_STATE)
    state["series"] = {series["label"]: series for series in drawn}
    if form:
        state["form"] = {
            "ylog": driver.find_element("id", "ylog").is_selected(),
            "y2log": driver.find_element("id", "y2log").is_selected(),
            "axes": [
                Select(r.find_element("css selector", ".axis")).first_selected_option.text
                for r in driver.find_elements("css selector", "#queries .query")
            ],
        }
    return state


def ys(d: str) -> list[float]:
    """The y pixel of every vertex of a path's ``d``."""
    return [float(p.split(",")[1]) for p in d.replace("M", " ").replace("L", " ").split()]


def choose_axes_and_scales(base: str, start: int) -> dict[str, dict[str, Any]]:
    """One link with every query on the left axis; then, in the form, small.m to the right
    axis, then log y; then the page's own link opened in a fresh browser, log y2 chosen
    there and its link opened again."""
    from selenium.webdriver.support.ui import Select

    queries = "&".join(
        f"metric={m}&tags=&aggregator=sum&downsample=&rate=&axis="
        for m in ("gap.m", "one.m", "big.m", "small.m")
    )
    seen: dict[str, dict[str, Any]] = {}
    with browser() as driver:
        driver.set_window_size(1100, 1500)  # the whole chart in view, for the screenshots
        driver.get(f"{base}/?{queries}&start={start}&end={start + 1200}")
        seen["shared"] = chart_state(driver)
        driver.find_element("id", "chart").screenshot("/tmp/tsd-page-shared.png")
        row = driver.find_elements("css selector", "#queries .query")[3]
        Select(row.find_element("css selector", ".axis")).select_by_value("y2")
        driver.find_element("id", "graph").click()
        seen["right"] = chart_state(driver)
        driver.find_element("id", "chart").screenshot("/tmp/tsd-page-right.png")
        driver.find_element("id", "ylog").click()
        seen["log"] = chart_state(driver)
        driver.find_element("id", "chart").screenshot("/tmp/tsd-page-log.png")
    with browser() as driver:
        driver.set_window_size(1100, 1500)
        driver.get(seen["log"]["link"])
        seen["again"] = chart_state(driver, form=True)
        driver.find_element("id", "y2log").click()  # and log y2 too
        seen["both"] = chart_state(driver)
        driver.get(seen["both"]["link"])
        seen["both_again"] = chart_state(driver, form=True)
    return seen


def assert_no_label_clipped(state: dict[str, Any]) -> None:
    width = float(state["attrs"]["width"])
    for cls, text, x, w, _ in state["text"]:
        assert x >= 0, (cls, text, x)
        assert x + w <= width, (cls, text, x, w, width)


async def test_markers_right_axis_log_scale_gaps_and_labels(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    assert (B0 + 1200) % 86400 == 0  # the last time label is a new day's: the widest
    put = [
        {"metric": "gap.m", "timestamp": B0 + t, "value": 2 + i % 3, "tags": {"h": "a"}}
        for i, t in enumerate(GAPPY)
    ]
    put.append({"metric": "one.m", "timestamp": B0 + 300, "value": 3, "tags": {"h": "a"}})
    for metric, values in (("big.m", BIG), ("small.m", SMALL), ("wide.m", DECADES)):
        put += [
            {"metric": metric, "timestamp": B0 + 60 * i, "value": v, "tags": {"h": "a"}}
            for i, v in enumerate(values)
        ]
    base = await put_sync(daemon, put)

    seen = await asyncio.to_thread(choose_axes_and_scales, base, B0)

    shared, right, log, again = seen["shared"], seen["right"], seen["log"], seen["again"]
    plot_top = float(shared["attrs"]["data-plot-top"])
    plot_h = float(shared["attrs"]["data-plot-height"])
    for state in (shared, right, log, again):
        # Gaps: a break where points are more than twice the median minute apart; the lone
        # point between them and the one-point series are drawn as markers.
        gap = state["series"]["gap.m{h=a}"]
        assert gap["gaps"] == [[B0 + 240, B0 + 480], [B0 + 480, B0 + 720]]
        assert vertices(gap["drawn"]) == [5, 1, 9]
        assert vertices(state["series"]["one.m{h=a}"]["drawn"]) == [1]
        assert {(m["label"], m["t"], m["v"]) for m in state["markers"]} == {
            ("gap.m{h=a}", B0 + 480, 4),
            ("one.m{h=a}", B0 + 300, 3),
        }
        svg = state["attrs"]
        x0, x1 = float(svg["data-x-min"]), float(svg["data-x-max"])
        left, width = float(svg["data-plot-left"]), float(svg["data-plot-width"])
        for marker in state["markers"]:
            assert marker["cx"] == pytest.approx(
                left + (marker["t"] - x0) / (x1 - x0) * width, 0.01
            )
            assert plot_top <= marker["cy"] <= plot_top + plot_h
        # Labels: the last time tick sits on the right edge of the plot, and no label
        # (time, y or y2) crosses the svg's edges.
        assert x1 == B0 + 1200
        assert max(v for cls, *_, v in state["text"] if cls == "xtick") == x1
        assert_no_label_clipped(state)
    # the last label reaches past the old fixed margin (20 px), where it was clipped
    last = max((t for t in shared["text"] if t[0] == "xtick"), key=lambda t: t[4])
    assert last[2] + last[3] > float(shared["attrs"]["width"]) - 20

    # One axis: the load average is flat against the counter.
    assert "data-y2-min" not in shared["attrs"]
    assert {s["axis"] for s in shared["series"].values()} == {"y"}
    assert (
        max(ys(shared["series"]["small.m{h=a}"]["drawn"]))
        - min(ys(shared["series"]["small.m{h=a}"]["drawn"]))
        < 2
    )
    # small.m on the right axis: its own scale, so it spans the plot's height.
    small = right["series"]["small.m{h=a}"]
    assert small["axis"] == "y2"
    assert right["attrs"]["data-y2-scale"] == "linear"
    assert float(right["attrs"]["data-y2-min"]) <= min(SMALL)
    assert max(SMALL) <= float(right["attrs"]["data-y2-max"]) <= 10
    assert float(right["attrs"]["data-y-max"]) >= max(BIG)
    assert max(ys(small["drawn"])) - min(ys(small["drawn"])) > plot_h / 2
    y2ticks = [v for cls, *_, v in right["text"] if cls == "y2tick"]
    assert len(y2ticks) >= 3
    assert "small.m{h=a} (right axis)" in " ".join(right["legend"])
    assert "axis=y2" in right["link"]

    # Log y: decades on the left axis, the right one stays linear.
    assert log["attrs"]["data-y-scale"] == "log"
    assert log["attrs"]["data-y2-scale"] == "linear"
    yticks = [v for cls, *_, v in log["text"] if cls == "ytick"]
    assert yticks == [10**k for k in range(8)]  # 2 (gap.m) to 2,000,000 (big.m): decades
    big = log["series"]["big.m{h=a}"]
    assert vertices(big["drawn"]) == [len(BIG)]
    assert "ylog=1" in log["link"]

    # The link reproduces it all in a fresh browser.
    axes = ["left (y)"] * 3 + ["right (y2)"]
    assert again["form"] == {"ylog": True, "y2log": False, "axes": axes}
    assert {k: v for k, v in again["attrs"].items() if k.startswith("data-")} == {
        k: v for k, v in log["attrs"].items() if k.startswith("data-")
    }
    # Log y2 as well: 0.5 to 2 within two decades, so 1-2-5 ticks; the link keeps it.
    both, both_again = seen["both"], seen["both_again"]
    assert both["attrs"]["data-y2-scale"] == "log"
    assert [v for cls, *_, v in both["text"] if cls == "y2tick"] == [0.1, 0.2, 0.5, 1, 2, 5, 10]
    assert "y2log=1" in both["link"]
    assert both_again["form"] == {"ylog": True, "y2log": True, "axes": axes}
    assert both_again["attrs"] == both["attrs"]
    assert_no_label_clipped(both)


async def test_log_scale_spaces_decades_evenly_and_breaks_at_zero(make_tsd: MakeTsd) -> None:
    daemon = await make_tsd()
    put = [
        {"metric": "wide.m", "timestamp": T0 + 60 * i, "value": v, "tags": {"h": "a"}}
        for i, v in enumerate(DECADES)
    ]
    base = await put_sync(daemon, put)

    def look() -> dict[str, Any]:
        with browser() as driver:
            driver.get(f"{base}/?metric=wide.m&start={T0}&end={T0 + 600}&ylog=1")
            return chart_state(driver)

    state = await asyncio.to_thread(look)
    wide = state["series"]["wide.m{h=a}"]
    assert state["attrs"]["data-y-scale"] == "log"
    assert (float(state["attrs"]["data-y-min"]), float(state["attrs"]["data-y-max"])) == (1, 1000)
    # the 0 cannot be drawn: the line breaks there, both sides drawn
    assert wide["gaps"] == [[T0 + 180, T0 + 300]]
    assert vertices(wide["drawn"]) == [4, 2]
    first = ys(wide["drawn"])[:4]  # 1, 10, 100, 1000: one decade each, evenly spaced
    steps = [a - b for a, b in zip(first, first[1:], strict=False)]
    assert steps[0] > 0
    assert all(s == pytest.approx(steps[0], abs=0.02) for s in steps)
    ticks = sorted(v for cls, *_, v in state["text"] if cls == "ytick")
    assert ticks == [1, 10, 100, 1000]
    assert_no_label_clipped(state)
