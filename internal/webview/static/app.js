// hotsniff web view: polls /hotkeys (same origin, same credentials) and
// shows the hot set with a rate sparkline per key. Every value from the
// document is untrusted (keys are whatever clients sent): it is only ever
// set as textContent or an attribute, never parsed as markup, and control
// characters are shown as escapes.
"use strict";
(function () {
  const params = new URLSearchParams(location.search);
  const INTERVAL = Math.max(200, Number(params.get("interval")) || 1000);
  const HISTORY = 60;          // samples kept per key (a minute at 1/s)
  const COLD_FOR = 30000;      // ms a key that left the hot set stays listed
  const MAX_ROWS = 5000;       // bound on keys tracked

  const rows = new Map();      // id -> {ev, hist[], hot, lastHot, tr}
  let sortCol = "qps", asc = false, paused = false, tick = 0;

  const $ = (id) => document.getElementById(id);

  // visible shows control, format and other invisible characters as
  // escapes, so a key reads the same as in the terminal.
  function visible(s) {
    return String(s).replace(/[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]/g,
      (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  }
  function keyText(ev) {
    if (typeof ev.key === "string") return visible(ev.key);
    if (typeof ev.key_b64 === "string") return "b64:" + visible(ev.key_b64);
    return "";
  }
  function num(v) { return typeof v === "number" && isFinite(v) ? v : 0; }
  function fmtRate(q) {
    if (!(q > 0)) return "–";
    if (q < 1e5) return q.toFixed(1);
    if (q < 1e7) return q.toFixed(0);
    return (q / 1e6).toFixed(1) + "M";
  }
  // fmtBytes writes a byte rate as top does: "–" when unknown.
  function fmtBytes(b) {
    if (!(b > 0)) return "–";
    if (b < 1e4) return b.toFixed(0);
    if (b < 1e6) return (b / 1e3).toFixed(1) + "k";
    if (b < 1e9) return (b / 1e6).toFixed(1) + "M";
    return (b / 1e9).toFixed(1) + "G";
  }
  // fmtScale writes the sparkline's top in a few characters.
  function fmtScale(q) {
    if (q < 1e3) return q.toFixed(0);
    if (q < 1e6) return Number((q / 1e3).toPrecision(3)) + "k";
    return Number((q / 1e6).toPrecision(3)) + "M";
  }

  // sample is the share of connections a key's figures come from (the
  // event's "sample" field): 1 when absent, or not a rate in (0,1).
  function sample(ev) {
    const s = num(ev.sample);
    return s > 0 && s < 1 ? s : 1;
  }
  // fmtSample writes a share as top does: three significant digits of a
  // percentage, 1/N below one percent (rates need not be powers of two).
  function fmtSample(r) {
    if (r >= 1) return "100%";
    if (r > 0.999) return ">99.9%";
    if (r >= 0.01) return Number((r * 100).toPrecision(3)) + "%";
    if (r < 1e-6) return "<1/1M";
    return "1/" + Math.round(1 / r);
  }

  // sparkline draws the rate history from zero (bottom) to its highest
  // sample (top), and writes that top beside it, so two keys' lines can be
  // compared: "max 4k/s".
  function sparkline(hist) {
    const W = 120, H = 22, NS = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("width", W);
    svg.setAttribute("height", H);
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    // From zero to the highest rate seen; the samples there are span the
    // width (a key just turned hot gets a readable line at once).
    const max = Math.max(1, ...hist);
    const step = W / Math.max(hist.length - 1, 1);
    const pts = hist.map((v, i) => (i * step).toFixed(1) + "," + (H - 1 - (v / max) * (H - 2)).toFixed(1));
    if (pts.length === 1) pts.push(pts[0]);
    const pl = document.createElementNS(NS, "polyline");
    pl.setAttribute("points", pts.join(" "));
    svg.appendChild(pl);
    const peak = Math.max(0, ...hist);
    const wrap = document.createElement("span");
    wrap.className = "sparkwrap";
    wrap.title = "requests per second over the last " + hist.length + " polls, from 0 to " + fmtRate(peak);
    wrap.appendChild(svg);
    const scale = document.createElement("span");
    scale.className = "scale";
    scale.textContent = peak > 0 ? "max " + fmtScale(peak) + "/s" : "0/s";
    wrap.appendChild(scale);
    return wrap;
  }

  function cell(tr, cls, text) {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    if (text !== undefined) td.textContent = text;
    tr.appendChild(td);
    return td;
  }

  function share(r) {
    const q = num(r.ev.qps), a = num(r.ev.absorbed_qps);
    return q > 0 ? Math.min(1, a / q) : 0;
  }

  function sortValue(r, col) {
    switch (col) {
      case "key": return r.key;
      case "proto": return String(r.ev.proto || "");
      case "server": return String(r.ev.server || "");
      case "ns": return String(r.ev.ns || "");
      case "qps": return r.hot ? num(r.ev.qps) : -1;
      case "sample": return r.hot ? sample(r.ev) : 2;
      case "absorbed": return r.hot ? num(r.ev.absorbed_qps) : -1;
      case "bytes": return r.hot ? num(r.ev.bytes_ps) : -1;
      case "share": return share(r);
      case "trend": return r.hist.length ? r.hist[r.hist.length - 1] - r.hist[0] : 0;
      case "state": return r.hot ? 1 : 0;
      case "source": return String(r.ev.source || "detected");
    }
    return 0;
  }

  function render() {
    const filter = $("filter").value.toLowerCase();
    const showCold = $("showcold").checked;
    let list = [...rows.values()].filter((r) => (showCold || r.hot) &&
      (!filter || r.key.toLowerCase().includes(filter) ||
        String(r.ev.proto || "").toLowerCase().includes(filter) ||
        String(r.ev.server || "").toLowerCase().includes(filter)));
    const dir = asc ? 1 : -1;
    list.sort((a, b) => {
      const x = sortValue(a, sortCol), y = sortValue(b, sortCol);
      let c = (typeof x === "string" ? (x < y ? -1 : x > y ? 1 : 0) : x - y) * dir;
      if (c === 0) c = a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
      return c;
    });
    const body = document.createElement("tbody");
    body.id = "rows";
    for (const r of list) {
      const tr = document.createElement("tr");
      tr.className = r.hot ? "hot" : "cold";
      tr.dataset.key = r.key;
      cell(tr, "key", r.key).title = r.key;
      cell(tr, "", visible(r.ev.proto || ""));
      cell(tr, "", visible(r.ev.server || ""));
      cell(tr, "", visible(r.ev.ns || "") || "–");
      const est = r.hot && sample(r.ev) < 1 && num(r.ev.qps) > 0;
      // A key caught faster than its rate can be timed: the figure is a
      // floor until the daemon measures it (qps_lower_bound).
      const low = r.hot && r.ev.qps_lower_bound === true && num(r.ev.qps) > 0;
      const capped = r.hot && r.ev.capped === true;
      const q = cell(tr, "num qps", r.hot ? (low ? "≥" : est ? "~" : "") + fmtRate(num(r.ev.qps)) + (capped ? "+" : "") : "–");
      if (low) q.title = "at least this: the key crossed the threshold faster than its rate can be timed; the next refresh measures it";
      else if (est) q.title = "estimated from " + fmtSample(sample(r.ev)) + " of connections";
      if (capped) q.title = (q.title ? q.title + "; " : "") + "at least: reported demand was cut to a bound";
      cell(tr, "num sample", r.hot ? fmtSample(sample(r.ev)) : "–");
      const hasAbs = typeof r.ev.absorbed_qps === "number";
      cell(tr, "num absorbed", hasAbs && r.hot ? fmtRate(num(r.ev.absorbed_qps)) : "–");
      const sh = cell(tr, "share");
      if (hasAbs && r.hot) {
        const bar = document.createElement("span");
        bar.className = "bar";
        const fill = document.createElement("span");
        fill.style.width = (share(r) * 100).toFixed(1) + "%";
        bar.appendChild(fill);
        sh.appendChild(bar);
        sh.appendChild(document.createTextNode((share(r) * 100).toFixed(0) + "%"));
      } else {
        sh.textContent = "–";
      }
      cell(tr, "num bytes", r.hot ? fmtBytes(num(r.ev.bytes_ps)) : "–");
      cell(tr, "trend").appendChild(sparkline(r.hist));
      cell(tr, "state " + (r.hot ? "hot" : "cold"), r.hot ? "hot" : "cold");
      cell(tr, "", visible(r.ev.source || "detected"));
      body.appendChild(tr);
    }
    $("rows").replaceWith(body);
    $("empty").hidden = list.length > 0;
    for (const th of document.querySelectorAll("th[data-sort]")) {
      th.classList.toggle("sorted", th.dataset.sort === sortCol);
      th.classList.toggle("asc", th.dataset.sort === sortCol && asc);
    }
  }

  function apply(doc) {
    tick++;
    const now = Date.now();
    const seen = new Set();
    for (const ev of Array.isArray(doc.keys) ? doc.keys : []) {
      if (!ev || typeof ev !== "object" || (ev.type && ev.type !== "hot")) continue;
      const key = keyText(ev);
      const id = [ev.proto, ev.server, ev.ns, key].join("\u0000");
      let r = rows.get(id);
      if (!r) {
        if (rows.size >= MAX_ROWS) continue;
        r = { key: key, hist: [] };
        rows.set(id, r);
      }
      r.ev = ev; r.hot = true; r.lastHot = now; seen.add(id);
    }
    for (const [id, r] of rows) {
      if (!seen.has(id)) {
        r.hot = false;
        if (now - r.lastHot > COLD_FOR) { rows.delete(id); continue; }
      }
      r.hist.push(r.hot ? num(r.ev.qps) : 0);
      if (r.hist.length > HISTORY) r.hist.shift();
    }
    const nHot = seen.size;
    // Sampling of the hot keys: a range when they differ (a rate that
    // moved, keys measured before and after).
    let lo = 1, hi = 0;
    for (const r of rows.values()) {
      if (!r.hot) continue;
      const s = sample(r.ev);
      lo = Math.min(lo, s); hi = Math.max(hi, s);
    }
    const sampled = nHot > 0 && lo < 1;
    $("hot").classList.toggle("sampled", sampled);
    $("sampling").textContent = sampled ? "sampling " + fmtSample(lo) + (hi > lo ? "–" + fmtSample(hi) : "") +
      " of connections: ~ rates are estimates" : "";
    $("node").textContent = doc.node ? "node " + visible(doc.node) : "";
    $("summary").textContent = nHot + " hot ≥ " + num(doc.hot_qps) + " qps · " + visible(doc.ts || "");
    render();
  }

  // The page may be opened with credentials in its address
  // (https://user:pass@host:9464/, as `top --addr` takes it); fetch()
  // refuses any URL resolved against such a page. origin and pathname
  // carry no credentials, and the browser keeps the ones it was given for
  // this origin, so the poll is still authenticated.
  const HOTKEYS = location.origin + location.pathname.replace(/[^/]*$/, "") + "hotkeys";

  async function poll() {
    if (!paused) {
      try {
        const resp = await fetch(HOTKEYS, { cache: "no-store", credentials: "same-origin" });
        if (!resp.ok) throw new Error("GET /hotkeys: HTTP " + resp.status);
        apply(await resp.json());
        $("status").textContent = "";
        $("status").className = "";
      } catch (e) {
        $("status").textContent = visible(e.message) + " (retrying)";
        $("status").className = "error";
      }
    }
    setTimeout(poll, INTERVAL);
  }

  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      if (sortCol === th.dataset.sort) asc = !asc;
      else { sortCol = th.dataset.sort; asc = ["key", "proto", "server", "ns", "source", "sample"].includes(sortCol); }
      render();
    });
  }
  $("filter").addEventListener("input", render);
  $("showcold").addEventListener("change", render);
  $("pause").addEventListener("click", () => {
    paused = !paused;
    $("pause").textContent = paused ? "Resume" : "Pause";
  });
  if (params.get("filter")) $("filter").value = params.get("filter");
  if (params.get("sort")) { sortCol = params.get("sort"); asc = params.get("order") === "asc"; }
  poll();
})();
