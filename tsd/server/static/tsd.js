// tsd's query page: a form, /api/suggest for names, /api/query for data, an SVG line chart.
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
    return "/api/query?" + params.toString();
  }

  function pageUrl(state) {
    const params = new URLSearchParams();
    for (const name of FIELDS) if (state[name]) params.set(name, state[name]);
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

  function niceNumber(v) {
    if (v === 0) return "0";
    const abs = Math.abs(v);
    if (abs >= 1e6 || abs < 1e-3) return v.toExponential(2);
    return String(Math.round(v * 1000) / 1000);
  }

  function timeLabel(seconds) {
    return new Date(seconds * 1000).toISOString().replace("T", " ").slice(5, 16);
  }

  function drawChart(results) {
    const chart = $("chart"), legend = $("legend");
    chart.replaceChildren();
    legend.replaceChildren();
    const all = results.map((s) => ({ label: label(s), points: seriesPoints(s) }));
    const flat = all.flatMap((s) => s.points);
    if (flat.length === 0) {
      $("status").textContent = "No data points in this time range.";
      chart.dataset.series = "0";
      return;
    }
    let [x0, x1] = [Math.min(...flat.map((p) => p[0])), Math.max(...flat.map((p) => p[0]))];
    let [y0, y1] = [Math.min(...flat.map((p) => p[1])), Math.max(...flat.map((p) => p[1]))];
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= 1; y1 += 1; }
    const plotW = WIDTH - MARGIN.left - MARGIN.right, plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
    const sx = (t) => MARGIN.left + ((t - x0) / (x1 - x0)) * plotW;
    const sy = (v) => MARGIN.top + (1 - (v - y0) / (y1 - y0)) * plotH;

    const svg = el("svg", { width: WIDTH, height: HEIGHT, viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
                            "data-x-min": x0, "data-x-max": x1, "data-y-min": y0, "data-y-max": y1 });
    for (let i = 0; i <= 4; i++) {
      const v = y0 + ((y1 - y0) * i) / 4, y = sy(v);
      svg.appendChild(el("line", { class: "grid", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: y, y2: y }));
      svg.appendChild(el("text", { x: MARGIN.left - 6, y: y + 4, "text-anchor": "end" }, niceNumber(v)));
      const t = x0 + ((x1 - x0) * i) / 4;
      const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
      svg.appendChild(el("text", { x: sx(t), y: HEIGHT - 12, "text-anchor": anchor }, timeLabel(t)));
    }
    svg.appendChild(el("line", { class: "axis", x1: MARGIN.left, x2: MARGIN.left, y1: MARGIN.top, y2: HEIGHT - MARGIN.bottom }));
    svg.appendChild(el("line", { class: "axis", x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: HEIGHT - MARGIN.bottom, y2: HEIGHT - MARGIN.bottom }));
    all.forEach((series, i) => {
      const color = COLORS[i % COLORS.length];
      const coords = series.points.map(([t, v]) => sx(t).toFixed(2) + "," + sy(v).toFixed(2)).join(" ");
      svg.appendChild(el("polyline", { class: "series", points: coords, stroke: color,
                                       "data-label": series.label,
                                       "data-points": JSON.stringify(series.points) }));
      const item = document.createElement("li");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = color;
      item.append(swatch, series.label);
      legend.appendChild(item);
    });
    chart.appendChild(svg);
    chart.dataset.series = String(all.length);
    $("status").textContent = "";
  }

  // -- running a query ---------------------------------------------------------------------

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
  }

  document.addEventListener("DOMContentLoaded", async () => {
    $("metric").addEventListener("input", suggestMetrics);
    $("tags").addEventListener("input", suggestTags);
    $("query-form").addEventListener("submit", (event) => { event.preventDefault(); graph(); });
    const params = new URLSearchParams(window.location.search);
    applyState(params);
    await loadAggregators();
    if (params.has("aggregator")) $("aggregator").value = params.get("aggregator");
    suggestMetrics();
    if (params.get("metric")) graph();
  });
})();
