"""Building a report: results (and a baseline, and a dataset) in, one HTML file out.

:func:`build_report` does the work and returns everything computed (the summaries, the
comparison and the page's text), so that the command line can print the same numbers it
wrote; :func:`write_html_report` is the call for library users and for
``skynet-eval run --report``.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import msgspec

from ..._call._results import Result, example_key
from ..._data._dataset import Example, load_examples
from ..._outpath import check_output_path
from ..._results_file._load import Joined, ResultsFile, header_fields, join_examples, results_from
from .._stats import RunSummary, histogram, log_edges, score_edges, summarize
from ._compare import Comparison, compare_results, pair_results
from ._html import Page, header_differences, render_page
from ._rows import STATUS_CODES, PageRows, build_rows, carries_inputs
from ._svg import Marker, Series, bar_chart, fmt_number

__all__ = ["BuiltReport", "build_report", "write_file", "write_html_report"]

ResultsSource = Iterable[Result] | str | PathLike[str]
_REGRESSIONS_LISTED = 10


class BuiltReport(msgspec.Struct, kw_only=True):
    """A built report: its numbers, and the page (``html``) that shows them."""

    summary: RunSummary
    baseline_summary: RunSummary | None
    comparison: Comparison | None
    regressions: list[tuple[Any, float]]  # (example id, score difference), the worst first
    warnings: list[str]
    html: str
    path: Path | None = None  # where it was written, if it was

    @property
    def size_bytes(self) -> int:
        return len(self.html.encode("utf-8"))


def _label(source: ResultsFile, fallback: str) -> str:
    return source.path if source.path is not None else fallback


def _examples(
    data: Iterable[Example] | str | PathLike[str] | None,
    input_cols: Sequence[str] | None,
    output_cols: Sequence[str] | None,
) -> tuple[dict[Any, Joined] | None, str | None]:
    if data is None:
        return None, None
    if isinstance(data, (str, PathLike)):
        loaded = load_examples(os.fspath(data), input_cols=input_cols, output_cols=output_cols)
        return join_examples(loaded), os.fspath(data)
    return join_examples(data), "(examples given in memory)"


def _charts(
    rows: PageRows,
    summary: RunSummary,
    comparison: Comparison | None,
    baseline: ResultsFile | None,
) -> list[tuple[str, str]]:
    cols = rows.columns
    # This run's rows: all of them, less the baseline's examples it is missing.
    missing = STATUS_CODES.index("missing")
    st = cols.get("st") or [None] * len(cols["id"])
    here = [i for i, status in enumerate(st) if status != missing]
    ok = [cols["sc"][i] for i in here if cols["ek"][i] < 0]
    bad = [cols["sc"][i] for i in here if cols["ek"][i] >= 0]
    base_scores = [r.score for r in baseline.results] if baseline is not None else []
    edges = score_edges(ok + bad + base_scores)
    stacked = [Series(0, "ok", "ok"), Series(1, "err", "errors")]
    overlay = Series(2, "base", "baseline") if baseline is not None else None
    charts = [
        (
            "Scores",
            bar_chart(
                histogram(edges, ok, bad, base_scores),
                label="Score histogram",
                stacked=stacked,
                overlay=overlay,
                x_label="score",
                filter_key="sc",
            ),
        )
    ]
    if comparison is not None:
        charts.append(("Score change against the baseline", _delta_chart(cols, comparison)))
    for key, title, dist in (
        ("pms", "Program time per example", summary.program_ms),
        ("mms", "Metric time per example", summary.metric_ms),
    ):
        values = [v for v in cols[key] if v is not None]
        if values:
            charts.append((title, _log_chart(values, key, "ms", dist)))
    costs = [cols["cost"][i] for i in here]
    if any(c is None or c > 0 for c in costs):  # not when every example cost a measured $0
        charts.append(("Cost per example (program + judge)", _cost_chart(costs)))
    return charts


def _delta_chart(cols: Mapping[str, Any], comparison: Comparison) -> str:
    worse = [d for d, s in zip(cols["d"], cols["st"], strict=True) if s == 0]
    better = [d for d, s in zip(cols["d"], cols["st"], strict=True) if s == 4]
    reach = max((abs(v) for v in worse + better), default=0.0)
    note = f"{comparison.same:,} examples with the same score are not drawn"
    if not reach:
        return bar_chart([], label="Score change", stacked=[], note="no example changed score")
    edges = [-reach + 2 * reach * i / 20 for i in range(20)] + [reach]
    return bar_chart(
        histogram(edges, worse, better),
        label="Score change histogram",
        stacked=[Series(0, "worse", "worse"), Series(1, "better", "better")],
        x_label="score change (this run − baseline)",
        filter_key="d",
        note=note,
    )


def _log_chart(values: Sequence[float], key: str, unit: str, dist: Any) -> str:
    edges = log_edges(values)
    zeros = sum(1 for v in values if v <= 0)
    note = f"{zeros:,} at 0 not drawn (log scale)" if zeros else ""
    if edges is None:
        return bar_chart([], label=key, stacked=[], note=note)
    markers = [
        Marker(value, name)
        for name, value in (("p50", dist.p50), ("p95", dist.p95), ("p99", dist.p99))
        if value is not None
    ]
    return bar_chart(
        histogram(edges, values),
        label=f"{key} histogram",
        stacked=[Series(0, "lat", "examples")],
        markers=markers,
        log_x=True,
        x_label=f"{'program' if key == 'pms' else 'metric'} time ({unit}, log scale)",
        x_format=fmt_number,
        filter_key=key,
        note=note,
    )


def _cost_chart(costs: Sequence[float | None]) -> str:
    measured = [c for c in costs if c is not None]
    unmeasured = len(costs) - len(measured)
    zeros = sum(1 for c in measured if c <= 0)
    notes = []
    if zeros:
        notes.append(f"{zeros:,} at $0 not drawn (log scale)")
    if unmeasured:
        notes.append(f"{unmeasured:,} unmeasured (no known price) not drawn")
    edges = log_edges(measured)
    if edges is None:
        return bar_chart([], label="Cost", stacked=[], note="; ".join(notes))
    return bar_chart(
        histogram(edges, [c for c in measured if c > 0]),
        label="cost histogram",
        stacked=[Series(0, "cost", "examples")],
        log_x=True,
        x_label="cost per example (USD, log scale)",
        x_format=lambda v: f"${fmt_number(v)}",
        filter_key="cost",
        note="; ".join(notes),
    )


def _warnings(
    current: ResultsFile,
    baseline: ResultsFile | None,
    comparison: Comparison | None,
    examples: Mapping[Any, Joined] | None,
    data_label: str | None,
) -> list[str]:
    out: list[str] = []
    if current.sessions:
        lines = ", ".join(str(n) for n, _ in current.sessions[:5])
        out.append(
            f"The results file holds {len(current.sessions)} more header line(s) (line {lines}): "
            "it was resumed or appended to; the header shown below is the first."
        )
        first = dict(header_fields(current.header))
        for number, later in current.sessions:
            changed = header_differences(first, dict(header_fields(later)))
            if changed:
                out.append(
                    f"The header on line {number} differs from the first in {', '.join(changed)}: "
                    "this file mixes results of different runs."
                )
    if comparison is not None and comparison.only_baseline:
        out.append(
            f"{comparison.only_baseline:,} example(s) of the baseline are missing from this run: "
            "they are flagged 'missing here' in the table and never counted as passes."
        )
    if comparison is not None and comparison.only_current:
        out.append(
            f"{comparison.only_current:,} example(s) of this run are not in the baseline: "
            "they are flagged 'new here' and left out of the comparison."
        )
    if examples is not None:
        keys = {example_key(r.example_id) for r in current.results}
        unknown = len(keys - examples.keys())
        absent = len(examples.keys() - keys)
        if unknown:
            out.append(
                f"{unknown:,} result(s) have no example with their id in {data_label}: "
                "is it the dataset this run used?"
            )
        if absent:
            out.append(
                f"{absent:,} example(s) of {data_label} have no result in this run (it stopped "
                "early, or ran on part of the dataset)."
            )
    return out


def build_report(
    results: ResultsSource | ResultsFile,
    *,
    baseline: ResultsSource | ResultsFile | None = None,
    data: Iterable[Example] | str | PathLike[str] | None = None,
    input_cols: Sequence[str] | None = None,
    output_cols: Sequence[str] | None = None,
    meta: Mapping[str, Any] | None = None,
    title: str | None = None,
    tolerance: float = 0.0,
) -> BuiltReport:
    """Compute the report of ``results`` (against ``baseline``) and render its page."""
    current = results if isinstance(results, ResultsFile) else results_from(results)
    base = None
    if baseline is not None:
        base = baseline if isinstance(baseline, ResultsFile) else results_from(baseline)
    examples, data_label = _examples(data, input_cols, output_cols)
    info = {**(current.header or {}), **current.timing(), **(meta or {})}
    summary = summarize(current.results, info)
    baseline_summary = (
        summarize(base.results, {**(base.header or {}), **base.timing()})
        if base is not None
        else None
    )
    comparison = None
    pairing = None
    if base is not None:
        pairing = pair_results(current.results, base.results)
        comparison = compare_results(
            current.results, base.results, tolerance=tolerance, pairing=pairing
        )
    rows = build_rows(
        current.results,
        lines=current.line_numbers,
        baseline=base.results if base is not None else None,
        baseline_lines=base.line_numbers if base is not None else None,
        pairing=pairing,
        tolerance=tolerance,
        examples=examples,
    )
    regressions = _regressions(rows)
    results_label = _label(current, "results of this run")
    baseline_label = _label(base, "baseline results") if base is not None else None
    page = Page(
        title=title or _title(results_label, baseline_label),
        results_label=results_label,
        baseline_label=baseline_label,
        built=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        summary=summary,
        baseline_summary=baseline_summary,
        comparison=comparison,
        rows=rows,
        charts=_charts(rows, summary, comparison, base),
        warnings=_warnings(current, base, comparison, examples, data_label),
        notes=_notes(current, base, summary, examples),
        header=header_fields(current.header),
        baseline_header=header_fields(base.header) if base is not None else [],
        run_meta=header_fields({k: v for k, v in (meta or {}).items() if v is not None}),
        regressions=[(row, rows.columns["id"][row], d) for row, d in regressions],
        data_label=data_label,
    )
    return BuiltReport(
        summary=summary,
        baseline_summary=baseline_summary,
        comparison=comparison,
        # The ids as the results hold them (an int stays an int in --json).
        regressions=[(current.results[row].example_id, d) for row, d in regressions],
        warnings=page.warnings,
        html=render_page(page),
    )


def _title(results_label: str, baseline_label: str | None) -> str:
    title = f"skynet-eval report: {Path(results_label).name}"
    if baseline_label is not None:
        title += f" against {Path(baseline_label).name}"
    return title


def _notes(
    current: ResultsFile,
    base: ResultsFile | None,
    summary: RunSummary,
    examples: Mapping[Any, Joined] | None,
) -> list[str]:
    """Things worth knowing that are not a problem with the run."""
    notes = []
    if examples is None and not any(map(carries_inputs, current.results)):
        notes.append(
            "Inputs and expected values are not stored in results files: pass --data DATASET "
            "(with the run's --input-cols/--output-cols) to see them when you open an example."
        )
    for reason, count in summary.cost_notes:
        notes.append(f"Cost not measured for {count:,} example(s): {reason}")
    if base is not None and current.header and base.header:
        changed = header_differences(
            dict(header_fields(current.header)), dict(header_fields(base.header))
        )
        if changed:
            notes.append("The two runs' headers differ in: " + ", ".join(changed) + ".")
    return notes


def _regressions(rows: PageRows) -> list[tuple[int, float]]:
    cols = rows.columns
    if "st" not in cols:
        return []
    worse = [(d, i) for i, (d, s) in enumerate(zip(cols["d"], cols["st"], strict=True)) if s == 0]
    worse.sort()
    return [(i, d) for d, i in worse[:_REGRESSIONS_LISTED]]


def write_html_report(
    results: ResultsSource,
    out: str | PathLike[str],
    *,
    baseline: ResultsSource | None = None,
    data: Iterable[Example] | str | PathLike[str] | None = None,
    input_cols: Sequence[str] | None = None,
    output_cols: Sequence[str] | None = None,
    meta: Mapping[str, Any] | None = None,
    title: str | None = None,
    tolerance: float = 0.0,
) -> BuiltReport:
    """Write one self-contained HTML report of ``results`` to ``out``.

    ``results`` and ``baseline``: a results file's path, or the :class:`Result` objects
    of a run. ``data``: the dataset (a path, read with ``input_cols``/``output_cols`` as
    ``skynet-eval run`` reads it, or :class:`Example` objects), to show each example's
    input and expected value. ``meta``: what the run knows and the file does not, shown
    on the page; ``wall_s`` (and ``throughput``) give the wall time and throughput.
    ``tolerance``: score differences up to this much count as the same.

    The file is written whole to a temporary name and renamed, so a reader never sees
    half a page. Returns the :class:`BuiltReport` (its ``path`` set).
    """
    target = Path(out)
    check_output_path(target, option="out")  # before the work: a FIFO or device is refused
    built = build_report(
        results,
        baseline=baseline,
        data=data,
        input_cols=input_cols,
        output_cols=output_cols,
        meta=meta,
        title=title,
        tolerance=tolerance,
    )
    write_file(built.html, target)
    built.path = target
    return built


def write_file(html: str, target: Path, option: str = "out") -> None:
    """Write ``html`` whole to a temporary name beside ``target``, then rename it there
    (never over something that is not a regular file: a FIFO, a device, a socket)."""
    check_output_path(target, option=option)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        partial.write_text(html, encoding="utf-8")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
