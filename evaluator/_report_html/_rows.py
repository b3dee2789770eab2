"""The page's data: one column per table field, and one detail record per example.

The table needs a few short fields of every example at once (to filter, sort and scroll
100,000 rows); the detail panel needs everything about one example, but only when it is
opened. So the data goes into the page twice over, in two forms: ``columns``, a JSON
object of arrays (one per field, parsed at load), and ``details``, one JSON line per row
(kept as text and parsed one line at a time, on click). Nothing is stored twice: the full
feedback lives in ``columns`` (it is searched), outputs, inputs and measurements in
``details``; the table shows outputs shortened (``_PREVIEW`` characters).

Row order: this run's results in file order, then the baseline's examples that this run
is missing. Status codes (``st``) follow :data:`STATUS_CODES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from .._results import Observation, Result, Usage
from ._compare import Pairing, status_of
from ._load import Joined, ReportLine, id_key

__all__ = ["STATUS_CODES", "PageRows", "build_rows", "encode_json", "id_text"]

# Rank order of the comparison: regressions first, then what is on one side only.
STATUS_CODES = ("worse", "missing", "new", "same", "better")
_WORSE, _MISSING, _NEW, _SAME, _BETTER = range(5)
_PREVIEW = 160

_OBS_DEFAULTS = msgspec.structs.asdict(Observation())
_USAGE_DEFAULTS = msgspec.structs.asdict(Usage())


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


def encode_json(value: Any) -> bytes:
    """JSON bytes safe to place inside a ``<script>`` element of an HTML page.

    ``<``, ``>`` and ``&`` only ever occur inside JSON strings, where ``\\u003c`` and
    friends mean the same characters: so no string (``</script>``, ``<!--``) can end the
    element or open a tag, whatever the results hold.
    """
    try:
        raw = _encoder.encode(value)
    except (UnicodeEncodeError, TypeError, ValueError, OverflowError):
        raw = _encoder.encode(_clean(value))
    return raw.replace(b"<", b"\\u003c").replace(b">", b"\\u003e").replace(b"&", b"\\u0026")


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
        text = output
    else:
        try:
            text = _encoder.encode(output).decode("utf-8", "replace")
        except (UnicodeEncodeError, TypeError, ValueError, OverflowError):
            text = repr(output)
    text = " ".join(text[: _PREVIEW * 2].split())
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


def _changed(value: msgspec.Struct, defaults: Mapping[str, Any], keep: bool) -> dict[str, Any]:
    """The fields that differ from their defaults; with ``keep``, the time and cost always
    (a measured $0 is worth showing, and an unmeasured one must say so)."""
    return {
        k: v
        for k, v in msgspec.structs.asdict(value).items()
        if v != defaults[k] or (keep and k in ("duration_ms", "cost_usd"))
    }


def _round_ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _cost(result: Result) -> float | None:
    program = result.observation.cost_usd if result.observation.duration_ms is not None else 0.0
    judge = result.judge.cost_usd
    if program is None or judge is None:
        return None
    return program + judge


def _side(result: Result, line: int | None, *, feedback: bool = False) -> dict[str, Any]:
    """The detail of one result (one side of a comparison). This run's feedback is in the
    columns already; the baseline's is only here (``feedback=True``)."""
    out: dict[str, Any] = {"output": result.output, "score": result.score}
    if feedback:
        out["feedback"] = result.feedback
    if result.scores:
        out["scores"] = result.scores
    if result.error is not None:
        out["kind"] = result.error.kind
        out["message"] = result.error.message
    ran = result.observation.duration_ms is not None
    obs = _changed(result.observation, _OBS_DEFAULTS, ran)
    if obs:
        out["observation"] = obs
    judge = _changed(result.judge, _USAGE_DEFAULTS, result.judge.llm_calls > 0)
    if judge:
        out["judge"] = judge
    if result.metric_ms is not None:
        out["metric_ms"] = result.metric_ms
    if result.extra:
        out["extra"] = result.extra
    if line is not None:
        out["line"] = line
    return out


class PageRows(msgspec.Struct, frozen=True):
    """The table's columns, the error kinds they index, and one detail line per row."""

    columns: dict[str, Any]
    kinds: list[str]
    details: list[bytes]


class _Source:
    """Where an example's input and expected value come from, for the detail panel."""

    def __init__(self, examples: Mapping[Any, Joined] | None) -> None:
        self.examples = examples

    def add(self, detail: dict[str, Any], result: Result) -> None:
        if isinstance(result, ReportLine) and (
            result.input is not msgspec.UNSET or result.expected is not msgspec.UNSET
        ):
            detail["source"] = "line"
            detail["input"] = None if result.input is msgspec.UNSET else result.input
            detail["expected"] = None if result.expected is msgspec.UNSET else result.expected
            return
        if self.examples is None:
            detail["source"] = "none"
            return
        joined = self.examples.get(id_key(result.example_id))
        if joined is None:
            detail["source"] = "missing"
            return
        detail["source"] = "data"
        detail["input"] = joined.input
        detail["expected"] = joined.expected


class _Table:
    """Columns filled one row at a time."""

    def __init__(self, named: Sequence[str], compare: bool) -> None:
        self.kinds: dict[str, int] = {}
        self.c: dict[str, list[Any]] = {
            k: [] for k in ("id", "sc", "ek", "fb", "out", "pms", "mms", "cost")
        }
        self.named: dict[str, list[float | None]] = {name: [] for name in named}
        self.compare = compare
        if compare:
            self.c.update({"bs": [], "d": [], "st": [], "bek": []})

    def kind(self, result: Result | None) -> int:
        if result is None or result.error is None:
            return -1
        return self.kinds.setdefault(result.error.kind, len(self.kinds))

    def add(self, shown: Result, current: Result | None, base: Result | None, st: int) -> None:
        c = self.c
        c["id"].append(id_text(shown.example_id))
        c["sc"].append(None if current is None else current.score)
        c["ek"].append(self.kind(current))
        c["fb"].append(shown.feedback)
        c["out"].append(_preview(shown.output))
        c["pms"].append(_round_ms(shown.observation.duration_ms) if current else None)
        c["mms"].append(_round_ms(shown.metric_ms) if current else None)
        c["cost"].append(_cost(shown) if current else None)
        scores = current.scores if current is not None and current.error is None else {}
        for name, column in self.named.items():
            column.append(scores.get(name))
        if self.compare:
            c["bs"].append(None if base is None else base.score)
            delta = None if current is None or base is None else current.score - base.score
            c["d"].append(delta)
            c["st"].append(st)
            c["bek"].append(self.kind(base))


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
    named = sorted({name for r in current if r.error is None for name in r.scores})
    compare = baseline is not None and pairing is not None
    table = _Table(named, compare)
    source = _Source(examples)
    partner: dict[int, int] = dict(pairing.pairs) if pairing is not None else {}
    details: list[bytes] = []
    for i, result in enumerate(current):
        detail = _side(result, lines[i] if lines else None)
        source.add(detail, result)
        base = None
        if compare:
            assert baseline is not None
            j = partner.get(i)
            if j is None:
                st = _NEW
            else:
                base = baseline[j]
                st = STATUS_CODES.index(status_of(result.score - base.score, tolerance))
                detail["baseline"] = _side(
                    base, baseline_lines[j] if baseline_lines else None, feedback=True
                )
        else:
            st = _SAME
        table.add(result, result, base, st)
        details.append(encode_json(detail))
    if compare:
        assert baseline is not None and pairing is not None
        for j in pairing.only_baseline:
            base = baseline[j]
            line = baseline_lines[j] if baseline_lines else None
            detail = {"baseline": _side(base, line, feedback=True)}
            source.add(detail, base)
            table.add(base, None, base, _MISSING)
            details.append(encode_json(detail))
    columns: dict[str, Any] = dict(table.c)
    columns["named"] = table.named
    return PageRows(columns=columns, kinds=list(table.kinds), details=details)
