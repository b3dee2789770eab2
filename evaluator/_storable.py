"""What a results file stores: every result as one JSON line, whatever its values hold.

A program may return anything (a complex number, a NumPy array, its own class, a list
that contains itself), a metric may put anything in its info dict, and user text may hold
a lone surrogate (``"\\ud800"``, which has no UTF-8 form). A results file must still get
one line per result, and ``--resume`` must read back every line it wrote. The rule:

1. **JSON values are stored as they are**: strings, finite numbers, booleans, null,
   lists and string-keyed objects.
2. **Values with a standard JSON form are stored in it**, the content kept but not the
   Python type: tuples, sets and frozensets as arrays; ``bytes`` as base64 strings;
   dates and times as ISO 8601 strings; ``UUID`` and ``Decimal`` as strings; an ``Enum``
   as its value; dataclasses, attrs classes and msgspec Structs as objects; integer and
   float keys as strings; NumPy scalars and arrays as numbers and arrays
   (``.tolist()``); subclasses of ``str``/``int``/``float`` as the base type. These are
   not reported.
3. **Values JSON cannot hold are replaced, and each replacement is reported** as a
   :class:`StoreChange` (which example, which field, where, what):

   - a lone surrogate in any string (output, feedback, an error message, a key, the
     example id) becomes U+FFFD (two surrogates that form a pair become their
     character);
   - NaN and infinities, complex numbers, objects of other classes, a container that
     contains itself, and integers too long to print become a marker object
     ``{"skynet_unstored": "<type>", "repr": "<its repr, shortened>"}`` (for NaN,
     infinities and complex numbers the repr is exact: ``float("nan")`` and
     ``complex("(1+2j)")`` read it back);
   - a key of another type (``True``, ``None``, a tuple) becomes its text;
   - nesting is stored as deep as the encoder goes (several hundred levels, and the
     reader reads back any line the writer wrote); in a result that needs any of the
     replacements above, or that is too deep to encode, parts deeper than
     :data:`MAX_DEPTH` levels become a marker too.

The score, named scores, error kind and every measurement are never changed: they are
numbers the engine validated. So a report rebuilt from the file equals the run's own
report, and a run with ``--output`` scores exactly what a run without it does. Why not
turn such a result into an error: the metric has already judged the output; what cannot
be stored is a record of it, not a failure of the example, and the caller is told
(:class:`StoreChange`) so it can warn the user to return JSON-compatible values.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import msgspec

from ._call._results import Result

__all__ = ["MAX_DEPTH", "UNSTORED_KEY", "StoreChange", "encode_results", "printable_id"]

#: The deepest nesting the careful path keeps; deeper parts become a marker.
MAX_DEPTH = 200
#: The key of the marker object that stands for a value JSON cannot hold.
UNSTORED_KEY = "skynet_unstored"
_MAX_REPR = 200

_encoder = msgspec.json.Encoder()
_SIMPLE = frozenset({str, int, bool, type(None)})
_ENCODE_ERRORS = (TypeError, ValueError, UnicodeEncodeError, RecursionError, OverflowError)


class StoreChange(msgspec.Struct, frozen=True):
    """A value of one result that the results file could not hold exactly.

    ``field`` is the result's field (``"output"``, ``"extra"``, ``"feedback"``,
    ``"example_id"``...), ``path`` where in it (``$['a'][0]``), ``problem`` what it was
    and how it was stored.
    """

    example_id: Any
    field: str
    path: str
    problem: str

    def __str__(self) -> str:
        where = self.field if self.path == "$" else f"{self.field} at {self.path}"
        return f"example {self.example_id!r}: {where}: {self.problem}"


def encode_results(batch: Iterable[Result]) -> tuple[bytes, list[StoreChange]]:
    """The JSON Lines of ``batch`` (one line per result, in order) and what was changed.

    The common case is one msgspec call for the whole batch; only a batch that fails to
    encode, or whose outputs or extras hold a non-finite float (which msgspec would write
    as ``null`` without a word), is encoded result by result.
    """
    results = batch if isinstance(batch, list) else list(batch)
    try:
        data = _encoder.encode_lines(results)
    except _ENCODE_ERRORS:
        data = None
    if data is not None and not _any_suspect(results):
        return data, []
    lines: list[bytes] = []
    changes: list[StoreChange] = []
    for result in results:
        lines.append(_encode_one(result, changes))
    return b"".join(lines), changes


def _any_suspect(results: list[Result]) -> bool:
    """Whether any of ``results`` may hold a NaN or infinity: :func:`_suspect` over the
    batch, with its common case (a plain output, no extra) tested inline, since a call
    per result cost as much as encoding the result."""
    simple = _SIMPLE
    for result in results:
        if (result.extra or type(result.output) not in simple) and _suspect(result):
            return True
    return False


def _suspect(result: Result) -> bool:
    """Whether ``result`` may hold a NaN or infinity that msgspec would turn into null."""
    output = result.output
    if type(output) in _SIMPLE and not result.extra:
        return False
    return _has_nonfinite(output) or _has_nonfinite(result.extra)


def _has_nonfinite(value: Any) -> bool:
    """Whether ``value`` may hold a NaN or infinity. Only called on values msgspec has
    just encoded, so it holds no cycle; anything but plain JSON types is "maybe" (the
    careful path looks inside dataclasses, Structs and NumPy values)."""
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is float:
            if item - item != 0.0:  # true only for NaN and infinities
                return True
        elif kind is dict:
            extend(item.values())
        elif kind is list or kind is tuple:
            extend(item)
        else:
            return True
    return False


#: Each field's default, or the empty container its default makes: what a line leaves out.
_DEFAULTS: dict[str, tuple[Any, Any]] = {
    f.name: (f.default, f.default_factory) for f in msgspec.structs.fields(Result)
}


def _left_out(name: str, value: Any) -> bool:
    """Whether msgspec leaves ``value`` out of a result line (``omit_defaults``): the
    field's default object itself, or an empty container where the default is one."""
    default, factory = _DEFAULTS[name]
    if value is default:
        return True
    return factory is not msgspec.NODEFAULT and type(value) is factory and not value


def _encode_one(result: Result, changes: list[StoreChange]) -> bytes:
    try:
        line = _encoder.encode(result)
    except _ENCODE_ERRORS:
        line = None
    if line is not None and not _suspect(result):
        return line + b"\n"
    cleaner = _Cleaner(changes, printable_id(result.example_id))
    example_id = cleaner.clean(result.example_id, "example_id")
    fields: dict[str, Any] = {"example_id": example_id}
    for name in Result.__struct_fields__[1:]:
        value = getattr(result, name)
        if value is msgspec.UNSET or _left_out(name, value):  # as msgspec leaves them out
            continue
        if isinstance(value, msgspec.Struct):
            value = msgspec.to_builtins(value, str_keys=True)
        fields[name] = cleaner.clean(value, name)
    try:
        return _encoder.encode(fields) + b"\n"
    except _ENCODE_ERRORS as exc:  # pragma: no cover - the cleaner leaves only JSON values
        raise RuntimeError(f"a cleaned result still does not encode: {exc}") from exc


class _Cleaner:
    """Turns one result's values into JSON values, recording every replacement."""

    def __init__(self, changes: list[StoreChange], example_id: Any) -> None:
        self.changes = changes
        self.example_id = example_id
        self._field = ""
        self._open: set[int] = set()  # containers on the current path: a cycle check

    def clean(self, value: Any, field: str) -> Any:
        self._field = field
        self._open.clear()
        return self._value(value, "$", 1)

    def _note(self, path: str, problem: str) -> None:
        if len(path) > 100:
            path = path[:97] + "..."
        self.changes.append(StoreChange(self.example_id, self._field, path, problem))

    def _marker(self, value: Any, path: str, why: str) -> dict[str, str]:
        kind = type(value).__name__
        text = _short_repr(value)
        marker = {UNSTORED_KEY: kind, "repr": self._text(text, path, quiet=True)}
        self._note(path, f"{why}; stored as {{{UNSTORED_KEY!r}: {kind!r}, 'repr': ...}}")
        return marker

    def _text(self, text: str, path: str, *, quiet: bool = False) -> str:
        if text.isascii():
            return text
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            if not quiet:
                self._note(
                    path,
                    "the text holds a lone surrogate (not a character, it has no UTF-8 "
                    "form); stored with U+FFFD in its place",
                )
            return fixed
        return text

    def _value(self, value: Any, path: str, depth: int) -> Any:  # noqa: PLR0911 - one per kind
        kind = type(value)
        if kind in _SIMPLE:
            if kind is str:
                return self._text(value, path)
            if kind is int:
                return self._int(value, path)
            return value
        if kind is float:
            if math.isfinite(value):
                return value
            return self._marker(value, path, f"{value!r} is not a JSON number")
        if depth > MAX_DEPTH:
            return self._marker(value, path, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, (dict, list, tuple, set, frozenset)):
            if id(value) in self._open:
                return self._marker(value, path, "a container that contains itself (a cycle)")
            self._open.add(id(value))
            try:
                if isinstance(value, dict):
                    return self._dict(value, path, depth)
                return [self._value(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
            finally:
                self._open.discard(id(value))
        return self._other(value, path, depth)

    def _int(self, value: int, path: str) -> Any:
        try:
            _encoder.encode(value)
        except _ENCODE_ERRORS:
            return self._marker(value, path, "an integer too long to write")
        return value

    def _dict(self, value: dict[Any, Any], path: str, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = self._key(key, path)
            if name in out:
                self._note(path, f"two keys are both written {name!r}; the later was renamed")
                while name in out:
                    name += "#"
            out[name] = self._value(item, f"{path}[{name!r}]", depth + 1)
        return out

    def _key(self, key: Any, path: str) -> str:
        if isinstance(key, str):
            return self._text(str(key), path)
        if isinstance(key, bool) or key is None:
            text = {True: "true", False: "false", None: "null"}[key]
        elif isinstance(key, int):
            return str(int(key))
        elif isinstance(key, float) and math.isfinite(key):
            return repr(float(key))
        else:
            text = self._text(_short_repr(key), path, quiet=True)
        self._note(path, f"a key of type {type(key).__name__} ({text}); stored as its text")
        return text

    def _other(self, value: Any, path: str, depth: int) -> Any:
        # Subclasses of the JSON types: their base value (a str-based Enum, numpy.float64).
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, str):
            return self._text(str(value), path)
        if isinstance(value, int):
            return self._int(int(value), path)
        if isinstance(value, float):
            return self._value(float(value), path, depth)
        if isinstance(value, complex) or (isinstance(value, Decimal) and not value.is_finite()):
            return self._marker(value, path, f"{value!r} (JSON has no such number)")
        tolist = getattr(value, "tolist", None)
        if callable(tolist) and type(value).__module__.split(".")[0] == "numpy":
            try:
                return self._value(tolist(), path, depth)
            except Exception:  # a broken array: stored as its repr below
                pass
        try:
            builtin = msgspec.to_builtins(value, str_keys=True)
        except (TypeError, ValueError, RecursionError):
            return self._marker(value, path, f"a {type(value).__name__}, which JSON cannot hold")
        return self._value(builtin, path, depth)


_repr = reprlib.Repr()
_repr.maxstring = _MAX_REPR
_repr.maxother = _MAX_REPR
_repr.maxlevel = 3


def printable_id(example_id: Any) -> Any:
    """An example id as it can be printed and stored: itself when it is an int or a
    valid string; lone surrogates replaced; anything else its shortened repr."""
    if type(example_id) is int:
        return example_id
    text = example_id if type(example_id) is str else _short_repr(example_id)
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _short_repr(value: Any) -> str:
    """``repr(value)``, at most :data:`_MAX_REPR` characters, never raising."""
    try:
        text = _repr.repr(value)
    except Exception:  # a __repr__ that raises
        return f"<{type(value).__name__} object>"
    if len(text) > _MAX_REPR:
        text = text[: _MAX_REPR - 3] + "..."
    return text
