"""Reading dataset files as rows: bytes to JSON values, with every failure named.

Why a module of its own: a dataset file is the user's, made by spreadsheets, editors and
scripts, and each way it can be odd must end in a :class:`DatasetError` that names the
file, the line and the fix, never in a traceback from a parser. The rules, one for every
format:

- **Text is UTF-8.** A UTF-8 byte-order mark at the start (as spreadsheets write "CSV
  UTF-8") is not data and is skipped, so a CSV keeps its first column's name (``id``). A
  UTF-16 or UTF-32 mark, a NUL byte near the start, or bytes that are not UTF-8 are
  refused with a message saying to save the file as UTF-8.
- **NaN and Infinity are refused** in ``.jsonl`` and ``.json`` alike, naming the line and
  the key path. JSON has no such values (RFC 8259); Python's ``json`` accepts them as an
  extension, so a ``.json`` file used to load what the same rows in ``.jsonl`` refused.
  A dataset value that is not a number is better written as ``null`` or a string. (In a
  CSV every cell is a string, ``"NaN"`` included.)
- **Lone surrogates are refused**: an escape such as ``"\\ud800"`` is not a character,
  cannot be sent to a model or written to a results file, and is named as such.
- **Nesting is limited** to :data:`MAX_DEPTH` levels. The parsers and the engine (copies,
  pickling to worker processes, the results file) recurse once per level; a row nested
  5,000 deep would otherwise end in a ``RecursionError`` somewhere later. msgspec has no
  depth limit of its own (it stops at the interpreter's recursion limit), so a JSON Lines
  row's depth is walked only when its line could pass the limit: at least
  ``2 * (MAX_DEPTH + 1)`` bytes with more ``[`` and ``{`` than ``MAX_DEPTH`` (a cheap
  upper bound on its depth); other rows cost no walk.

Rows are decoded with msgspec for ``.jsonl`` and ``.json`` alike (one JSON dialect), and
read lazily where the format allows (JSON Lines and CSV stream; a ``.json`` list is one
document).
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from .._exceptions import DatasetError

__all__ = ["MAX_DEPTH", "csv_rows", "json_rows", "jsonl_rows", "too_deep", "too_deep_problem"]

#: The deepest nesting a dataset row may have (the row object itself is level 1).
MAX_DEPTH = 200

_UTF8_BOM = codecs.BOM_UTF8
# Longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
_OTHER_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
_SNIFF = 4096
_SAVE_AS_UTF8 = (
    "save it as UTF-8 (a spreadsheet's 'CSV UTF-8' format, or an editor's UTF-8 encoding)"
)


def _skip_bom(path: Path, head: bytes) -> int:
    """How many leading bytes are a UTF-8 byte-order mark; refuses other encodings."""
    for bom, name in _OTHER_BOMS:
        if head.startswith(bom):
            raise DatasetError(
                path,
                1,
                f"the file is {name} text (it starts with a {name} byte-order mark); "
                + _SAVE_AS_UTF8,
            )
    skip = len(_UTF8_BOM) if head.startswith(_UTF8_BOM) else 0
    nul = head.find(b"\x00", skip)
    if nul >= 0:
        raise DatasetError(
            path,
            head.count(b"\n", 0, nul) + 1,
            "the file holds NUL bytes, so it is not UTF-8 text (UTF-16 without a "
            "byte-order mark, or a binary file); " + _SAVE_AS_UTF8,
        )
    return skip


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests dicts and lists more than ``limit`` levels deep.

    Iterative, so it cannot itself run out of stack; only containers are visited.
    """
    if type(value) not in (dict, list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if type(item) is dict else item
        for child in children:
            if type(child) in (dict, list):
                stack.append((child, depth + 1))
    return False


def too_deep_problem() -> str:
    return (
        f"the row is nested more than {MAX_DEPTH} levels deep; flatten it, or store the "
        "deep part as a string (json.dumps) and parse it in your program"
    )


_BYTE = re.compile(r"\(byte (\d+)\)")
_NONFINITE = (b"NaN", b"Infinity", b"-Infinity", b"+Infinity")
_SURROGATE_ESCAPE = re.compile(rb"\\+u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _lone_surrogate(data: bytes) -> tuple[int, str] | None:
    """(offset, escape) of the first ``\\uD800``-``\\uDFFF`` escape that is not half of a
    surrogate pair, skipping escaped backslashes (an even run of them is not an escape)."""
    high: tuple[int, str] | None = None
    high_end = -1
    for match in _SURROGATE_ESCAPE.finditer(data):
        slashes = len(match.group()) - 5
        if slashes % 2 == 0:
            continue
        start = match.start() + slashes - 1
        escape = match.group()[slashes - 1 :].decode()
        if int(escape[2:], 16) < 0xDC00:
            if high is not None:
                return high
            high, high_end = (start, escape), match.end()
        elif high is not None and start == high_end:
            high = None
        else:
            return start, escape
    return high


class _NonFinite:
    """Stands for a NaN or Infinity that ``json`` parsed, to find where it was."""

    def __init__(self, text: str) -> None:
        self.text = text


def _nonfinite_path(value: Any) -> tuple[str, str] | None:
    """(key path, literal) of the first NaN/Infinity marker in ``value``."""
    stack: list[tuple[Any, str]] = [(value, "$")]
    while stack:
        item, where = stack.pop()
        if isinstance(item, _NonFinite):
            return where, item.text
        if isinstance(item, dict):
            stack.extend((v, f"{where}[{k!r}]") for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


def _describe_json_error(data: bytes, exc: msgspec.DecodeError) -> tuple[int | None, str]:
    """(byte offset or None, problem) for a JSON document that msgspec refused."""
    text = str(exc)
    match = _BYTE.search(text)
    offset = int(match.group(1)) if match else None
    lone = _lone_surrogate(data) if ("surrogate" in text or "truncated" in text) else None
    if lone is not None:
        start, escape = lone
        return start, (
            f"the escape {escape} is a lone surrogate, not a character (it is not valid "
            "Unicode text and cannot be sent to a model or stored); remove it or write "
            "the character it was meant to be"
        )
    if offset is not None and "invalid character" in text:
        at = data[offset - 1 : offset + 9] if offset else data[:10]
        if any(at.startswith(t) or at[1:].startswith(t) for t in _NONFINITE):
            return offset, _nonfinite_problem(data)
    if "Invalid UTF-8" in text:
        bad = _first_bad_utf8(data)
        return bad, _not_utf8(data, bad)
    if "truncated" in text:
        return None, "broken JSON: it ends early (a bracket, brace or quote is not closed)"
    return offset, f"broken JSON: {_BYTE.sub('', text).strip()}"


def _not_utf8(data: bytes, offset: int) -> str:
    byte = data[offset : offset + 1].hex().upper() or "?"
    column = _line_col(data, offset)[1]
    return f"the text is not UTF-8 (byte 0x{byte} at column {column}); " + _SAVE_AS_UTF8


def _nonfinite_problem(data: bytes) -> str:
    found = None
    try:
        parsed = json.loads(data, parse_constant=_NonFinite)
        found = _nonfinite_path(parsed)
    except (ValueError, RecursionError):
        pass
    where = f"{found[1]} at {found[0]}" if found else "NaN or Infinity"
    return (
        f"{where} is not JSON (JSON has no NaN or Infinity, so other tools could not read "
        "this file either); write null, or the value as a string"
    )


def _first_bad_utf8(data: bytes) -> int:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return 0


def _line_col(data: bytes, offset: int) -> tuple[int, int]:
    line = data.count(b"\n", 0, offset) + 1
    return line, offset - (data.rfind(b"\n", 0, offset) + 1) + 1


#: The fewest bytes a JSON value nested past :data:`MAX_DEPTH` can take: an opening and a
#: closing bracket per level. A shorter line cannot be too deep, so its depth is not walked.
_DEEP_BYTES = 2 * (MAX_DEPTH + 1)
_CHUNK = 1 << 20
_DECODER = msgspec.json.Decoder()


def _may_be_too_deep(raw: bytes) -> bool:
    """Whether a row's bytes could nest past the limit: each level takes a ``[`` or ``{``,
    so a line with no more of them than :data:`MAX_DEPTH` cannot (brackets inside strings
    count too: an upper bound, checked exactly by :func:`too_deep` when it is passed)."""
    return len(raw) >= _DEEP_BYTES and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH


def _hash_rest(fh: BinaryIO, digest: Any) -> None:
    """The bytes a reader stopped before (a ``--limit``), hashed so the digest is the
    whole file's."""
    for chunk in iter(lambda: fh.read(_CHUNK), b""):
        digest.update(chunk)


def _lines(path: Path, fh: BinaryIO, digest: Any) -> Iterator[bytes]:
    """The file's lines (without their ``\\n``), read in chunks; each chunk goes to
    ``digest`` (when given) as it is read."""
    chunk = fh.read(_CHUNK)
    if digest is not None:
        digest.update(chunk)
    chunk = chunk[_skip_bom(path, chunk[:_SNIFF]) :]
    carry = b""
    while chunk:
        lines = (carry + chunk).split(b"\n")
        carry = lines.pop()
        yield from lines
        chunk = fh.read(_CHUNK)
        if digest is not None:
            digest.update(chunk)
    if carry:
        yield carry


def _undecodable(path: Path, line_no: int, raw: bytes, exc: msgspec.DecodeError) -> DatasetError:
    offset, problem = _describe_json_error(raw, exc)
    if offset is not None and problem.startswith("broken JSON"):
        problem += f" (column {_line_col(raw, offset)[1]})"
    return DatasetError(path, line_no, problem)


def jsonl_rows(path: Path, digest: Any = None) -> Generator[tuple[int, Any], None, None]:
    """``(line number, value)`` for every non-blank line of a JSON Lines file.

    The file is read once, in chunks; ``digest`` (a ``hashlib`` object), when given, is
    updated with every byte of it, those after the point where the caller stopped
    included, so that one read gives the rows and the file's fingerprint.
    """
    decoder = _DECODER
    with path.open("rb") as fh:
        try:
            for line_no, raw in enumerate(_lines(path, fh, digest), start=1):
                if raw.startswith(_UTF8_BOM):
                    # A file concatenated from files saved with a mark: the mark is not data.
                    raw = raw[len(_UTF8_BOM) :]
                if not raw or raw.isspace():
                    continue
                try:
                    value = decoder.decode(raw)
                except msgspec.DecodeError as exc:
                    raise _undecodable(path, line_no, raw, exc) from None
                except RecursionError:
                    raise DatasetError(path, line_no, too_deep_problem()) from None
                if _may_be_too_deep(raw) and too_deep(value):
                    raise DatasetError(path, line_no, too_deep_problem())
                yield line_no, value
        except GeneratorExit:
            if digest is not None:
                _hash_rest(fh, digest)
            raise


def json_rows(path: Path, digest: Any = None) -> Generator[tuple[int | None, Any], None, None]:
    """The items of a ``.json`` file holding a list (or ``{"examples": [...]}``);
    ``digest``, when given, is updated with the file's bytes."""
    data = path.read_bytes()
    if digest is not None:
        digest.update(data)
    data = data[_skip_bom(path, data[:_SNIFF]) :]
    try:
        document = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        offset, problem = _describe_json_error(data, exc)
        if offset is None:
            raise DatasetError(path, None, problem) from None
        line, col = _line_col(data, offset)
        if problem.startswith("broken JSON"):
            problem += f" (column {col})"
        raise DatasetError(path, line, problem) from None
    except RecursionError:
        raise DatasetError(path, _deep_line(data), too_deep_problem()) from None
    if isinstance(document, dict) and isinstance(document.get("examples"), list):
        document = document["examples"]
    if not isinstance(document, list):
        raise DatasetError(
            path,
            1,
            f"the file holds a {type(document).__name__}; a JSON dataset is a list of objects",
        )
    for position, row in enumerate(document):
        # Depth is counted from the row, as in JSON Lines.
        if too_deep(row):  # one document: the whole file's brackets bound no single row
            raise DatasetError(f"{path} (item {position})", _deep_line(data), too_deep_problem())
        yield None, row


_TOKENS = re.compile(rb'[\[\]{}"\\]')


def _deep_line(data: bytes) -> int | None:
    """The line where the nesting of a JSON document first passes the row limit.

    Counts brackets outside strings; a row of a ``.json`` list sits one level below the
    list (or two below ``{"examples": [...]}``), so the bound is generous by that much.
    """
    depth = 0
    in_string = False
    escaped = False
    for match in _TOKENS.finditer(data):
        char = match.group()
        if in_string:
            if escaped:
                escaped = False
            elif char == b"\\":
                escaped = match.end() < len(data)
            elif char == b'"':
                in_string = False
            continue
        if char == b'"':
            in_string = True
            escaped = False
        elif char in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH + 1:
                return data.count(b"\n", 0, match.start()) + 1
        elif char in (b"]", b"}"):
            depth -= 1
    return None


class _Hashing(io.RawIOBase):
    """A binary file whose bytes go to ``digest`` as they are read."""

    def __init__(self, fh: io.FileIO, digest: Any) -> None:
        self._fh = fh
        self._digest = digest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n: int = self._fh.readinto(buffer)
        if n:
            self._digest.update(memoryview(buffer)[:n])
        return n


def csv_rows(path: Path, digest: Any = None) -> Generator[tuple[int, dict[str, str]], None, None]:
    """``(line number, row)`` for every record of a CSV file with a header line;
    ``digest``, when given, is updated with every byte of the file (read once)."""
    with io.FileIO(path, "rb") as raw:
        binary = io.BufferedReader(_Hashing(raw, digest) if digest is not None else raw)
        binary.read(_skip_bom(path, binary.peek(_SNIFF)[:_SNIFF]))
        with io.TextIOWrapper(binary, encoding="utf-8", newline="") as text:
            yield from _csv_reading(path, text, binary, digest)


def _csv_reading(
    path: Path, text: io.TextIOWrapper, binary: BinaryIO, digest: Any
) -> Generator[tuple[int, dict[str, str]], None, None]:
    reader = csv.DictReader(text)
    try:
        yield from _csv_records(path, reader)
    except csv.Error as exc:
        raise DatasetError(path, reader.line_num, f"broken CSV: {exc}") from None
    except UnicodeDecodeError:
        # The wrapper decodes ahead in chunks, so find the line itself.
        data = path.read_bytes()
        bad = _first_bad_utf8(data)
        line = data.count(b"\n", 0, bad) + 1
        raise DatasetError(path, line, _not_utf8(data, bad)) from None
    except GeneratorExit:
        # Stopped early (a --limit): read on, so the digest is the whole file's (what the
        # wrapper had read ahead was hashed as it was read).
        while digest is not None and binary.read(_CHUNK):
            pass
        raise


def _csv_records(path: Path, reader: csv.DictReader[str]) -> Iterator[tuple[int, dict[str, str]]]:
    if reader.fieldnames is None:
        return
    names = list(reader.fieldnames)
    dupes = {c for c in names if names.count(c) > 1}
    if dupes:
        raise DatasetError(path, 1, f"duplicate column name(s) {sorted(dupes)} in the header")
    for row in reader:
        line = reader.line_num
        if None in row:
            extra = row[None]  # DictReader puts the overflow under None
            raise DatasetError(
                path,
                line,
                f"row has {len(names) + len(extra)} fields, the header has {len(names)}",
            )
        if any(v is None for v in row.values()):
            raise DatasetError(path, line, f"row has fewer fields than the header's {len(names)}")
        yield line, row
