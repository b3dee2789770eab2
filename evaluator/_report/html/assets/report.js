/* skynet-eval report: the table of examples (virtual scrolling, filters, sorting) and the
   detail panel. Every value from the results reaches the page through textContent, never
   through HTML parsing. */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-config").textContent);
  var C = null;  // the columns, once inflated
  var N = D.n;
  var ROW = 28;
  var OVERSCAN = 12;
  var STATUS = D.statusCodes;
  var STATUS_LABEL = { worse: "worse", missing: "missing here", "new": "new here", same: "same", better: "better" };
  var detailText = "";
  var starts = null;

  function $(id) { return document.getElementById(id); }

  // The data is zlib-compressed and base64-encoded (see _rows.py); the browser inflates it.
  function inflate(id) {
    var text = document.getElementById(id).textContent;
    var bytes;
    if (typeof Uint8Array.fromBase64 === "function") {
      bytes = Uint8Array.fromBase64(text);
    } else {
      var bin = atob(text);
      bytes = new Uint8Array(bin.length);
      for (var k = 0; k < bin.length; k++) bytes[k] = bin.charCodeAt(k);
    }
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).text();
  }

  // -- formatting ------------------------------------------------------------------------
  function fmtScore(v) {
    if (v === null || v === undefined) return "—";
    if (Math.abs(v) >= 1e5) return v.toExponential(3);
    return String(Number(v.toFixed(4)));
  }
  function fmtDelta(v) {
    if (v === null || v === undefined) return "—";
    if (v === 0) return "0";
    return (v > 0 ? "+" : "−") + fmtScore(Math.abs(v));
  }
  function fmtMs(v) {
    if (v === null || v === undefined) return "—";
    if (v < 1) return v.toFixed(3);
    if (v < 100) return v.toFixed(1);
    return Math.round(v).toLocaleString("en-US");
  }
  function fmtCost(v) {
    if (v === null || v === undefined) return "unmeasured";
    if (v === 0) return "$0";
    return "$" + (v >= 0.01 ? v.toFixed(4) : v.toPrecision(3));
  }
  function fmtInt(n) { return n.toLocaleString("en-US"); }
  function show(v) {
    if (typeof v === "string") return v;
    if (v === undefined) return "";
    return JSON.stringify(v, null, 2);
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }

  // -- details: one JSON line per row, parsed when opened -------------------------------
  function detailOf(i) {
    if (!starts) {
      starts = new Float64Array(N + 1);
      var pos = 0;
      for (var k = 1; k < N; k++) {
        pos = detailText.indexOf("\n", pos) + 1;
        starts[k] = pos;
      }
      starts[N] = detailText.length;  // every line ends with a newline
    }
    return JSON.parse(detailText.slice(starts[i], starts[i + 1] - 1));
  }

  // -- columns ------------------------------------------------------------------------
  function kindName(k) { return k < 0 ? "" : D.kinds[k]; }
  var cols = [];
  var byKey = {};
  function buildColumns() {
  if (D.compare) {
    cols.push({ key: "st", label: "change", width: "104px", values: C.st,
      cell: function (i, c) {
        var s = STATUS[C.st[i]];
        c.appendChild(el("span", "st st-" + s, STATUS_LABEL[s]));
      } });
  }
  cols.push({ key: "id", label: "id", width: "minmax(90px, 1.1fr)", cls: "id", values: C.id, text: true });
  if (D.compare) {
    cols.push({ key: "d", label: "Δ score", width: "84px", num: true, values: C.d,
      cell: function (i, c) {
        var v = C.d[i];
        c.textContent = fmtDelta(v);
        if (v > 0) c.classList.add("pos"); else if (v < 0) c.classList.add("neg");
      } });
  }
  cols.push({ key: "sc", label: "score", width: "72px", num: true, values: C.sc, fmt: fmtScore });
  if (D.compare) cols.push({ key: "bs", label: "baseline", width: "76px", num: true, values: C.bs, fmt: fmtScore });
  D.named.forEach(function (name) {
    cols.push({ key: "n:" + name, label: name, width: "78px", num: true, values: C.named[name], fmt: fmtScore });
  });
  cols.push({ key: "ek", label: "error", width: "minmax(80px, .8fr)", values: C.ek,
    cell: function (i, c) {
      var k = C.ek[i];
      if (k >= 0) { c.textContent = D.kinds[k]; c.classList.add("kind"); }
      else if (D.compare && C.bek[i] >= 0) { c.textContent = "(was " + D.kinds[C.bek[i]] + ")"; c.classList.add("muted"); }
    } });
  cols.push({ key: "fb", label: "feedback", width: "minmax(160px, 3fr)", values: C.fb,
    cell: function (i, c) {
      var t = C.fb[i];
      c.textContent = t.length > 240 ? t.slice(0, 239) + "…" : t;
      if (D.compare && C.st[i] === 1) c.classList.add("muted");
    } });
  if (D.has.out) cols.push({ key: "out", label: "output", width: "minmax(100px, 1.4fr)", values: C.out, text: true });
  if (D.has.pms) cols.push({ key: "pms", label: "program ms", width: "106px", num: true, values: C.pms, fmt: fmtMs });
  if (D.has.mms) cols.push({ key: "mms", label: "metric ms", width: "96px", num: true, values: C.mms, fmt: fmtMs });
  if (D.has.cost) cols.push({ key: "cost", label: "cost", width: "104px", num: true, values: C.cost,
    cell: function (i, c) {
      if (D.compare && C.st[i] === 1) return;
      c.textContent = fmtCost(C.cost[i]);
      if (C.cost[i] === null) c.classList.add("muted");
    } });
  cols.forEach(function (c) { byKey[c.key] = c; });
  }

  // -- state --------------------------------------------------------------------------
  var state = { q: "", outcome: "all", status: "all", ranges: {}, sort: null, selected: -1 };
  var view = new Int32Array(0);
  var lowerIds = null, lowerFb = null;
  var table = $("table"), thead = $("thead"), body = $("tbody"), spacer = $("spacer"), win = $("window");
  var countEl = $("count");
  var collator = new Intl.Collator("en", { numeric: true });

  function defaultSort() { return D.compare ? { key: "st", dir: 1 } : null; }
  state.sort = defaultSort();

  // -- filtering ----------------------------------------------------------------------
  function statusOk(i) {
    var s = state.status;
    if (s === "all") return true;
    var st = STATUS[C.st[i]];
    if (s === "changed") return st === "worse" || st === "better";
    if (s === "oneside") return st === "missing" || st === "new";
    if (s === "newly-failing") return C.ek[i] >= 0 && C.bek[i] < 0 && C.bs[i] !== null;
    if (s === "fixed") return C.ek[i] < 0 && C.bek[i] >= 0 && C.sc[i] !== null;
    return st === s;
  }
  function outcomeOk(i) {
    var o = state.outcome;
    if (o === "all") return true;
    if (D.compare && C.st[i] === 1) return false;  // not in this run: neither ok nor error
    if (o === "ok") return C.ek[i] < 0;
    if (o === "errors") return C.ek[i] >= 0;
    return C.ek[i] === Number(o.slice(5));
  }
  function rangesOk(i) {
    for (var key in state.ranges) {
      var r = state.ranges[key];
      var v = byKey[key].values[i];
      if (v === null || v === undefined) return false;
      if (r.lo !== null && v < r.lo) return false;
      if (r.hi !== null && (r.open ? v >= r.hi : v > r.hi)) return false;
    }
    return true;
  }
  function applyFilters() {
    if (!C) return;  // still loading
    var q = state.q.trim().toLowerCase();
    if (q && !lowerIds) {
      lowerIds = C.id.map(function (s) { return s.toLowerCase(); });
      lowerFb = C.fb.map(function (s) { return s.toLowerCase(); });
    }
    var hasRanges = Object.keys(state.ranges).length > 0;
    var out = new Int32Array(N);
    var k = 0;
    for (var i = 0; i < N; i++) {
      if (q && lowerIds[i].indexOf(q) < 0 && lowerFb[i].indexOf(q) < 0) continue;
      if (!outcomeOk(i)) continue;
      if (D.compare && !statusOk(i)) continue;
      if (hasRanges && !rangesOk(i)) continue;
      out[k++] = i;
    }
    view = out.slice(0, k);
    sortView();
    renderChips();
    body.scrollTop = 0;
    render();
  }

  // -- sorting -----------------------------------------------------------------------
  function sortView() {
    var s = state.sort;
    if (!s) { view.sort(); updateSortMarks(); return; }
    var dir = s.dir;
    var cmp;
    if (s.key === "st") {
      // Status codes are in rank order: regressions first (the largest drop first), then
      // examples on one side only, then the same, then improvements (the largest first).
      cmp = function (a, b) {
        var ra = C.st[a], rb = C.st[b];
        if (ra !== rb) return (ra - rb) * dir;
        var da = C.d[a], db = C.d[b];
        if (da !== null && db !== null && da !== db) return (ra === 4 ? db - da : da - db) * dir;
        return a - b;
      };
    } else if (s.key === "ek") {
      cmp = function (a, b) {
        var x = kindName(C.ek[a]), y = kindName(C.ek[b]);
        if (x === y) return a - b;
        if (!x) return 1;
        if (!y) return -1;
        return (x < y ? -1 : 1) * dir;
      };
    } else {
      var values = byKey[s.key].values;
      var isText = !byKey[s.key].num;
      cmp = function (a, b) {
        var x = values[a], y = values[b];
        var xn = x === null || x === undefined || x === "", yn = y === null || y === undefined || y === "";
        if (xn || yn) return xn === yn ? a - b : (xn ? 1 : -1);
        if (x === y) return a - b;
        if (isText) return collator.compare(x, y) * dir || a - b;
        return (x < y ? -1 : 1) * dir;
      };
    }
    view.sort(cmp);
    updateSortMarks();
  }
  function updateSortMarks() {
    var cells = thead.children;
    for (var k = 0; k < cells.length; k++) {
      var key = cells[k].dataset.key;
      var s = state.sort;
      if (s && s.key === key) cells[k].setAttribute("aria-sort", s.dir > 0 ? "ascending" : "descending");
      else cells[k].removeAttribute("aria-sort");
    }
  }

  // -- rendering ---------------------------------------------------------------------
  function buildHead() {
    var template = cols.map(function (c) { return c.width; }).join(" ");
    table.style.setProperty("--cols", template);
    cols.forEach(function (c) {
      var h = el("div", "cell" + (c.num ? " num" : ""), c.label);
      h.dataset.key = c.key;
      h.setAttribute("role", "columnheader");
      h.title = "Sort by " + c.label;
      h.addEventListener("click", function () {
        var s = state.sort;
        if (s && s.key === c.key) state.sort = { key: c.key, dir: -s.dir };
        else state.sort = { key: c.key, dir: c.num && c.key !== "d" ? -1 : 1 };
        sortView();
        render();
      });
      thead.appendChild(h);
    });
  }
  function makeRow(i, position) {
    var r = el("div", "row");
    r.setAttribute("role", "row");
    r.dataset.row = String(i);
    r.dataset.position = String(position);
    if (i === state.selected) r.classList.add("selected");
    cols.forEach(function (c) {
      var cell = el("div", "cell" + (c.num ? " num" : "") + (c.cls ? " " + c.cls : ""));
      cell.dataset.col = c.key;
      if (c.cell) c.cell(i, cell);
      else if (c.fmt) cell.textContent = c.fmt(c.values[i]);
      else cell.textContent = c.values[i];
      if (c.text || c.key === "fb" || c.key === "out") cell.title = cell.textContent;
      r.appendChild(cell);
    });
    return r;
  }
  var pending = false;
  function render() {
    var total = view.length;
    spacer.style.height = total * ROW + "px";
    // As tall as its rows, up to most of the window: a short table leaves no blank box.
    var cap = Math.min(window.innerHeight * 0.68, 720);
    body.style.height = Math.max(56, Math.min(total * ROW + 2, cap)) + "px";
    var top = body.scrollTop;
    var height = body.clientHeight || 600;
    var first = Math.max(0, Math.floor(top / ROW) - OVERSCAN);
    var last = Math.min(total, Math.ceil((top + height) / ROW) + OVERSCAN);
    win.style.transform = "translateY(" + first * ROW + "px)";
    var frag = document.createDocumentFragment();
    for (var k = first; k < last; k++) frag.appendChild(makeRow(view[k], k));
    if (!total) frag.appendChild(el("div", "empty-rows", "No example matches these filters."));
    win.replaceChildren(frag);
    countEl.textContent = "showing " + fmtInt(total) + " of " + fmtInt(N) + " examples";
    countEl.dataset.shown = String(total);
  }
  body.addEventListener("scroll", function () {
    if (pending) return;
    pending = true;
    requestAnimationFrame(function () { pending = false; render(); });
  });
  win.addEventListener("click", function (e) {
    var row = e.target.closest(".row");
    if (row) openDetail(Number(row.dataset.row));
  });

  // -- filter controls ----------------------------------------------------------------
  var searchTimer = 0;
  $("q").addEventListener("input", function (e) {
    state.q = e.target.value;
    clearTimeout(searchTimer);
    searchTimer = setTimeout(applyFilters, N > 20000 ? 150 : 0);
  });
  $("outcome").addEventListener("change", function (e) { state.outcome = e.target.value; applyFilters(); });
  if (D.compare) $("status").addEventListener("change", function (e) { state.status = e.target.value; applyFilters(); });
  function scoreInputs() {
    var lo = $("smin").value, hi = $("smax").value;
    if (lo === "" && hi === "") delete state.ranges.sc;
    else state.ranges.sc = { lo: lo === "" ? null : Number(lo), hi: hi === "" ? null : Number(hi), open: false, label: "score" };
    applyFilters();
  }
  $("smin").addEventListener("change", scoreInputs);
  $("smax").addEventListener("change", scoreInputs);
  $("clear").addEventListener("click", function () {
    state = { q: "", outcome: "all", status: "all", ranges: {}, sort: defaultSort(), selected: state.selected };
    $("q").value = ""; $("outcome").value = "all"; $("smin").value = ""; $("smax").value = "";
    if (D.compare) $("status").value = "all";
    applyFilters();
  });
  function renderChips() {
    var box = $("chips");
    box.replaceChildren();
    Object.keys(state.ranges).forEach(function (key) {
      var r = state.ranges[key];
      var label = r.label + " in " + (r.lo === null ? "(−∞" : "[" + r.lo) + ", " + (r.hi === null ? "∞)" : r.hi + (r.open ? ")" : "]"));
      var chip = el("span", "chip", label);
      var x = el("button", null, "×");
      x.title = "Remove this filter";
      x.setAttribute("aria-label", "Remove filter " + label);
      x.addEventListener("click", function () {
        delete state.ranges[key];
        if (key === "sc") { $("smin").value = ""; $("smax").value = ""; }
        applyFilters();
      });
      chip.appendChild(x);
      box.appendChild(chip);
    });
  }
  // A click on a histogram bar filters the table to that bar's range.
  document.querySelectorAll("g.bin[data-filter]").forEach(function (g) {
    g.addEventListener("click", function () {
      var key = g.dataset.filter;
      var lo = Number(g.dataset.lo), hi = Number(g.dataset.hi);
      state.ranges[key] = { lo: lo, hi: hi, open: !("closed" in g.dataset), label: g.dataset.label || key };
      if (key === "sc") { $("smin").value = String(lo); $("smax").value = String(hi); }
      applyFilters();
      $("examples").scrollIntoView();
    });
  });
  document.querySelectorAll("[data-open-row]").forEach(function (b) {
    b.addEventListener("click", function () { openDetail(Number(b.dataset.openRow)); });
  });
  document.querySelectorAll("[data-show-kind]").forEach(function (b) {
    b.addEventListener("click", function () {
      state.outcome = "kind:" + b.dataset.showKind;
      $("outcome").value = state.outcome;
      applyFilters();
      $("examples").scrollIntoView();
    });
  });
  document.querySelectorAll("[data-show-status]").forEach(function (b) {
    b.addEventListener("click", function () {
      state.status = b.dataset.showStatus;
      $("status").value = state.status;
      applyFilters();
      $("examples").scrollIntoView();
    });
  });

  // -- the detail panel ----------------------------------------------------------------
  var panel = $("detail"), panelBody = $("detail-body"), panelTitle = $("detail-title");
  function field(parent, title, content, cls) {
    var f = el("div", "field");
    f.appendChild(el("h4", null, title));
    if (typeof content === "string") f.appendChild(el("pre", cls, content));
    else f.appendChild(content);
    parent.appendChild(f);
    return f;
  }
  function kv(pairs) {
    var dl = el("dl", "kv");
    pairs.forEach(function (p) {
      if (p[1] === undefined) return;
      dl.appendChild(el("dt", null, p[0]));
      dl.appendChild(el("dd", null, p[1]));
    });
    return dl;
  }
  function measurements(r, line) {
    // A result encodes without its default fields: a missing figure is its default.
    var pairs = [];
    var o = r.observation || {};
    if (o.duration_ms === undefined || o.duration_ms === null) {
      pairs.push(["program", "did not run (score-only), or its time was not measured"]);
    } else {
      pairs.push(["program time", fmtMs(o.duration_ms) + " ms"]);
      if (o.queued_ms) pairs.push(["queued on the rate limiter", fmtMs(o.queued_ms) + " ms"]);
      pairs.push(["program cost", fmtCost(o.cost_usd === undefined ? 0 : o.cost_usd)]);
    }
    if (o.llm_calls) pairs.push(["program model calls", String(o.llm_calls)]);
    if (o.input_tokens || o.output_tokens) pairs.push(["program tokens in / out", (o.input_tokens || 0) + " / " + (o.output_tokens || 0)]);
    if (o.retries || o.rate_limited) pairs.push(["program retries / 429s", (o.retries || 0) + " / " + (o.rate_limited || 0)]);
    if (o.notes && o.notes.length) pairs.push(["program notes", o.notes.join("\n")]);
    if (r.metric_ms !== undefined && r.metric_ms !== null) pairs.push(["metric time", fmtMs(r.metric_ms) + " ms"]);
    var j = r.judge || {};
    var judgeCost = j.cost_usd === undefined ? 0 : j.cost_usd;
    if (j.llm_calls || judgeCost === null) {
      pairs.push(["judge model calls", String(j.llm_calls || 0)]);
      pairs.push(["judge cost", fmtCost(judgeCost)]);
    }
    if (j.input_tokens || j.output_tokens) pairs.push(["judge tokens in / out", (j.input_tokens || 0) + " / " + (j.output_tokens || 0)]);
    if (j.retries || j.rate_limited) pairs.push(["judge retries / 429s", (j.retries || 0) + " / " + (j.rate_limited || 0)]);
    if (j.notes && j.notes.length) pairs.push(["judge notes", j.notes.join("\n")]);
    if (line !== undefined && line !== null) pairs.push(["results file line", String(line)]);
    return pairs;
  }
  function wordDiff(a, b) {
    var x = a.split(/(\s+)/), y = b.split(/(\s+)/);
    if (x.length * y.length > 250000) return null;
    var m = x.length, n = y.length, i, j;
    var L = [];
    for (i = 0; i <= m; i++) L.push(new Int32Array(n + 1));
    for (i = m - 1; i >= 0; i--) for (j = n - 1; j >= 0; j--)
      L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    var pre = el("pre");
    i = 0; j = 0;
    while (i < m || j < n) {
      if (i < m && j < n && x[i] === y[j]) { pre.appendChild(document.createTextNode(x[i])); i++; j++; }
      else if (i < m && (j >= n || L[i + 1][j] >= L[i][j + 1])) { pre.appendChild(el("del", "diff", x[i])); i++; }
      else { pre.appendChild(el("ins", "diff", y[j])); j++; }
    }
    return pre;
  }
  function sides(parent, title, now, before) {
    var f = el("div", "field");
    f.appendChild(el("h4", null, title));
    var box = el("div", "sides");
    var left = el("div"), right = el("div");
    left.appendChild(el("div", "hint", "this run"));
    left.appendChild(now === undefined ? el("p", "unavailable", "not in this run") : el("pre", null, show(now)));
    right.appendChild(el("div", "hint", "baseline"));
    right.appendChild(before === undefined ? el("p", "unavailable", "not in the baseline") : el("pre", null, show(before)));
    box.appendChild(left); box.appendChild(right);
    f.appendChild(box);
    if (typeof now === "string" && typeof before === "string" && now !== before) {
      var diff = wordDiff(before, now);
      if (diff) { f.appendChild(el("div", "hint", "changes from the baseline")); f.appendChild(diff); }
    }
    parent.appendChild(f);
  }
  function inputs(parent, d) {
    var why = {
      none: "Not in the results file: run skynet-eval report with --data DATASET (and the run's --input-cols/--output-cols) to show it.",
      missing: "The dataset given with --data has no example with this id."
    };
    ["input", "expected"].forEach(function (name) {
      if (d.src === "data" || d.src === "line") {
        var v = d[name];
        field(parent, name, (v === null || v === undefined) && name === "expected" ? "(none: this example has no expected value)" : show(v));
      } else {
        field(parent, name, el("p", "unavailable", why[d.src] || why.none));
      }
    });
  }
  function outcome(r) { return r.error ? "error: " + r.error.kind : "ok"; }
  function openDetail(i) {
    if (!C || !(i >= 0 && i < N)) return;
    state.selected = i;
    var d = detailOf(i);
    var now = d.r || null, before = d.b || null;
    panelTitle.textContent = C.id[i];
    panelBody.replaceChildren();
    var pairs = [];
    if (D.compare) pairs.push(["change", STATUS_LABEL[STATUS[C.st[i]]]]);
    pairs.push(["score", now ? fmtScore(now.score) : "— (not in this run)"]);
    if (D.compare) {
      pairs.push(["baseline score", before ? fmtScore(before.score) : "— (not in the baseline)"]);
      if (now && before) pairs.push(["Δ score", fmtDelta(now.score - before.score)]);
    }
    var scores = (now && now.scores) || {};
    Object.keys(scores).forEach(function (k) {
      var b = before && before.scores && k in before.scores ? " (baseline " + fmtScore(before.scores[k]) + ")" : "";
      pairs.push([k, fmtScore(scores[k]) + b]);
    });
    if (now) pairs.push(["outcome", outcome(now)]);
    if (before) pairs.push(["baseline outcome", outcome(before)]);
    panelBody.appendChild(kv(pairs));
    function fb(r) { return r ? r.feedback || "" : undefined; }
    function msg(r) { return r ? (r.error ? r.error.message : "") : undefined; }
    function out(r) { return r ? (r.output === undefined ? null : r.output) : undefined; }
    if (D.compare) {
      sides(panelBody, "feedback", fb(now), fb(before));
      if ((now && now.error) || (before && before.error)) sides(panelBody, "error message", msg(now), msg(before));
      sides(panelBody, "output", out(now), out(before));
    } else {
      field(panelBody, "feedback", fb(now) === "" ? "(empty)" : fb(now));
      if (now.error && now.error.message !== now.feedback) field(panelBody, "error message", now.error.message);
      field(panelBody, "output", show(out(now)));
    }
    inputs(panelBody, d);
    var m = el("div", D.compare ? "sides" : null);
    [[now, d.line], [before, d.bline]].forEach(function (pair, k) {
      var side = pair[0];
      if (!side) return;
      var box = el("div");
      if (D.compare) box.appendChild(el("div", "hint", k === 0 ? "this run" : "baseline"));
      box.appendChild(kv(measurements(side, pair[1])));
      if (side.extra && Object.keys(side.extra).length) field(box, "extra", show(side.extra));
      m.appendChild(box);
    });
    field(panelBody, "measurements", m);
    panel.hidden = false;
    try { history.replaceState(null, "", "#example=" + encodeURIComponent(C.id[i])); } catch (e) { /* some browsers refuse on file: URLs */ }
    render();
  }
  function closeDetail() {
    panel.hidden = true;
    state.selected = -1;
    try { history.replaceState(null, "", "#"); } catch (e) { /* ignore */ }
    render();
  }
  function step(by) {
    if (state.selected < 0 || !view.length) return;
    var at = view.indexOf(state.selected);
    var next = at < 0 ? 0 : Math.min(view.length - 1, Math.max(0, at + by));
    openDetail(view[next]);
    var y = next * ROW;
    if (y < body.scrollTop || y > body.scrollTop + body.clientHeight - ROW) body.scrollTop = Math.max(0, y - ROW * 3);
  }
  $("detail-close").addEventListener("click", closeDetail);
  $("detail-prev").addEventListener("click", function () { step(-1); });
  $("detail-next").addEventListener("click", function () { step(1); });
  document.addEventListener("keydown", function (e) {
    if (panel.hidden || e.target.matches("input, select, textarea")) return;
    if (e.key === "Escape") closeDetail();
    else if (e.key === "ArrowDown" || e.key === "j") { step(1); e.preventDefault(); }
    else if (e.key === "ArrowUp" || e.key === "k") { step(-1); e.preventDefault(); }
  });

  // -- start --------------------------------------------------------------------------
  countEl.textContent = "loading " + fmtInt(N) + " examples…";
  Promise.all([inflate("report-columns"), inflate("report-details")]).then(function (parts) {
    C = JSON.parse(parts[0]);
    detailText = parts[1];
    buildColumns();
    buildHead();
    applyFilters();
    var hash = "";
    try { hash = decodeURIComponent(location.hash || ""); } catch (e) { hash = ""; }
    if (hash.indexOf("#example=") === 0) {
      var at = C.id.indexOf(hash.slice(9));
      if (at >= 0) openDetail(at);
    }
    document.body.dataset.ready = "1";
  }).catch(function (err) {
    countEl.textContent = "This browser could not read the report's data (" + err + "); open it in a current Chrome, Firefox, Edge or Safari.";
    document.body.dataset.ready = "error";
  });
})();
