"""The page's data: one column per table field, and one detail record per example.

The table needs a few short fields of every example at once (to filter, sort and scroll
100,000 rows); the detail panel needs everything about one example, but only when it is
opened. So the data goes into the page in two parts: ``columns``, a JSON object of arrays
(one per field), and ``details``, one JSON line per row (each result whole, with its
baseline counterpart and its input and expected value), parsed one line at a time when
an example is opened.

Both parts are compressed (zlib, level 1) and stored as base64, which the page inflates
with the browser's own ``DecompressionStream``: a 100,000-example run is a page of tens of
megabytes rather than a hundred, and compression costs well under a second. Base64 also
means no string from the results is ever HTML inside the page's data.

Row order: this run's results in file order, then the baseline's examples that this run
is missing. Status codes (``st``) follow :data:`STATUS_CODES`.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from ..._call._results import Result, example_key
from ..._results_file._load import Joined, ReportLine
from ._compare import Pairing, status_of

__all__ = [
    "STATUS_CODES",
    "PageRows",
    "build_rows",
    "carries_inputs",
    "encode_json",
    "encode_raw",
    "id_text",
    "pack",
    "write_csv",
]

# Rank order of the comparison: regressions first, then what is on one side only.
STATUS_CODES = ("worse", "missing", "new", "same", "better")
_WORSE, _MISSING, _NEW, _SAME, _BETTER = range(5)
_PREVIEW = 120


def _fallback(value: Any) -> Any:
    # A value a run kept in memory but JSON cannot hold (a set, a custom object): the page
    # shows its repr rather than failing the whole report.
    return repr(value)


_encoder = msgspec.json.Encoder(enc_hook=_fallback)


def _clean(value: Any) -> Any:
    """``value`` with every string made encodable (lone surrogates written as escapes)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_clean(k) if isinstance(k, str) else k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, msgspec.Struct):
        return _clean(msgspec.to_builtins(value, enc_hook=_fallback))
    return value


def encode_raw(value: Any) -> bytes:
    """JSON bytes of ``value``; a value JSON cannot hold is written as its repr."""
    try:
        return _encoder.encode(value)
    except (UnicodeEncodeError, TypeError, ValueError, OverflowError):
        return _encoder.encode(_clean(value))


def encode_json(value: Any) -> bytes:
    """JSON bytes safe to place inside a ``<script>`` element of an HTML page.

    ``<``, ``>`` and ``&`` only ever occur inside JSON strings, where ``\\u003c`` and
    friends mean the same characters: so no string (``</script>``, ``<!--``) can end the
    element or open a tag, whatever the results hold.
    """
    raw = encode_raw(value)
    return raw.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")


def pack(raw: bytes) -> str:
    """Compressed and base64-encoded: what the page's ``inflate`` reads back."""
    return base64.b64encode(zlib.compress(raw, 1)).decode("ascii")


def id_text(example_id: Any) -> str:
    """An id as the page shows it (a string as itself, anything else as JSON)."""
    if isinstance(example_id, str):
        return example_id
    try:
        return msgspec.json.encode(example_id).decode()
    except (TypeError, ValueError, UnicodeEncodeError):
        return repr(example_id)


def _preview(output: Any) -> str:
    if output is None:
        return ""
    if isinstance(output, str):
        text = output if len(output) <= _PREVIEW else output[: _PREVIEW * 2]
    else:
        text = encode_raw(output)[: _PREVIEW * 4].decode("utf-8", "replace")
    if "\n" in text or "  " in text or "\t" in text:
        text = " ".join(text.split())
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


class Detail(msgspec.Struct, omit_defaults=True, gc=False):
    """What the detail panel shows of one row: this run's result (``r``), the baseline's
    (``b``), the results file lines, and the input and expected value with their source
    (``"data"``: joined from the dataset; ``"line"``: carried by the result line;
    ``"none"``: no dataset given; ``"missing"``: the dataset has no such id)."""

    r: Result | None = None
    b: Result | None = None
    line: int | None = None
    bline: int | None = None
    src: str = "none"
    input: Any = msgspec.UNSET
    expected: Any = msgspec.UNSET


class PageRows(msgspec.Struct, frozen=True):
    """The table's columns, the error kinds they index, and the details: one line a row,
    each ending with a newline."""

    columns: dict[str, Any]
    kinds: list[str]
    details: bytes


def carries_inputs(result: Result) -> bool:
    """Whether a result line brought its example's input or expected value along."""
    return isinstance(result, ReportLine) and (
        result.input is not msgspec.UNSET or result.expected is not msgspec.UNSET
    )


def _sources(
    results: Sequence[Result], examples: Mapping[Any, Joined] | None
) -> list[tuple[str, Any, Any]]:
    """(source, input, expected) of each result, as :class:`Detail` describes them."""
    unset = msgspec.UNSET
    if examples is None and not any(map(carries_inputs, results)):
        return [("none", unset, unset)] * len(results)
    out: list[tuple[str, Any, Any]] = []
    for result in results:
        if isinstance(result, ReportLine) and (
            result.input is not unset or result.expected is not unset
        ):
            given_input = None if result.input is unset else result.input
            expected = None if result.expected is unset else result.expected
            out.append(("line", given_input, expected))
        elif examples is None:
            out.append(("none", unset, unset))
        else:
            joined = examples.get(example_key(result.example_id))
            if joined is None:
                out.append(("missing", unset, unset))
            else:
                out.append(("data", joined.input, joined.expected))
    return out


def _details(details: list[Detail]) -> bytes:
    try:
        return _encoder.encode_lines(details)
    except (UnicodeEncodeError, TypeError, ValueError, OverflowError):
        # One row holds what JSON cannot (a lone surrogate in a string): encode row by row.
        return b"".join(encode_raw(d) + b"\n" for d in details)


def _ms(values: Sequence[float | None]) -> list[float | None]:
    # A microsecond is finer than anyone reads; fewer digits make the page smaller.
    return [None if v is None else round(v, 3) for v in values]


def _costs(results: Sequence[Result]) -> list[float | None]:
    """Program plus judge cost per example; None when either was not measured."""
    out: list[float | None] = []
    for r in results:
        obs, judge = r.observation, r.judge.cost_usd
        program = obs.cost_usd if obs.duration_ms is not None else 0.0
        out.append(None if program is None or judge is None else program + judge)
    return out


def build_rows(
    current: Sequence[Result],
    *,
    lines: Sequence[int] | None = None,
    baseline: Sequence[Result] | None = None,
    baseline_lines: Sequence[int] | None = None,
    pairing: Pairing | None = None,
    tolerance: float = 0.0,
    examples: Mapping[Any, Joined] | None = None,
) -> PageRows:
    """Columns and details for this run's results (and the baseline's, when given)."""
    compare = baseline is not None and pairing is not None
    missing = (
        [baseline[j] for j in pairing.only_baseline] if compare and baseline and pairing else []
    )
    shown = [*current, *missing]
    extra = [None] * len(missing)
    kinds: dict[str, int] = {}

    def kind(result: Result | None) -> int:
        if result is None or result.error is None:
            return -1
        return kinds.setdefault(result.error.kind, len(kinds))

    named = sorted({name for r in current if r.error is None for name in r.scores})
    columns: dict[str, Any] = {
        "id": [id_text(r.example_id) for r in shown],
        "sc": [r.score for r in current] + extra,
        "ek": [kind(r) for r in current] + [-1] * len(missing),
        "fb": [r.feedback for r in shown],
        "out": [_preview(r.output) for r in shown],
        "pms": _ms([r.observation.duration_ms for r in current]) + extra,
        "mms": _ms([r.metric_ms for r in current]) + extra,
        "cost": _costs(current) + extra,
        "named": {
            name: [r.scores.get(name) if r.error is None else None for r in current] + extra
            for name in named
        },
    }
    sources = _sources(current, examples)
    details = [
        Detail(r=r, line=lines[i] if lines else None, src=s[0], input=s[1], expected=s[2])
        for i, (r, s) in enumerate(zip(current, sources, strict=True))
    ]
    if compare:
        assert baseline is not None and pairing is not None
        partner = [-1] * len(current)
        for i, j in pairing.pairs:
            partner[i] = j
        base = [baseline[j] if j >= 0 else None for j in partner] + missing
        columns["bs"] = [None if b is None else b.score for b in base]
        columns["d"] = [
            None if b is None else r.score - b.score for r, b in zip(current, base, strict=False)
        ] + extra
        columns["st"] = [
            _NEW if b is None else STATUS_CODES.index(status_of(r.score - b.score, tolerance))
            for r, b in zip(current, base, strict=False)
        ] + [_MISSING] * len(missing)
        columns["bek"] = [kind(b) for b in base]
        for i, j in enumerate(partner):
            if j >= 0:
                details[i].b = baseline[j]
                details[i].bline = baseline_lines[j] if baseline_lines else None
        for j, (src, given_input, expected) in zip(
            pairing.only_baseline, _sources(missing, examples), strict=True
        ):
            line = baseline_lines[j] if baseline_lines else None
            details.append(
                Detail(b=baseline[j], bline=line, src=src, input=given_input, expected=expected)
            )
    return PageRows(columns=columns, kinds=list(kinds), details=_details(details))


#: The CSV export's fixed columns; each named score follows as ``score:NAME``.
CSV_COLUMNS = (
    "id",
    "score",
    "error_kind",
    "error_message",
    "feedback",
    "output",
    "program_ms",
    "metric_ms",
    "cost_usd",
    "cached",
)


def write_csv(results: Sequence[Result], path: str | Path) -> int:
    """Every result as one CSV row (``CSV_COLUMNS``, then a column per named score);
    an output that is not text is written as JSON, an unmeasured cost as an empty cell
    (never 0). Returns the number of rows written."""
    import csv

    names = sorted({name for r in results for name in r.scores})
    costs = _costs(results)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow([*CSV_COLUMNS, *(f"score:{n}" for n in names)])
        for r, cost in zip(results, costs, strict=True):
            error = r.error
            output = r.output if isinstance(r.output, str) or r.output is None else None
            if output is None and r.output is not None:
                output = encode_json(r.output).decode()
            out.writerow(
                [
                    id_text(r.example_id),
                    r.score,
                    "" if error is None else error.kind,
                    "" if error is None else error.message,
                    r.feedback,
                    "" if output is None else output,
                    _blank(r.observation.duration_ms),
                    _blank(r.metric_ms),
                    _blank(cost),
                    "true" if r.cached else "false",
                    *(_blank(r.scores.get(n)) for n in names),
                ]
            )
    return len(results)


def _blank(value: float | None) -> Any:
    return "" if value is None else value
