"""The page's markup: the parts that are the same for every reader, rendered in Python.

The summary, comparison, charts, distributions and errors are plain HTML and SVG written
here, so they show without scripts and are what a test reads; the script only drives the
table of examples and the detail panel. Every value from a results file, a header or a
dataset passes through :func:`html.escape` before it reaches the markup.

The page is one file with nothing to fetch: its Content-Security-Policy allows no network
at all, and only the page's own script and stylesheet (by their SHA-256), so even a string
that got past the escaping could not run.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from html import escape
from importlib.resources import files
from typing import Any

import msgspec

from .._stats import Distribution, ErrorGroup, RunSummary
from ._compare import Comparison
from ._rows import STATUS_CODES, PageRows, encode_json, encode_raw, pack

__all__ = ["Page", "render_page"]


@cache
def _asset(name: str) -> str:
    return files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


# -- number formats ------------------------------------------------------------------


def n_(value: int) -> str:
    return f"{value:,}"


def score_(value: float | None) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.4f}"


def delta_(value: float) -> str:
    text = f"{value:+.4f}"
    if float(text) == 0:
        return "0.0000"
    return text.replace("-", "−")


def usd_(value: float | None) -> str:
    if value is None:
        return "unmeasured"
    if value == 0:
        return "$0"
    return f"${value:,.4f}" if abs(value) >= 0.01 else f"${value:.6f}"


def ms_(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 1000:
        return f"{value / 1000:,.2f} s"
    return f"{value:,.1f} ms" if value >= 1 else f"{value:.3f} ms"


def pct_(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "—"


# -- pieces --------------------------------------------------------------------------


class Page(msgspec.Struct, kw_only=True):
    """Everything the page shows, already computed."""

    title: str
    results_label: str
    baseline_label: str | None
    built: str
    summary: RunSummary
    baseline_summary: RunSummary | None
    comparison: Comparison | None
    rows: PageRows
    charts: list[tuple[str, str]]  # (heading, svg)
    warnings: list[str]
    notes: list[str]
    header: list[tuple[str, str]]
    baseline_header: list[tuple[str, str]]
    run_meta: list[tuple[str, str]]
    regressions: list[tuple[int, str, float]]  # (row, id, delta), the worst first
    data_label: str | None


def _card(
    stat: str, label: str, value: str, note: str = "", *, raw: Any = None, tone: str = ""
) -> str:
    data = f' data-value="{escape(str(raw))}"' if raw is not None else ""
    small = " small" if len(value) > 14 else ""
    css = f"card {tone}".strip()
    return (
        f'<div class="{css}" data-stat="{escape(stat)}"{data}>'
        f'<div class="label">{escape(label)}</div>'
        f'<div class="value{small}">{escape(value)}</div>'
        + (f'<div class="note">{escape(note)}</div>' if note else "")
        + "</div>"
    )


def _failure_note(s: RunSummary) -> str:
    if not s.failure_scores:
        return f"over all {n_(s.n)} examples (no errors)"
    at = " or ".join(f"{v:g}" for v in s.failure_scores[:3])
    return f"over all {n_(s.n)} examples, errors at {at}"


def _program_cost_card(s: RunSummary) -> str:
    if not s.program_ran:
        return _card("program_cost", "program cost", "no program", "a score-only run")
    if s.program_cost_usd is None:
        note = (
            f"{n_(s.program_cost_unmeasured)} of {n_(s.program_ran)} examples without a known price"
        )
        if s.program_cost.count:
            note += f"; {usd_(s.program_cost.total)} over the other {n_(s.program_cost.count)}"
        return _card("program_cost", "program cost", "unmeasured", note, tone="bad")
    per = s.program_cost_usd / s.program_ran
    return _card(
        "program_cost",
        "program cost",
        usd_(s.program_cost_usd),
        f"{usd_(per)} per example, {n_(s.program_calls)} model calls",
        raw=s.program_cost_usd,
    )


def _judge_cost_card(s: RunSummary) -> str:
    if s.judge_cost_usd is None:
        note = f"{n_(s.judge_cost_unmeasured)} of {n_(s.n)} examples without a known price"
        return _card("judge_cost", "judge cost", "unmeasured", note, tone="bad")
    if not s.judge_calls:
        return _card("judge_cost", "judge cost", "$0", "the metric made no model calls", raw=0.0)
    return _card(
        "judge_cost",
        "judge cost",
        usd_(s.judge_cost_usd),
        f"{usd_(s.judge_cost_usd / s.n)} per example, {n_(s.judge_calls)} model calls",
        raw=s.judge_cost_usd,
    )


def headline(s: RunSummary) -> str:
    """The cards at the top: counts, means, costs, time."""
    errors = s.n - s.ok
    kinds = ", ".join(f"{k} {n_(v)}" for k, v in s.errors.items())
    cards = [
        _card("n", "examples", n_(s.n), f"{n_(s.ok)} ok, {n_(errors)} errors", raw=s.n),
        _card("ok", "ok", n_(s.ok), f"{pct_(s.ok, s.n)} of {n_(s.n)}", raw=s.ok),
        _card(
            "errors",
            "errors",
            n_(errors),
            kinds or "none",
            raw=errors,
            tone="bad" if errors else "",
        ),
        _card("mean", "mean score (all)", score_(s.mean_score), _failure_note(s), raw=s.mean_score),
        _card(
            "mean_ok",
            "mean score (ok)",
            score_(s.mean_score_ok),
            f"over the {n_(s.ok)} ok examples",
            raw=s.mean_score_ok,
        ),
    ]
    for named in s.named:
        cards.append(
            _card(
                f"named:{named.name}",
                named.name,
                score_(named.mean),
                f"mean over {n_(named.count)} ok examples",
                raw=named.mean,
            )
        )
    cards.append(_program_cost_card(s))
    cards.append(_judge_cost_card(s))
    if s.wall_s is not None:
        cards.append(_card("wall", "wall time", f"{s.wall_s:,.2f} s", raw=s.wall_s))
    else:
        cards.append(
            _card(
                "wall",
                "wall time",
                "not recorded",
                "this results file was written before runs recorded their time",
            )
        )
    if s.throughput is not None:
        cards.append(
            _card("throughput", "throughput", f"{s.throughput:,.1f} /s", "examples per second")
        )
    else:
        cards.append(_card("throughput", "throughput", "not recorded"))
    lat = s.program_ms if s.program_ms.count else s.metric_ms
    if lat.count:
        which = "program" if s.program_ms.count else "metric"
        cards.append(
            _card(
                f"{which}_p50",
                f"{which} latency p50",
                ms_(lat.p50),
                f"p95 {ms_(lat.p95)}, p99 {ms_(lat.p99)}",
            )
        )
    if s.program_calls or s.judge_calls:
        cards.append(
            _card(
                "tokens",
                "tokens in / out",
                f"{n_(s.input_tokens)} / {n_(s.output_tokens)}",
                f"{n_(s.rate_limited)} rate-limited (429), {n_(s.retries)} retries",
            )
        )
    return '<section id="headline" class="cards">' + "".join(cards) + "</section>"


def comparison_section(page: Page) -> str:
    """The baseline comparison: verdict, difference with its interval, counts."""
    c = page.comparison
    if c is None:
        return ""
    d = c.difference
    parts = ['<section id="comparison"><h2>Against the baseline</h2>']
    tone = (
        "worse" if d is not None and d.high < 0 else "better" if d is not None and d.low > 0 else ""
    )
    verdict = c.verdict[0].upper() + c.verdict[1:]
    parts.append(f'<p class="verdict {tone}" data-stat="verdict">{escape(verdict)}.</p>')
    cards = []
    if d is not None:
        cards.append(
            _card(
                "diff",
                "mean difference",
                delta_(d.mean),
                f"{round(d.confidence * 100):g}% CI [{delta_(d.low)}, {delta_(d.high)}], "
                f"paired bootstrap over {n_(d.n)} examples",
                raw=d.mean,
                tone="bad" if d.high < 0 else "good" if d.low > 0 else "",
            )
        )
        cards.append(
            _card(
                "means",
                "mean, this run / baseline",
                f"{score_(c.mean_current)} / {score_(c.mean_baseline)}",
                f"over the {n_(c.matched)} examples in both",
            )
        )
    tol = f" by more than {c.tolerance:g}" if c.tolerance else ""
    within = f" (within {c.tolerance:g})" if tol else ""
    for stat, label, count, note, tone_ in (
        ("worse", "worse", c.worse, f"score fell{tol}", "bad"),
        ("better", "better", c.better, f"score rose{tol}", "good"),
        ("same", "same", c.same, f"score unchanged{within}", ""),
        ("newly-failing", "newly failing", c.newly_failing, "ok before, an error now", "bad"),
        ("fixed", "fixed", c.fixed, "an error before, ok now", ""),
        ("missing", "missing here", c.only_baseline, "baseline only: never a pass", "bad"),
        ("new", "new here", c.only_current, "in this run only: not compared", ""),
    ):
        cards.append(_card(stat, label, n_(count), note, raw=count, tone=tone_ if count else ""))
    parts.append('<div class="cards">' + "".join(cards) + "</div>")
    parts.append(
        '<p class="hint">Show in the table: '
        + " · ".join(
            f'<button class="link" data-show-status="{s}">{escape(label)}</button>'
            for s, label in (
                ("worse", "worse"),
                ("better", "better"),
                ("changed", "all changed"),
                ("newly-failing", "newly failing"),
                ("oneside", "on one side only"),
            )
        )
        + "</p>"
    )
    if page.regressions:
        items = "".join(
            f'<li><button class="link" data-open-row="{row}">{escape(ident)}</button> '
            f'<span class="neg">{escape(delta_(delta))}</span></li>'
            for row, ident, delta in page.regressions
        )
        parts.append(f'<h3>Largest regressions</h3><ol id="regressions">{items}</ol>')
    if c.named:
        rows = "".join(
            f"<tr><td>{escape(nd.name)}</td><td>{score_(nd.mean)}</td><td>{score_(nd.baseline_mean)}</td>"
            f"<td>{escape(delta_(nd.difference))}</td><td>{n_(nd.n)}</td></tr>"
            for nd in c.named
        )
        parts.append(
            '<h3>Named scores</h3><table class="stats"><thead><tr><th>score</th><th>this run</th>'
            "<th>baseline</th><th>difference</th><th>examples (ok in both)</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    parts.append("</section>")
    return "".join(parts)


def _dist_row(label: str, d: Distribution, fmt: Any) -> str:
    if not d.count:
        return ""
    cells = [
        n_(d.count),
        n_(d.missing),
        fmt(d.mean),
        fmt(d.p50),
        fmt(d.p95),
        fmt(d.p99),
        fmt(d.max),
    ]
    return (
        f"<tr><td>{escape(label)}</td>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"
    )


def distributions(s: RunSummary, baseline: RunSummary | None) -> str:
    """Latency and cost percentiles, this run's (and the baseline's)."""
    rows = []
    for suffix, summary in (("", s), (" (baseline)", baseline)):
        if summary is None:
            continue
        rows += [
            _dist_row("program latency" + suffix, summary.program_ms, ms_),
            _dist_row("program latency, own" + suffix, summary.program_own_ms, ms_),
            _dist_row("metric latency" + suffix, summary.metric_ms, ms_),
            _dist_row("program cost / example" + suffix, summary.program_cost, usd_),
            _dist_row("judge cost / example" + suffix, summary.judge_cost, usd_)
            if summary.judge_calls or summary.judge_cost_unmeasured
            else "",
        ]
    body = "".join(rows)
    if not body:
        return ""
    return (
        '<section id="distributions"><h2>Time and cost per example</h2>'
        '<table class="stats"><thead><tr><th></th><th>measured</th><th>not measured</th>'
        "<th>mean</th><th>p50</th><th>p95</th><th>p99</th><th>max</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
        '<p class="hint">Own time is the program\'s wall time less the time its model calls '
        "waited on the engine's rate limiter. Percentiles are exact (linear interpolation).</p>"
        "</section>"
    )


def errors_section(groups: Sequence[ErrorGroup], kinds: Sequence[str], ids: Sequence[str]) -> str:
    """Errors by kind, each with its commonest messages and first examples."""
    if not groups:
        return '<section id="errors"><h2>Errors</h2><p class="hint">No errors.</p></section>'
    index = {kind: i for i, kind in enumerate(kinds)}
    out = ['<section id="errors"><h2>Errors by kind</h2><div class="errors-list">']
    for group in groups:
        out.append(
            f'<div class="error-group" data-kind="{escape(group.kind)}" data-count="{group.count}">'
            f'<h3>{escape(group.kind)} <span class="count">{n_(group.count)} '
            f"example{'s' if group.count != 1 else ''}</span> "
            f'<button class="link" data-show-kind="{index.get(group.kind, -1)}">show all</button>'
            "</h3><ul>"
        )
        for message in group.messages:
            examples = " ".join(
                f'<button class="link" data-open-row="{row}">{escape(ids[row])}</button>'
                for row in message.rows
            )
            more = (
                f" and {n_(message.count - len(message.rows))} more"
                if message.count > len(message.rows)
                else ""
            )
            out.append(
                f'<li><span class="msg">{escape(message.message or "(no message)")}</span> '
                f'<span class="muted">× {n_(message.count)}</span><br>'
                f'<span class="hint">first: {examples}{escape(more)}</span></li>'
            )
        if group.other_messages:
            out.append(f'<li class="hint">{n_(group.other_messages)} other distinct messages</li>')
        out.append("</ul></div>")
    out.append("</div></section>")
    return "".join(out)


def _kv(pairs: Iterable[tuple[str, str]]) -> str:
    return (
        '<dl class="kv">'
        + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in pairs)
        + "</dl>"
    )


def metadata(page: Page) -> str:
    blocks = []
    if page.header:
        blocks.append("<h3>This run (results file header)</h3>" + _kv(page.header))
    else:
        blocks.append('<p class="hint">The results file has no header line (an older format).</p>')
    if page.baseline_label is not None:
        if page.baseline_header:
            blocks.append("<h3>Baseline (results file header)</h3>" + _kv(page.baseline_header))
        else:
            blocks.append('<p class="hint">The baseline file has no header line.</p>')
    if page.run_meta:
        blocks.append("<h3>Given by the run</h3>" + _kv(page.run_meta))
    return (
        '<details class="meta" id="metadata" open><summary>What produced this run</summary>'
        + "".join(blocks)
        + "</details>"
    )


def controls(page: Page) -> str:
    kinds = "".join(
        f'<option value="kind:{i}">error: {escape(kind)}</option>'
        for i, kind in enumerate(page.rows.kinds)
    )
    status = ""
    if page.comparison is not None:
        status = (
            '<label>change <select id="status">'
            '<option value="all">all</option><option value="worse">worse</option>'
            '<option value="better">better</option><option value="same">same</option>'
            '<option value="changed">worse or better</option>'
            '<option value="newly-failing">newly failing</option>'
            '<option value="fixed">fixed</option>'
            '<option value="missing">missing here</option><option value="new">new here</option>'
            '<option value="oneside">on one side only</option></select></label>'
        )
    return (
        '<div class="controls">'
        '<input type="search" id="q" placeholder="Search ids and feedback" '
        'aria-label="Search ids and feedback">'
        '<label>outcome <select id="outcome"><option value="all">all</option>'
        '<option value="ok">ok only</option><option value="errors">errors only</option>'
        f"{kinds}</select></label>{status}"
        '<label>score from <input type="number" id="smin" step="any" '
        'aria-label="lowest score"></label>'
        '<label>to <input type="number" id="smax" step="any" aria-label="highest score"></label>'
        '<button id="clear" type="button">Clear filters</button>'
        '<span class="count" id="count"></span></div>'
        '<div class="chips" id="chips"></div>'
    )


def head(title: str, css: str, policy: str) -> str:
    """The document's start, to ``<body>``: the policy, the title, the stylesheet."""
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        '<meta name="generator" content="skynet-eval report">'
        f"<title>{escape(title)}</title><style>{css}</style></head><body>"
    )


def render_page(page: Page) -> str:
    """The whole report as one HTML document."""
    css, js = _asset("report.css"), _asset("report.js")
    config = encode_json(
        {
            "n": len(page.rows.columns["id"]),
            "compare": page.comparison is not None,
            "kinds": page.rows.kinds,
            "named": list(page.rows.columns["named"]),
            "statusCodes": list(STATUS_CODES),
            "has": {
                "pms": page.summary.program_ms.count > 0,
                "mms": page.summary.metric_ms.count > 0,
                "cost": page.summary.program_ran > 0 or page.summary.judge_calls > 0,
                "out": any(page.rows.columns["out"]),
            },
        }
    ).decode("utf-8")
    columns = pack(encode_raw(page.rows.columns))  # base64 holds no markup: no escaping
    details = pack(page.rows.details)
    policy = (
        f"default-src 'none'; script-src 'sha256-{_sha256(js)}'; "
        f"style-src 'sha256-{_sha256(css)}'; img-src data:; base-uri 'none'; form-action 'none'"
    )
    subtitle = [f"results <code>{escape(page.results_label)}</code>"]
    if page.baseline_label is not None:
        subtitle.append(f"baseline <code>{escape(page.baseline_label)}</code>")
    if page.data_label is not None:
        subtitle.append(f"dataset <code>{escape(page.data_label)}</code>")
    subtitle.append(f"built {escape(page.built)}")
    warnings = "".join(f"<li>{escape(w)}</li>" for w in page.warnings)
    notes = "".join(f'<p class="hint">{escape(n)}</p>' for n in page.notes)
    charts = "".join(
        f'<div class="chart-box"><h3>{escape(title)}</h3>{svg}</div>' for title, svg in page.charts
    )
    ids = page.rows.columns["id"]
    return "".join(
        [
            head(page.title, css, policy),
            f'<header class="top"><h1>{escape(page.title)}</h1>'
            f'<p class="sub">{" · ".join(subtitle)}</p></header>',
            "<main>",
            f'<ul class="warnings" id="warnings">{warnings}</ul>' if warnings else "",
            headline(page.summary),
            notes,
            comparison_section(page),
            f'<section id="charts"><h2>Distributions</h2><div class="charts">{charts}</div>'
            '<p class="hint">Click a bar to show its examples in the table.</p></section>',
            distributions(page.summary, page.baseline_summary),
            errors_section(page.summary.error_groups, page.rows.kinds, ids),
            '<section id="examples"><h2>Examples</h2>',
            controls(page),
            '<div class="table" id="table" role="grid">'
            '<div class="thead" id="thead" role="row"></div>'
            '<div class="tbody" id="tbody"><div id="spacer"></div><div id="window"></div></div>'
            "</div>",
            '<p class="hint">Click an example to see its input, output, expected value and full '
            "feedback; ↑/↓ or j/k move between examples, Esc closes.</p>"
            "<noscript><p>The table of examples needs JavaScript; everything above does not."
            "</p></noscript>",
            "</section>",
            metadata(page),
            "</main>",
            '<aside id="detail" hidden aria-label="Example detail"><div class="detail-head">'
            '<h2 id="detail-title"></h2>'
            '<button id="detail-prev" type="button" title="Previous (↑)">↑</button>'
            '<button id="detail-next" type="button" title="Next (↓)">↓</button>'
            '<button id="detail-close" type="button" title="Close (Esc)">✕</button></div>'
            '<div id="detail-body"></div></aside>',
            f'<script type="application/json" id="report-config">{config}</script>',
            f'<script type="application/octet-stream" id="report-columns">{columns}</script>',
            f'<script type="application/octet-stream" id="report-details">{details}</script>',
            f"<script>{js}</script>",
            "</body></html>\n",
        ]
    )


def header_differences(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The header fields both runs record and that differ (what changed between them)."""
    return [
        key for key in a if key in b and a[key] != b[key] and key not in ("created", "created_at")
    ]
