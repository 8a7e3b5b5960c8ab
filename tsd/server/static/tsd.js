// tsd's query page: several queries on one SVG chart, /api/suggest for names, /api/query for
// data, /api/stats for the daemon's status. Plain browser JavaScript, no build step.
//
// The chart exposes what it drew, for tests and for anyone reading the page: every series is a
// <path class="series"> whose data-points attribute holds the [timestamp, value] pairs plotted,
// data-axis its axis (y or y2) and data-gaps the [before, after] times where the line breaks
// (a gap in collection: more than twice the series' median interval; or, on a log scale, a
// value that is not positive); a point alone between breaks gets a <circle class="marker">.
// The <svg> carries the visible range (data-x-min/-max, data-y-min/-max, data-y2-min/-max),
// each axis' scale (data-y-scale, data-y2-scale: linear or log) and the plot's pixel box
// (data-plot-left/-top/-width/-height); every tick label carries its value in data-v
// (classes xtick, ytick, y2tick). Margins follow the widest labels, so none is clipped.
// Names, tags and annotation text reach the page only through textContent, never as markup.
"use strict";

(function () {
  const FIELDS = ["metric", "tags", "aggregator", "downsample", "rate", "axis"];
  const OPTIONS = ["ylog", "y2log"];  // page-wide checkboxes, "1" in the link when on
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  const SVG_NS = "http://www.w3.org/2000/svg";
  const HEIGHT = 340;
  const MARGIN = { left: 70, right: 20, top: 15, bottom: 40 };
  const STATS_EVERY_MS = 10000;

  const $ = (id) => document.getElementById(id);
  let aggregators = ["sum"];
  let refreshTimer = null;
  const zoomStack = [];

  // -- the query rows ----------------------------------------------------------------------

  function queryRows() { return Array.from(document.querySelectorAll("#queries .query")); }

  function addQueryRow(values) {
    const row = $("query-template").content.firstElementChild.cloneNode(true);
    fillAggregators(row.querySelector(".aggregator"), (values && values.aggregator) || "sum");
    for (const name of FIELDS) {
      const value = values ? values[name] : "";
      if (!value || name === "aggregator") continue;
      const input = row.querySelector("." + name);
      if (input.type === "checkbox") input.checked = value === "1";
      else input.value = value;
    }
    row.querySelector(".metric").addEventListener("input", (e) => suggestMetrics(e.target));
    row.querySelector(".tags").addEventListener("input", (e) => suggestTags(e.target));
    row.querySelector(".remove").addEventListener("click", () => {
      if (queryRows().length > 1) { row.remove(); numberRows(); }
    });
    $("queries").appendChild(row);
    numberRows();
    return row;
  }

  function numberRows() {
    queryRows().forEach((row, i) => { row.querySelector(".swatch-num").textContent = "#" + (i + 1); });
  }

  function rowState(row) {
    const state = {};
    for (const name of FIELDS) {
      const input = row.querySelector("." + name);
      state[name] = input.type === "checkbox" ? (input.checked ? "1" : "") : input.value.trim();
    }
    return state;
  }

  // The page's state in its URL: each query's fields repeated in order (empty ones kept, so
  // the n-th values belong together), then the time range, refresh and the scale options.
  function pageUrl(queries) {
    const params = new URLSearchParams();
    for (const q of queries) for (const name of FIELDS) params.append(name, q[name] || "");
    for (const name of ["start", "end", "refresh"]) {
      const value = $(name).value.trim();
      if (value) params.set(name, value);
    }
    for (const name of OPTIONS) if ($(name).checked) params.set(name, "1");
    return "/?" + params.toString();
  }

  function queriesFromUrl(params) {
    const count = params.getAll("metric").length;
    const queries = [];
    for (let i = 0; i < count; i++) {
      const q = {};
      for (const name of FIELDS) q[name] = params.getAll(name)[i] || "";
      queries.push(q);
    }
    return queries;
  }

  // The m= expression OpenTSDB reads: agg:[downsample:][rate:]metric[{tags}]
  function mExpression(q) {
    let m = (q.aggregator || "sum") + ":";
    if (q.downsample) m += q.downsample + ":";
    if (q.rate) m += "rate:";
    m += q.metric;
    if (q.tags) m += "{" + q.tags + "}";
    return m;
  }

  function queryUrl(q) {
    const params = new URLSearchParams();
    params.set("start", $("start").value.trim() || "1h-ago");
    const end = $("end").value.trim();
    if (end) params.set("end", end);
    params.set("m", mExpression(q));
    return "/api/query?" + params.toString();
  }

  async function getJson(url) {
    // Against the origin, not the page's URL: a page opened as http://user:pass@host/ would
    // make fetch refuse a relative URL; the browser adds the credentials it holds itself.
    const response = await fetch(new URL(url, window.location.origin),
                                 { headers: { Accept: "application/json" } });
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
    $(id).replaceChildren(...values.map((v) => {
      const o = document.createElement("option"); o.value = v; return o;
    }));
  }

  function debounce(fn, ms) {
    let timer = null;
    return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
  }

  // Only the newest answer of each list is shown: an older request may finish later.
  const asked = { metrics: 0, tags: 0 };

  const suggestMetrics = debounce(async (input) => {
    const ticket = ++asked.metrics;
    try {
      const q = encodeURIComponent(input ? input.value.trim() : "");
      const names = await getJson("/api/suggest?type=metrics&max=25&q=" + q);
      if (ticket === asked.metrics) fillDatalist("metric-suggestions", names);
    } catch (e) { /* suggestions are a convenience */ }
  }, 150);

  const suggestTags = debounce(async (input) => {
    const ticket = ++asked.tags;
    const text = input.value;
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
    try { aggregators = (await getJson("/api/aggregators")).slice().sort(); } catch (e) { return; }
    for (const row of queryRows()) {
      const select = row.querySelector(".aggregator");
      fillAggregators(select, select.value || "sum");
    }
  }

  // The daemon's aggregators, plus the one wanted (a link may name one not listed yet).
  function fillAggregators(select, wanted) {
    const names = aggregators.includes(wanted) ? aggregators : aggregators.concat([wanted]);
    select.replaceChildren(...names.map((n) => {
      const o = document.createElement("option"); o.textContent = n; return o;
    }));
    select.value = wanted;
  }

  // -- ticks -------------------------------------------------------------------------------

  // A step of 1, 2 or 5 times a power of ten giving about `target` intervals over `span`.
  function niceStep(span, target) {
    const raw = span / target;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const fraction = raw / power;
    return (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * power;
  }

  // The y domain widened to whole steps, and the ticks on it.
  function valueTicks(lo, hi) {
    if (lo === hi) { lo -= 1; hi += 1; }
    const step = niceStep(hi - lo, 5);
    const first = Math.floor(lo / step), last = Math.ceil(hi / step);
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    const ticks = [];
    for (let i = first; i <= last; i++) {
      const v = Number((i * step).toFixed(decimals));  // no 0.30000000000000004
      ticks.push({ v, text: formatValue(v, decimals) });
    }
    return { lo: first * step, hi: last * step, ticks };
  }

  // A log axis over [lo, hi] (both > 0): whole decades, with 2 and 5 inside when few.
  function logTicks(lo, hi) {
    let first = Math.floor(Math.log10(lo) + 1e-9), last = Math.ceil(Math.log10(hi) - 1e-9);
    if (last <= first) last = first + 1;
    const ticks = [];
    const mantissas = last - first <= 2 ? [1, 2, 5] : [1];
    for (let k = first; k <= last; k++) {
      for (const m of mantissas) {
        if (k === last && m > 1) break;
        const v = Number((m * Math.pow(10, k)).toPrecision(12));
        ticks.push({ v, text: formatValue(v, Math.max(0, -k)) });
      }
    }
    return { lo: Math.pow(10, first), hi: Math.pow(10, last), ticks, log: true };
  }

  function formatValue(v, decimals) {
    const abs = Math.abs(v);
    if (abs !== 0 && (abs >= 1e9 || abs < 1e-4)) return v.toExponential(2);
    return v.toFixed(decimals);
  }

  const SECOND = 1, MINUTE = 60, HOUR = 3600, DAY = 86400;
  // Calendar steps, smallest first: [seconds (approximate for months/years), unit, count].
  const TIME_STEPS = [
    [1, "s", 1], [2, "s", 2], [5, "s", 5], [10, "s", 10], [15, "s", 15], [30, "s", 30],
    [MINUTE, "m", 1], [2 * MINUTE, "m", 2], [5 * MINUTE, "m", 5], [10 * MINUTE, "m", 10],
    [15 * MINUTE, "m", 15], [30 * MINUTE, "m", 30], [HOUR, "h", 1], [2 * HOUR, "h", 2],
    [3 * HOUR, "h", 3], [6 * HOUR, "h", 6], [12 * HOUR, "h", 12], [DAY, "d", 1], [2 * DAY, "d", 2],
    [7 * DAY, "d", 7], [30 * DAY, "M", 1], [91 * DAY, "M", 3], [182 * DAY, "M", 6],
    [365 * DAY, "y", 1], [5 * 365 * DAY, "y", 5], [10 * 365 * DAY, "y", 10],
  ];

  const pad = (n) => String(n).padStart(2, "0");

  // Ticks at local calendar boundaries: whole minutes, hours, midnights, first days of months.
  function timeTicks(t0, t1, maxTicks) {
    const [approx, unit, count] =
      TIME_STEPS.find(([s]) => (t1 - t0) / s <= maxTicks) || TIME_STEPS[TIME_STEPS.length - 1];
    const d = new Date(t0 * 1000);
    d.setMilliseconds(0);
    if (unit === "s") d.setSeconds(Math.floor(d.getSeconds() / count) * count);
    else if (unit === "m") d.setMinutes(Math.floor(d.getMinutes() / count) * count, 0);
    else if (unit === "h") d.setHours(Math.floor(d.getHours() / count) * count, 0, 0);
    else {
      d.setHours(0, 0, 0);
      if (unit === "M") d.setMonth(Math.floor(d.getMonth() / count) * count, 1);
      else if (unit === "y") { d.setFullYear(Math.floor(d.getFullYear() / count) * count); d.setMonth(0, 1); }
    }
    const ticks = [];
    let previous = null;
    for (let guard = 0; guard < 1000; guard++) {
      const t = d.getTime() / 1000;
      if (t > t1) break;
      if (t >= t0) { ticks.push({ v: t, text: timeText(d, unit, previous) }); previous = new Date(d); }
      if (unit === "s") d.setSeconds(d.getSeconds() + count);
      else if (unit === "m") d.setMinutes(d.getMinutes() + count);
      else if (unit === "h") d.setHours(d.getHours() + count);
      else if (unit === "d") d.setDate(d.getDate() + count);
      else if (unit === "M") d.setMonth(d.getMonth() + count);
      else d.setFullYear(d.getFullYear() + count);
    }
    return { step: approx, unit, count, ticks };
  }

  // A tick's label: the time of day, with the date where the day changes.
  function timeText(d, unit, previous) {
    const date = (unit === "y" ? String(d.getFullYear())
      : unit === "M" ? d.getFullYear() + "-" + pad(d.getMonth() + 1)
      : pad(d.getMonth() + 1) + "-" + pad(d.getDate()));
    if (unit === "d" || unit === "M" || unit === "y") return date;
    let clock = pad(d.getHours()) + ":" + pad(d.getMinutes());
    if (unit === "s") clock += ":" + pad(d.getSeconds());
    const newDay = !previous || previous.toDateString() !== d.toDateString();
    return newDay ? date + " " + clock : clock;
  }

  function fullTime(t) {
    const d = new Date(t * 1000);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
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

  // The series drawn last, for hover and zoom.
  let drawn = null;

  // The runs of points drawn as one line: a break where consecutive points are more than twice
  // the series' median interval apart, or at a point the axis cannot show (log scale, <= 0).
  function segments(points, drawable) {
    const steps = points.slice(1).map((p, i) => p[0] - points[i][0]).sort((a, b) => a - b);
    const median = steps.length ? steps[Math.floor((steps.length - 1) / 2)] : 0;
    const runs = [];
    let run = [];
    points.forEach((p, i) => {
      if (run.length && p[0] - points[i - 1][0] > 2 * median) { runs.push(run); run = []; }
      if (drawable(p[1])) run.push(p);
      else if (run.length) { runs.push(run); run = []; }
    });
    if (run.length) runs.push(run);
    return runs;
  }

  // [min, max] of many numbers (a loop: spreading 100,000 arguments overflows the stack).
  function extent(values) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) { if (v < lo) lo = v; if (v > hi) hi = v; }
    return [lo, hi];
  }

  // One value axis: its domain and ticks (linear 1-2-5 or log decades).
  function valueAxis(values, log) {
    const shown = log ? values.filter((v) => v > 0) : values;
    if (shown.length === 0) return null;
    const [lo, hi] = extent(shown);
    const axis = log ? logTicks(lo, hi) : valueTicks(lo, hi);
    axis.log = log;
    return axis;
  }

  function drawChart(all) {
    const chart = $("chart"), legend = $("legend");
    chart.querySelectorAll("svg").forEach((s) => s.remove());
    legend.replaceChildren();
    $("tooltip").hidden = true;
    chart.dataset.series = String(all.length);
    drawn = null;
    const logs = { y: $("ylog").checked, y2: $("y2log").checked };
    const axes = {};
    for (const name of ["y", "y2"]) {
      const values = all.filter((s) => s.axis === name).flatMap((s) => s.points.map((p) => p[1]));
      const axis = valueAxis(values, logs[name]);
      if (axis) axes[name] = axis;
    }
    const shown = all.flatMap((s) => s.points.filter((p) => axes[s.axis] && (!logs[s.axis] || p[1] > 0)));
    if (shown.length === 0) {
      $("status").textContent = "No data points in this time range" +
        (all.some((s) => s.points.length) ? " that a log scale can show." : ".");
      return;
    }
    let [x0, x1] = extent(shown.map((p) => p[0]));
    if (x0 === x1) { x0 -= 1; x1 += 1; }

    // The svg goes in first: labels are measured in it, and the margins made to fit them.
    const svg = el("svg", {});
    chart.appendChild(svg);
    const textWidth = (text, cls) => {
      const node = svg.appendChild(el("text", { class: cls }, text));
      const w = node.getComputedTextLength();
      node.remove();
      return w;
    };
    const widest = (axis, cls) => axis ? Math.max(0, ...axis.ticks.map((t) => textWidth(t.text, cls))) : 0;
    const width = Math.max(480, Math.min(1200, chart.clientWidth || 800));
    const left = Math.max(axes.y ? MARGIN.left : MARGIN.right, widest(axes.y, "ytick") + 12);
    let right = axes.y2 ? Math.max(MARGIN.left, widest(axes.y2, "y2tick") + 12) : MARGIN.right;
    let x = timeTicks(x0, x1, Math.max(2, Math.floor((width - left - right) / 90)));
    // A time label is centred on its tick: the margins hold half the widest one.
    const half = Math.max(0, ...x.ticks.map((t) => textWidth(t.text, "xtick"))) / 2 + 4;
    const leftMargin = Math.max(left, half);
    right = Math.max(right, half);
    const plotW = width - leftMargin - right, plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
    x = timeTicks(x0, x1, Math.max(2, Math.floor(plotW / 90)));
    const sx = (t) => leftMargin + ((t - x0) / (x1 - x0)) * plotW;
    const scale = (axis) => {
      if (!axis) return null;
      const f = axis.log ? Math.log10 : (v) => v;
      const a = f(axis.lo), b = f(axis.hi);
      return (v) => MARGIN.top + (1 - (f(v) - a) / (b - a)) * plotH;
    };
    const sy = { y: scale(axes.y), y2: scale(axes.y2) };

    const attrs = {
      width, height: HEIGHT, viewBox: `0 0 ${width} ${HEIGHT}`,
      "data-x-min": x0, "data-x-max": x1,
      "data-plot-left": leftMargin, "data-plot-top": MARGIN.top,
      "data-plot-width": plotW, "data-plot-height": plotH,
    };
    for (const name of ["y", "y2"]) {
      if (!axes[name]) continue;
      attrs[`data-${name}-min`] = axes[name].lo;
      attrs[`data-${name}-max`] = axes[name].hi;
      attrs[`data-${name}-scale`] = axes[name].log ? "log" : "linear";
    }
    for (const [k, v] of Object.entries(attrs)) svg.setAttribute(k, String(v));
    const gridAxis = axes.y ? "y" : "y2";
    const bottom = HEIGHT - MARGIN.bottom, edge = width - right;
    for (const name of ["y", "y2"]) {
      if (!axes[name]) continue;
      for (const tick of axes[name].ticks) {
        const py = sy[name](tick.v);
        if (name === gridAxis) svg.appendChild(el("line", { class: "grid", x1: leftMargin, x2: edge, y1: py, y2: py }));
        const at = name === "y" ? { x: leftMargin - 6, "text-anchor": "end" } : { x: edge + 6, "text-anchor": "start" };
        svg.appendChild(el("text", { class: name + "tick", y: py + 4, "data-v": tick.v, ...at }, tick.text));
      }
      const ax = name === "y" ? leftMargin : edge;
      svg.appendChild(el("line", { class: "axis", "data-axis": name, x1: ax, x2: ax, y1: MARGIN.top, y2: bottom }));
    }
    svg.dataset.timeStep = x.count + x.unit;
    for (const tick of x.ticks) {
      const px = sx(tick.v);
      svg.appendChild(el("line", { class: "grid", x1: px, x2: px, y1: MARGIN.top, y2: bottom }));
      svg.appendChild(el("text", { class: "xtick", x: px, y: bottom + 16, "text-anchor": "middle", "data-v": tick.v }, tick.text));
    }
    svg.appendChild(el("line", { class: "axis", x1: leftMargin, x2: edge, y1: bottom, y2: bottom }));
    all.forEach((series, i) => {
      series.color = COLORS[i % COLORS.length];
      const y = sy[series.axis];
      const runs = segments(series.points, (v) => !logs[series.axis] || v > 0);
      const d = runs.map((run) => "M" + run.map(([t, v]) => sx(t).toFixed(2) + "," + y(v).toFixed(2)).join("L")).join("");
      const gaps = runs.slice(1).map((run, k) => [runs[k][runs[k].length - 1][0], run[0][0]]);
      svg.appendChild(el("path", { class: "series", d, stroke: series.color,
                                   "data-label": series.label, "data-query": series.query,
                                   "data-axis": series.axis, "data-gaps": JSON.stringify(gaps),
                                   "data-points": JSON.stringify(series.points) }));
      for (const run of runs) {
        if (run.length !== 1) continue;
        const [t, v] = run[0];
        svg.appendChild(el("circle", { class: "marker", cx: sx(t).toFixed(2), cy: y(v).toFixed(2), r: 3,
                                       fill: series.color, "data-label": series.label, "data-t": t, "data-v": v }));
      }
      for (const note of series.annotations) {
        const t = Number(note.startTime);
        if (!(t >= x0 && t <= x1)) continue;
        const mark = el("path", { class: "annotation", d: `M${sx(t) - 5},${MARGIN.top} l10,0 l-5,8 z`, fill: series.color });
        mark.appendChild(el("title", {}, fullTime(t) + " " + (note.description || "") + (note.notes ? "\n" + note.notes : "")));
        svg.appendChild(mark);
      }
      const item = document.createElement("li");
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = series.color;
      item.append(swatch, "#" + (series.query + 1) + " " + series.label + (series.axis === "y2" ? " (right axis)" : ""));
      legend.appendChild(item);
    });
    svg.appendChild(el("line", { class: "cursor", x1: 0, x2: 0, y1: MARGIN.top, y2: bottom, visibility: "hidden" }));
    svg.appendChild(el("rect", { class: "selection", x: 0, y: MARGIN.top, width: 0, height: plotH, visibility: "hidden" }));
    // On top of everything: catches the mouse over the plot area.
    const overlay = el("rect", { class: "overlay", x: leftMargin, y: MARGIN.top, width: plotW, height: plotH });
    svg.appendChild(overlay);
    // The last word on clipping: a label that still crosses an edge moves inside it.
    for (const text of svg.querySelectorAll("text.xtick")) {
      const box = text.getBBox();
      const shift = box.x < 0 ? -box.x : Math.min(0, width - box.x - box.width);
      if (shift) text.setAttribute("x", Number(text.getAttribute("x")) + shift);
    }
    drawn = { svg, all, x0, x1, sx, left: leftMargin, plotW, invert: (px) => x0 + ((px - leftMargin) / plotW) * (x1 - x0) };
    attachPointer(overlay);
    $("status").textContent = "";
  }

  // -- hover and drag-to-zoom --------------------------------------------------------------

  function svgX(event) {
    const box = drawn.svg.getBoundingClientRect();
    const px = event.clientX - box.left;
    return Math.max(drawn.left, Math.min(drawn.left + drawn.plotW, px));
  }

  // The stored point nearest the cursor in time, across every series; each series' value there.
  function showValues(px) {
    let best = null;
    for (const series of drawn.all) {
      for (const [t] of series.points) {
        const d = Math.abs(drawn.sx(t) - px);
        if (best === null || d < best.d) best = { d, t };
      }
    }
    const tip = $("tooltip");
    const cursor = drawn.svg.querySelector(".cursor");
    if (best === null) { tip.hidden = true; return; }
    const cx = drawn.sx(best.t);
    cursor.setAttribute("x1", cx); cursor.setAttribute("x2", cx);
    cursor.setAttribute("visibility", "visible");
    const rows = [];
    const head = document.createElement("div");
    head.className = "time";
    head.textContent = fullTime(best.t);
    rows.push(head);
    for (const series of drawn.all) {
      const hit = series.points.find(([t]) => t === best.t);
      if (!hit) continue;
      const row = document.createElement("div");
      row.className = "value";
      row.dataset.label = series.label;
      row.dataset.v = String(hit[1]);
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = series.color;
      row.append(swatch, series.label + ": " + String(hit[1]));
      rows.push(row);
    }
    tip.replaceChildren(...rows);
    tip.dataset.t = String(best.t);
    tip.hidden = false;
    const box = drawn.svg.getBoundingClientRect(), chartBox = $("chart").getBoundingClientRect();
    const left = box.left - chartBox.left + cx + 12;
    tip.style.left = Math.min(left, chartBox.width - tip.offsetWidth - 4) + "px";
    tip.style.top = (box.top - chartBox.top + MARGIN.top + 4) + "px";
  }

  let dragFrom = null;  // the plot x where a drag began

  window.addEventListener("mouseup", (event) => {
    if (dragFrom === null || !drawn) return;
    const px = svgX(event);
    const from = dragFrom;
    dragFrom = null;
    drawn.svg.querySelector(".selection").setAttribute("visibility", "hidden");
    if (Math.abs(px - from) < 5) return;  // a click, not a drag
    zoomTo(drawn.invert(Math.min(from, px)), drawn.invert(Math.max(from, px)));
  });

  function attachPointer(overlay) {
    dragFrom = null;
    const selection = drawn.svg.querySelector(".selection");
    overlay.addEventListener("mousedown", (event) => {
      event.preventDefault();
      dragFrom = svgX(event);
    });
    overlay.addEventListener("mousemove", (event) => {
      const px = svgX(event);
      showValues(px);
      if (dragFrom !== null) {
        selection.setAttribute("x", Math.min(dragFrom, px));
        selection.setAttribute("width", Math.abs(px - dragFrom));
        selection.setAttribute("visibility", "visible");
      }
    });
    overlay.addEventListener("mouseleave", () => {
      $("tooltip").hidden = true;
      drawn.svg.querySelector(".cursor").setAttribute("visibility", "hidden");
    });
  }

  // Zooming re-asks the daemon for the chosen span (absolute seconds), so the link reproduces it.
  function zoomTo(t0, t1) {
    zoomStack.push([$("start").value, $("end").value, $("refresh").value]);
    $("start").value = String(Math.floor(t0));
    $("end").value = String(Math.ceil(t1));
    $("range").value = "";
    $("refresh").value = "";  // a fixed span has nothing new to fetch
    $("unzoom").disabled = false;
    graph();
  }

  function unzoom() {
    const previous = zoomStack.pop();
    if (!previous) return;
    [$("start").value, $("end").value, $("refresh").value] = previous;
    $("unzoom").disabled = zoomStack.length === 0;
    graph();
  }

  // -- running the queries -----------------------------------------------------------------

  let generation = 0;

  async function graph() {
    const ticket = ++generation;
    const queries = queryRows().map(rowState).filter((q) => q.metric);
    scheduleRefresh();
    if (queries.length === 0) { $("status").textContent = "Pick a metric."; return; }
    const link = pageUrl(queries);
    $("api-link").href = queryUrl(queries[0]);
    $("permalink").href = link;
    history.replaceState(null, "", link);
    $("status").textContent = "Loading...";
    $("chart").dataset.state = "loading";
    try {
      const answers = await Promise.all(queries.map((q) => getJson(queryUrl(q))));
      if (ticket !== generation) return;  // a newer graph() is under way
      const all = [];
      answers.forEach((results, query) => {
        for (const s of results || []) {
          all.push({ query, label: label(s), points: seriesPoints(s),
                     axis: queries[query].axis === "y2" ? "y2" : "y",
                     annotations: (s.annotations || []).concat(s.globalAnnotations || []) });
        }
      });
      drawChart(all);
      $("chart").dataset.state = "done";
    } catch (e) {
      if (ticket !== generation) return;
      $("chart").querySelectorAll("svg").forEach((s) => s.remove());
      $("legend").replaceChildren();
      $("status").textContent = e.message;
      $("chart").dataset.state = "error";
    }
  }

  function scheduleRefresh() {
    clearTimeout(refreshTimer);
    const seconds = Number($("refresh").value);
    if (seconds > 0) refreshTimer = setTimeout(() => { if (!document.hidden) graph(); else scheduleRefresh(); }, seconds * 1000);
  }

  // -- the daemon's status, from its own /api/stats ----------------------------------------

  let lastStats = null;

  function statValue(records, metric, tags) {
    let sum = null;
    for (const r of records) {
      if (r.metric !== metric) continue;
      if (tags && !Object.entries(tags).every(([k, v]) => r.tags[k] === v)) continue;
      sum = (sum || 0) + Number(r.value);
    }
    return sum;
  }

  // [label, value] rows: the ingest rate between two polls, storage calls, UIDs, WAL backlog.
  function statusRows(records, now) {
    const rows = [];
    const added = statValue(records, "tsd.datapoints.added");
    if (lastStats && added !== null && now > lastStats.now) {
      const rate = (added - lastStats.added) / ((now - lastStats.now) / 1000);
      rows.push(["Ingest rate (points/s)", rate.toFixed(1)]);
    }
    if (added !== null) lastStats = { now, added };
    const add = (text, metric, tags) => {
      const v = statValue(records, metric, tags);
      if (v !== null) rows.push([text, String(v)]);
    };
    add("Points added", "tsd.datapoints.added");
    add("Points stored", "tsd.datapoints.stored");
    add("Points dropped", "tsd.datapoints.dropped");
    add("Writer: pending cells", "tsd.writer.pending_cells");
    add("Storage calls", "tsd.hbase.rpcs");
    add("Storage errors", "tsd.rpc.errors", { type: "hbase_errors" });
    add("Compaction queue", "tsd.compaction.queue.size");
    for (const r of records) {
      if (/wal/i.test(r.metric)) rows.push(["WAL " + r.metric.replace(/^tsd\./, "") + tagText(r.tags), String(r.value)]);
    }
    for (const kind of ["metrics", "tagk", "tagv"]) {
      const used = statValue(records, "tsd.uid.ids-used", { kind });
      if (used !== null) rows.push(["UIDs used: " + kind, String(used)]);
      const cached = statValue(records, "tsd.uid.cache-size", { kind });
      if (cached !== null) rows.push(["UID cache entries: " + kind, String(cached)]);
    }
    add("Series tracked", "tsd.meta.series_tracked");
    add("Open connections", "tsd.connectionmgr.connections", { type: "open" });
    return rows;
  }

  function tagText(tags) {
    const text = Object.entries(tags || {}).filter(([k]) => k !== "host")
      .map(([k, v]) => k + "=" + v).join(",");
    return text ? " {" + text + "}" : "";
  }

  async function pollStats() {
    const body = $("daemon-stats").tBodies[0];
    try {
      const records = await getJson("/api/stats");
      body.replaceChildren(...statusRows(records, Date.now()).map(([name, value]) => {
        const tr = document.createElement("tr");
        const th = document.createElement("th"), td = document.createElement("td");
        th.textContent = name; td.textContent = value;
        tr.append(th, td);
        return tr;
      }));
      $("daemon").dataset.state = "done";
    } catch (e) {
      const tr = document.createElement("tr"), td = document.createElement("td");
      td.textContent = e.message;
      tr.appendChild(td);
      body.replaceChildren(tr);
      $("daemon").dataset.state = "error";
    }
  }

  document.addEventListener("DOMContentLoaded", async () => {
    const params = new URLSearchParams(window.location.search);
    for (const name of ["start", "end", "refresh"]) if (params.has(name)) $(name).value = params.get(name);
    for (const name of OPTIONS) $(name).checked = params.get(name) === "1";
    // A relative start with no end is one of the listed ranges: show it as chosen.
    const listed = Array.from($("range").options).some((o) => o.value && o.value === $("start").value);
    if (listed && !$("end").value) $("range").value = $("start").value;
    const fromUrl = queriesFromUrl(params);
    if (fromUrl.length === 0) addQueryRow(null);
    else fromUrl.forEach(addQueryRow);
    $("add-query").addEventListener("click", () => addQueryRow(null).querySelector(".metric").focus());
    $("query-form").addEventListener("submit", (event) => { event.preventDefault(); zoomStack.length = 0; $("unzoom").disabled = true; graph(); });
    $("range").addEventListener("change", () => {
      if (!$("range").value) return;
      $("start").value = $("range").value;
      $("end").value = "";
      graph();
    });
    $("refresh").addEventListener("change", scheduleRefresh);
    for (const name of OPTIONS) $(name).addEventListener("change", () => { if (drawn) graph(); });
    for (const id of ["start", "end"]) $(id).addEventListener("input", () => { $("range").value = ""; });
    $("unzoom").addEventListener("click", unzoom);
    await loadAggregators();
    suggestMetrics(null);
    pollStats();
    setInterval(() => { if (!document.hidden && $("daemon").open) pollStats(); }, STATS_EVERY_MS);
    if (fromUrl.some((q) => q.metric)) graph();
  });
})();
