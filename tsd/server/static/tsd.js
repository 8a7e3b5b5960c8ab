// tsd's query page: a form (one query, more as m= expressions), /api/suggest for names,
// /api/query for data, an SVG line chart with round ticks on both axes, values on hover, drag
// to zoom, relative ranges and auto-refresh, and the TSD's own figures from /api/stats.
// Plain browser JavaScript, no build step. The chart exposes what it drew: every series is a
// <polyline> whose data-points attribute holds the [timestamp, value] pairs plotted.
"use strict";

(function () {
  const FIELDS = ["metric", "tags", "aggregator", "downsample", "rate", "start", "end"];
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const SVG_NS = "http://www.w3.org/2000/svg";
  const WIDTH = 800, HEIGHT = 320;
  const MARGIN = { left: 70, right: 20, top: 15, bottom: 35 };

  const $ = (id) => document.getElementById(id);

  function formState() {
    const state = {};
    for (const name of FIELDS) {
      const input = $(name);
      state[name] = input.type === "checkbox" ? (input.checked ? "1" : "") : input.value.trim();
    }
    return state;
  }

  function applyState(params) {
    for (const name of FIELDS) {
      if (!params.has(name)) continue;
      const input = $(name);
      if (input.type === "checkbox") input.checked = params.get(name) === "1";
      else input.value = params.get(name);
    }
  }

  // The m= expression OpenTSDB reads: agg:[downsample:][rate:]metric[{tags}]
  function mExpression(state) {
    let m = state.aggregator + ":";
    if (state.downsample) m += state.downsample + ":";
    if (state.rate) m += "rate:";
    m += state.metric;
    if (state.tags) m += "{" + state.tags + "}";
    return m;
  }

  function queryUrl(state) {
    const params = new URLSearchParams();
    params.set("start", state.start || "1h-ago");
    if (state.end) params.set("end", state.end);
    params.set("m", mExpression(state));
    for (const m of extraQueries()) params.append("m", m);
    return "/api/query?" + params.toString();
  }

  function pageUrl(state) {
    const params = new URLSearchParams();
    for (const name of FIELDS) if (state[name]) params.set(name, state[name]);
    for (const m of extraQueries()) params.append("m", m);
    if ($("refresh").value !== "0") params.set("refresh", $("refresh").value);
    return "/?" + params.toString();
  }

  async function getJson(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    const text = await response.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
    if (!response.ok) {
      const message = body && body.error ? body.error.message : response.statusText;
      throw new Error(message + " (" + response.status + ")");
    }
    return body;
  }

  // -- suggestions -------------------------------------------------------------------------

  function fillDatalist(id, values) {
    const list = $(id);
    list.replaceChildren(...values.map((v) => { const o = document.createElement("option"); o.value = v; return o; }));
  }

  function debounce(fn, ms) {
    let timer = null;
    return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
  }

  // Only the newest answer of each list is shown: an older request may finish later.
  const asked = { metrics: 0, tags: 0 };

  const suggestMetrics = debounce(async () => {
    const ticket = ++asked.metrics;
    try {
      const q = encodeURIComponent($("metric").value.trim());
      const names = await getJson("/api/suggest?type=metrics&max=25&q=" + q);
      if (ticket === asked.metrics) fillDatalist("metric-suggestions", names);
    } catch (e) { /* suggestions are a convenience */ }
  }, 150);

  const suggestTags = debounce(async () => {
    const ticket = ++asked.tags;
    const text = $("tags").value;
    const cut = text.lastIndexOf(",");
    const head = cut < 0 ? "" : text.slice(0, cut + 1);
    const last = text.slice(cut + 1);
    const eq = last.indexOf("=");
    try {
      let values;
      if (eq < 0) {
        const names = await getJson("/api/suggest?type=tagk&max=25&q=" + encodeURIComponent(last));
        values = names.map((k) => head + k + "=");
      } else {
        const key = last.slice(0, eq + 1);
        const names = await getJson("/api/suggest?type=tagv&max=25&q=" + encodeURIComponent(last.slice(eq + 1)));
        values = names.map((v) => head + key + v);
      }
      if (ticket === asked.tags) fillDatalist("tag-suggestions", values);
    } catch (e) { /* ignore */ }
  }, 150);

  async function loadAggregators() {
    const select = $("aggregator");
    const wanted = select.value || "sum";
    try {
      const names = (await getJson("/api/aggregators")).slice().sort();
      select.replaceChildren(...names.map((n) => { const o = document.createElement("option"); o.textContent = n; return o; }));
    } catch (e) { /* keep the default */ }
    select.value = wanted;
  }

  // -- the chart ---------------------------------------------------------------------------

  function seriesPoints(series) {
    const points = [];
    const dps = series.dps || {};
    const entries = Array.isArray(dps) ? dps : Object.entries(dps);
    for (const [ts, value] of entries) {
      const t = Number(ts), v = Number(value);
      if (value !== null && Number.isFinite(t) && Number.isFinite(v)) points.push([t, v]);
    }
    points.sort((a, b) => a[0] - b[0]);
    return points;
  }

  function label(series) {
    const tags = Object.entries(series.tags || {}).map(([k, v]) => k + "=" + v).join(",");
    return series.metric + (tags ? "{" + tags + "}" : "");
  }

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG_NS, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Value ticks: a step of 1, 2 or 5 times a power of ten, about `count` of them, the axis
  // widened to whole steps.
  function niceStep(span, count) {
    const raw = span / count;
    const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / magnitude;
    return (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * magnitude;
  }

  function valueTicks(lo, hi) {
    const step = niceStep(hi - lo, 5);
    const first = Math.floor(lo / step), last = Math.ceil(hi / step);
    const decimals = Math.max(0, -Math.floor(Math.log10(step)));
    const ticks = [];
    for (let i = first; i <= last; i++) {
      const v = i * step;
      const text = Math.abs(v) >= 1e9 ? v.toExponential(2) : v.toFixed(decimals);
      ticks.push([v, text === "-0" ? "0" : text]);
    }
    return { lo: first * step, hi: last * step, step, ticks };
  }

  // Time ticks: the smallest round interval giving at most 7 ticks, on multiples of it (UTC).
  const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800,
                      21600, 43200, 86400, 172800, 604800, 2592000];

  function timeTicks(x0, x1) {
    const span = x1 - x0;
    const step = TIME_STEPS.find((s) => span / s <= 7) || Math.ceil(span / 7);
    const ticks = [];
    for (let t = Math.ceil(x0 / step) * step; t <= x1; t += step) ticks.push([t, timeText(t, step, span)]);
    return { step, ticks };
  }

  function timeText(seconds, step, span) {
    const iso = new Date(seconds * 1000).toISOString();  // YYYY-MM-DDTHH:MM:SS
    if (step >= 86400) return iso.slice(5, 10);
    if (span > 86400) return iso.slice(5, 16).replace("T", " ");
    return step < 60 ? iso.slice(11, 19) : iso.slice(11, 16);
  }

  function fullTime(seconds) {
    return new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  // What is drawn, for hover and zoom.
  let drawn = null;

  function drawChart(results) {
    const chart = $("chart"), legend = $("legend");
    chart.replaceChildren();
    legend.replaceChildren();
    $("hover").hidden = true;
    drawn = null;
    const all = results.map((s) => ({ label: label(s), points: seriesPoints(s) }));
    const flat = all.flatMap((s) => s.points);
    if (flat.length === 0) {
      $("status").textContent = "No data points in this time range.";
      chart.dataset.series = "0";
      return;
    }
    let x0 = Infinity, x1 = -Infinity, lo = Infinity, hi = -Infinity;
    for (const [t, v] of flat) {
      x0 = Math.min(x0, t); x1 = Math.max(x1, t); lo = Math.min(lo, v); hi = Math.max(hi, v);
    }
    if (x0 === x1) { x0 -= 30; x1 += 30; }
    if (lo === hi) { lo -= 1; hi += 1; }
    const y = valueTicks(lo, hi);
    const x = timeTicks(x0, x1);
    const plotW = WIDTH - MARGIN.left - MARGIN.right, plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
    const sx = (t) => MARGIN.left + ((t - x0) / (x1 - x0)) * plotW;
    const sy = (v) => MARGIN.top + (1 - (v - y.lo) / (y.hi - y.lo)) * plotH;

    const svg = el("svg", { width: WIDTH, height: HEIGHT, viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
                            "data-x-min": x0, "data-x-max": x1, "data-y-min": y.lo, "data-y-max": y.hi,
                            "data-plot-left": MARGIN.left, "data-plot-width": plotW,
                            "data-x-step": x.step, "data-y-step": y.step });
    for (const [v, text] of y.ticks) {
      svg.appendChild(el("line", { class: "grid", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: sy(v), y2: sy(v) }));
      svg.appendChild(el("text", { class: "y-tick", x: MARGIN.left - 6, y: sy(v) + 4, "text-anchor": "end", "data-value": v }, text));
    }
    for (const [t, text] of x.ticks) {
      svg.appendChild(el("line", { class: "grid", x1: sx(t), x2: sx(t), y1: MARGIN.top, y2: HEIGHT - MARGIN.bottom }));
      svg.appendChild(el("text", { class: "x-tick", x: sx(t), y: HEIGHT - 12, "text-anchor": "middle", "data-time": t }, text));
    }
    svg.appendChild(el("line", { class: "axis", x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: HEIGHT - MARGIN.bottom }));
    svg.appendChild(el("line", { class: "axis", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: HEIGHT - MARGIN.bottom, y2: HEIGHT - MARGIN.bottom }));
    all.forEach((series, i) => {
      series.color = COLORS[i % COLORS.length];
      const coords = series.points.map(([t, v]) => sx(t).toFixed(2) + "," + sy(v).toFixed(2)).join(" ");
      svg.appendChild(el("polyline", { class: "series", points: coords, stroke: series.color,
                                       "data-label": series.label,
                                       "data-points": JSON.stringify(series.points) }));
      const item = document.createElement("li");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = series.color;
      item.append(swatch, series.label);
      legend.appendChild(item);
    });
    const cursor = el("line", { class: "cursor", x1: 0, x2: 0, y1: MARGIN.top, y2: HEIGHT - MARGIN.bottom, visibility: "hidden" });
    const selection = el("rect", { class: "selection", x: 0, y: MARGIN.top, width: 0, height: plotH, visibility: "hidden" });
    svg.append(cursor, selection);
    chart.appendChild(svg);
    chart.dataset.series = String(all.length);
    $("status").textContent = "";
    drawn = { svg, all, x0, x1, plotW, sx, cursor, selection, dragFrom: null };
    svg.addEventListener("mousemove", onMove);
    svg.addEventListener("mousedown", onDown);
    svg.addEventListener("mouseup", onUp);
    svg.addEventListener("mouseleave", () => { cursor.setAttribute("visibility", "hidden"); $("hover").hidden = true; });
  }

  // -- hover and zoom ----------------------------------------------------------------------

  function timeAt(event) {
    const box = drawn.svg.getBoundingClientRect();
    const px = ((event.clientX - box.left) / box.width) * WIDTH;
    const frac = Math.min(1, Math.max(0, (px - MARGIN.left) / drawn.plotW));
    return { px, t: drawn.x0 + frac * (drawn.x1 - drawn.x0) };
  }

  function nearest(points, t) {
    let lo = 0, hi = points.length - 1;
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (points[mid][0] < t) lo = mid; else hi = mid;
    }
    return Math.abs(points[lo][0] - t) <= Math.abs(points[hi][0] - t) ? points[lo] : points[hi];
  }

  function onMove(event) {
    if (!drawn) return;
    const { px, t } = timeAt(event);
    if (drawn.dragFrom !== null) {
      const left = Math.min(px, drawn.dragFrom.px), width = Math.abs(px - drawn.dragFrom.px);
      drawn.selection.setAttribute("x", left);
      drawn.selection.setAttribute("width", width);
      drawn.selection.setAttribute("visibility", "visible");
    }
    let best = null;
    for (const series of drawn.all) {
      if (!series.points.length) continue;
      const point = nearest(series.points, t);
      if (best === null || Math.abs(point[0] - t) < Math.abs(best - t)) best = point[0];
    }
    if (best === null) return;
    const lines = [fullTime(best)];
    for (const series of drawn.all) {
      const hit = series.points.find((p) => p[0] === best);
      if (hit) lines.push(series.label + ": " + hit[1]);
    }
    drawn.cursor.setAttribute("x1", drawn.sx(best));
    drawn.cursor.setAttribute("x2", drawn.sx(best));
    drawn.cursor.setAttribute("visibility", "visible");
    const hover = $("hover");
    hover.textContent = lines.join("\n");
    hover.dataset.time = String(best);
    hover.hidden = false;
  }

  function onDown(event) {
    if (!drawn) return;
    event.preventDefault();
    drawn.dragFrom = timeAt(event);
  }

  function onUp(event) {
    if (!drawn || drawn.dragFrom === null) return;
    const from = drawn.dragFrom, to = timeAt(event);
    drawn.dragFrom = null;
    drawn.selection.setAttribute("visibility", "hidden");
    if (Math.abs(to.px - from.px) < 5) return;  // a click, not a drag
    zoomStack.push([$("start").value, $("end").value]);
    $("start").value = String(Math.floor(Math.min(from.t, to.t)));
    $("end").value = String(Math.ceil(Math.max(from.t, to.t)));
    $("range").value = "";
    $("unzoom").hidden = false;
    graph();
  }

  const zoomStack = [];

  function unzoom() {
    const previous = zoomStack.pop();
    if (previous) [$("start").value, $("end").value] = previous;
    $("unzoom").hidden = zoomStack.length === 0;
    graph();
  }

  // -- running a query ---------------------------------------------------------------------

  let loads = 0;

  async function graph() {
    const state = formState();
    if (!state.metric) { $("status").textContent = "Pick a metric."; return; }
    const url = queryUrl(state);
    $("api-link").href = url;
    $("permalink").href = pageUrl(state);
    history.replaceState(null, "", pageUrl(state));
    $("status").textContent = "Loading...";
    $("chart").dataset.state = "loading";
    try {
      drawChart(await getJson(url));
      $("chart").dataset.state = "done";
    } catch (e) {
      $("chart").replaceChildren();
      $("legend").replaceChildren();
      $("status").textContent = e.message;
      $("chart").dataset.state = "error";
    }
    $("chart").dataset.loads = String(++loads);
  }

  // -- more queries, ranges, refresh -------------------------------------------------------

  function addQuery(expression) {
    const box = document.createElement("input");
    box.className = "extra-m";
    box.placeholder = "sum:1m-avg:other.metric{host=*}";
    box.value = expression || "";
    $("more-queries").insertBefore(box, $("add-query"));
    return box;
  }

  function extraQueries() {
    return [...document.querySelectorAll(".extra-m")].map((b) => b.value.trim()).filter((v) => v);
  }

  let refreshTimer = null;

  function setRefresh() {
    clearInterval(refreshTimer);
    const seconds = Number($("refresh").value);
    refreshTimer = seconds > 0 ? setInterval(graph, seconds * 1000) : null;
  }

  // -- this TSD's own figures (/api/stats) -------------------------------------------------

  let lastAdded = null;

  async function loadStatus() {
    let records;
    try { records = await getJson("/api/stats"); } catch (e) { return; }
    const sum = (name) => records.filter((r) => r.metric === name).reduce((a, r) => a + Number(r.value), 0);
    const now = Date.now() / 1000;
    const added = sum("tsd.datapoints.added");
    let rate = "";
    if (lastAdded !== null && now > lastAdded[1]) rate = ((added - lastAdded[0]) / (now - lastAdded[1])).toFixed(1) + " points/s, ";
    lastAdded = [added, now];
    $("stat-ingest").textContent = rate + added + " points since start";
    $("stat-storage").textContent = sum("tsd.storage.calls") + " calls, " + sum("tsd.storage.errors") + " errors";
    const wal = records.filter((r) => r.metric.startsWith("tsd.wal."));
    $("stat-backlog").textContent = sum("tsd.writer.pending_cells") + " cells buffered" +
      (wal.length ? ", WAL " + wal.map((r) => r.metric.slice(8) + " " + r.value).join(", ") : "");
    const uids = $("stat-uids");
    const parts = [];
    for (const r of records.filter((r) => r.metric === "tsd.uid.cache-size")) {
      uids.dataset[r.tags.kind] = r.value;
      parts.push(r.tags.kind + " " + r.value);
    }
    uids.textContent = parts.join(", ");
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("metric").addEventListener("input", suggestMetrics);
    $("tags").addEventListener("input", suggestTags);
    $("query-form").addEventListener("submit", (event) => { event.preventDefault(); graph(); });
    $("add-query").addEventListener("click", () => addQuery("").focus());
    $("unzoom").addEventListener("click", unzoom);
    $("range").addEventListener("change", () => {
      if (!$("range").value) return;
      $("start").value = $("range").value + "-ago";
      $("end").value = "";
      graph();
    });
    $("refresh").addEventListener("change", () => { setRefresh(); if ($("metric").value) graph(); });
    const params = new URLSearchParams(window.location.search);
    applyState(params);
    for (const m of params.getAll("m")) addQuery(m);
    if (params.has("refresh")) $("refresh").value = params.get("refresh");
    await loadAggregators();
    if (params.has("aggregator")) $("aggregator").value = params.get("aggregator");
    suggestMetrics();
    loadStatus();
    setInterval(loadStatus, 5000);
    setRefresh();
    if (params.get("metric")) graph();
  });
})();
