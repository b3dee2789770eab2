"""Reading a results file for a report: every line accounted for, or an error naming it.

A report is only worth looking at when its counts are the file's counts, so it reads the
file strictly, through the one line reader, ``evaluator._results_file._reader.Reader``,
with ``strict=True`` (and ``bulk=True``: the results in one pass in C when every line
between the header and a run's end line is one, else line by line). Reading for
``--resume`` may drop a torn last line and go on, because the run will redo the example;
a report cannot redo it, so a torn, non-JSON or foreign line is an error that names the
file and line, says what is wrong and how to fix it (``_reader.diagnose``). An example
that occurs twice (its ``result_key``) is an error too (two runs wrote one file at once):
a report that counted it twice would be wrong, and one that kept either
line would be silently choosing.

A results file may start with a header line, an object holding the key
``"skynet_eval_results"`` (the format version; key and version are
:mod:`evaluator._fingerprint`'s, as for ``--resume``) and metadata about what produced
the run (fingerprints of the dataset, metric, program and artifact, when it was
created). Files with and without it are read alike; the metadata is shown on the page.
A header found again further down (a resumed run may record its own session) is kept
as a later session.

Results do not carry the example's input and expected value; :func:`join_examples` joins
them from the dataset by id. A result line that carries ``input`` or ``expected`` keys
itself (a later format may) keeps them.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import msgspec

from .._call._results import Result, example_key, result_key
from .._exceptions import ResultsFileError
from .._fingerprint import HEADER_KEY
from ._reader import Reader

__all__ = [
    "ResultsFile",
    "ResultsFileError",
    "join_examples",
    "load_results_file",
    "results_from",
]

_BOM = b"\xef\xbb\xbf"


class ReportLine(Result, gc=False):
    """A result as read for a report: a :class:`Result`, plus the example's ``input`` and
    ``expected`` when the line carries them (``msgspec.UNSET`` when it does not).

    Like a result, it encodes without its default fields: the page carries every example
    whole, and a zero token count repeated 100,000 times is only weight.
    """

    input: Any = msgspec.UNSET
    expected: Any = msgspec.UNSET


class ResultsFile(msgspec.Struct, kw_only=True):
    """The results of one run as a report sees them.

    ``header`` is the first header line's object (None when the file has none);
    ``sessions`` holds any later header lines with their line numbers, but for the lines
    a run appends when it stops, whose ``ended`` objects (wall time, results written,
    throughput) are in ``ended``.
    ``line_numbers[i]`` is the file line of ``results[i]`` (None for results given in
    memory).
    """

    path: str | None
    results: list[Result]
    header: dict[str, Any] | None = None
    sessions: list[tuple[int, dict[str, Any]]] = []
    ended: list[dict[str, Any]] = []
    line_numbers: list[int] | None = None

    def timing(self) -> dict[str, float | None]:
        """``wall_s`` and ``throughput`` over the runs that recorded them (a resumed file:
        the sum of their wall times, and the results they timed over it); empty when none
        did (and no throughput when one run could not tell its rate)."""
        walls = [e.get("wall_s") for e in self.ended]
        rates = [e.get("throughput") for e in self.ended]
        if not walls or not all(isinstance(w, (int, float)) for w in walls):
            return {}
        wall = float(sum(walls))  # type: ignore[arg-type]
        out: dict[str, float | None] = {"wall_s": wall, "throughput": None}
        if wall > 0 and all(isinstance(r, (int, float)) for r in rates):
            # Each run's rate over its own clock: the results it timed, over all the time.
            timed = sum(r * w for r, w in zip(rates, walls, strict=True))  # type: ignore[operator]
            out["throughput"] = timed / wall
        return out


_decoder = msgspec.json.Decoder(ReportLine)


def load_results_file(path: str | PathLike[str]) -> ResultsFile:
    """Read ``path`` whole: its results in file order and its header, if any.

    Raises :class:`ResultsFileError` for a missing or empty file, a torn, non-JSON or
    foreign line, a header of a newer format, or an example id that occurs twice.
    """
    p = Path(path)
    name = str(path)
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "does not exist"
        raise ResultsFileError(
            name, None, f"the results file {what}", "pass the file `skynet-eval run --output` wrote"
        )
    data = p.read_bytes()
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    header, results, numbers, sessions, ended, repeated = _read_lines(name, data)
    if not results:
        raise ResultsFileError(
            name,
            None,
            "holds no results" + (" (only a header)" if header is not None else ""),
            "the run wrote none yet; run `skynet-eval run ... --output FILE` to completion",
        )
    if repeated:  # the reader counted them (by result_key): name the first one's lines
        _refuse_duplicates(name, results, numbers)
    return ResultsFile(
        path=name,
        results=results,
        header=header,
        sessions=sessions,
        ended=ended,
        line_numbers=numbers,
    )


def _read_lines(
    name: str, data: bytes
) -> tuple[
    dict[str, Any] | None,
    list[Result],
    list[int],
    list[tuple[int, dict[str, Any]]],
    list[dict[str, Any]],
    int,
]:
    """Every line through the one line reader (:class:`Reader`, strict, in bulk: the
    lines between the header and a run's end line in one pass in C, line by line when one
    of them is not a result, so that a bad line is found and named), and its headers told
    apart: the first one, later sessions', and the end lines runs appended; last, how many
    results repeat an earlier one's ``result_key``."""
    reader = Reader(Path(name), strict=True, bulk=True, decoder=_decoder)
    results = list(reader.iterate(io.BytesIO(data)))
    numbers = reader.numbers
    first = numbers[0] if numbers else None
    header: dict[str, Any] | None = None
    sessions: list[tuple[int, dict[str, Any]]] = []
    ended: list[dict[str, Any]] = []
    for number, found in reader.out.headers:
        assert isinstance(found, dict)  # a strict reader keeps each header as written
        if isinstance(found.get("ended"), dict) and header is not None:
            ended.append(found["ended"])
        elif header is None and not sessions and (first is None or number < first):
            header = found
        else:
            sessions.append((number, found))
    return header, results, numbers, sessions, ended, reader.out.duplicates


def _refuse_duplicates(path: str | None, results: list[Result], numbers: list[int] | None) -> None:
    seen: dict[Any, int] = {}
    for index, result in enumerate(results):
        key = result_key(result)  # one per id, or per (id, pass) of `run --repeat`
        first = seen.setdefault(key, index)
        if first != index:
            if numbers is not None:
                where, line = f"lines {numbers[first]} and {numbers[index]}", numbers[index]
            else:
                where, line = f"items {first + 1} and {index + 1}", None
            raise ResultsFileError(
                path,
                line,
                f"example id {result.example_id!r} has two results"
                f"{f' in repeat {key[1]}' if key[1] else ''} ({where}): two runs wrote "
                "one file at once, or two files were joined",
                "keep one result per example id (a report counts each example once)",
            )


def results_from(source: Iterable[Result] | str | PathLike[str]) -> ResultsFile:
    """A results file from a path, or from results held in memory (a run's own list)."""
    if isinstance(source, (str, PathLike)):
        return load_results_file(source)
    results = list(source)
    for index, result in enumerate(results):
        if not isinstance(result, Result):
            raise ResultsFileError(
                None,
                None,
                f"item {index + 1} is a {type(result).__name__}, not an evaluator.Result",
                "pass the results an Evaluator returned, or a results file's path",
            )
    if not results:
        raise ResultsFileError(None, None, "no results", "pass at least one result")
    _refuse_duplicates(None, results, None)
    return ResultsFile(path=None, results=results)


class Joined(msgspec.Struct, frozen=True):
    """An example's input and expected value, as the report shows them."""

    input: Any
    expected: Any


def join_examples(examples: Iterable[Any]) -> dict[Any, Joined]:
    """Input and expected value of each dataset example, keyed by
    :func:`evaluator._call._results.example_key`."""
    out: dict[Any, Joined] = {}
    for example in examples:
        out[example_key(example.id)] = Joined(example.input, example.expected)
    return out


def header_fields(header: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The header's metadata as (label, text) pairs, nested objects flattened as ``a.b``."""
    if not header:
        return []
    out: list[tuple[str, str]] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif isinstance(value, str):
            out.append((prefix, value))
        else:
            try:
                out.append((prefix, msgspec.json.encode(value).decode()))
            except (TypeError, ValueError, UnicodeEncodeError):
                out.append((prefix, repr(value)))

    walk("", {k: v for k, v in header.items() if k != HEADER_KEY})
    return out
