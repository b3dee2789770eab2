"""Keys out of every result: the one place a run's texts are scrubbed before they leave.

A server may echo the request's key in a normal reply (a broken proxy, a "debug" field, a
model asked to repeat its headers), and user code may put a key it read into its output
or feedback. The model client scrubs the replies it hands on (``Redactor.secrets``);
this is the engine's line for everything else a result holds. Every result the stages
make passes :meth:`ResultScrubber.results` before the cache, the caller, the results
file, the reports (terminal, JSON, HTML: all built from results), the judges' output and
telemetry see it, so none of those needs a redactor of its own.

What it hides: the keys the run knows (each configured model's, read from its
environment variable, and each key a routed SDK call carried), by the rule of
:meth:`llm_client.Redactor.secrets` (a key of 8 characters or more, in any written form,
and a cut piece of 12 or more). Where: feedback, the output (strings and ``bytes`` at any
depth, dict keys too; another object whose ``repr`` shows a key is replaced by that text,
redacted), the info dict, named scores' names, the error message, the observation's and
judge's notes.
Not changed: the example id (the dataset's own key for the row; ``--resume`` matches by
it) and the numbers.

Cost: nothing when the run knows no key. Otherwise one JSON encoding of the chunk's texts
and a few substring searches of it (``Redactor.might_hold``, and the key's base64 forms,
since ``bytes`` are encoded so): about 2 us a result. Only a chunk that holds a key is
walked, result by result, and only the results that hold one are rebuilt.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

import msgspec

from llm_client import Redactor
from llm_client._redact import SUBSTRING_MIN

from ._call._results import ErrorInfo, Result

__all__ = ["ResultScrubber"]

#: Containers deeper than this are not walked (the results file stores no deeper).
_MAX_DEPTH = 200


def _shown(value: Any) -> str:
    """What the precheck searches for a value JSON cannot hold: its ``repr``."""
    try:
        return repr(value)
    except Exception:  # a __repr__ that raises shows nothing
        return ""


_encoder = msgspec.json.Encoder(enc_hook=_shown)


class ResultScrubber:
    """The run's known keys, and the results with them removed."""

    __slots__ = ("_base64", "_keys", "_redactor")

    def __init__(self) -> None:
        self._keys: frozenset[str] = frozenset()
        self._redactor: Redactor | None = None
        self._base64: tuple[str, ...] = ()

    def know(self, keys: Iterable[str | None]) -> None:
        """Add ``keys`` to those hidden (a key too short to hide is ignored)."""
        new = {k for k in keys if k and len(k) >= SUBSTRING_MIN} - self._keys
        if new:
            self._keys |= new
            self._redactor = Redactor(self._keys)
            self._base64 = tuple(p for k in self._keys for p in _base64_cores(k))

    @property
    def active(self) -> bool:
        return self._redactor is not None

    def text(self, text: str) -> str:
        """``text`` without any known key."""
        return text if self._redactor is None else self._redactor.secrets(text)

    def results(self, results: list[Result]) -> list[Result]:
        """``results`` (the same list when none holds a key) with every key removed."""
        redactor = self._redactor
        if redactor is None or not results:
            return results
        if not self._might_hold(redactor, _texts(results)):
            return results
        return [self._result(redactor, r) for r in results]

    def _might_hold(self, redactor: Redactor, text: str) -> bool:
        # bytes are encoded as base64, where the key's text cannot be seen
        return redactor.might_hold(text) or any(p in text for p in self._base64)

    def _result(self, redactor: Redactor, result: Result) -> Result:
        if not self._might_hold(redactor, _texts([result])):
            return result
        return _scrubbed(redactor, result)


def _base64_cores(key: str) -> list[str]:
    """The key's bytes as base64 reads them wherever they start in a ``bytes`` value
    (three alignments), less the characters its neighbours change."""
    raw = key.encode("utf-8", "surrogatepass")
    cores = []
    for offset in range(3):
        text = base64.b64encode(bytes(offset) + raw).decode()
        core = text[4 if offset else 0 : -4]
        if len(core) >= 6:
            cores.append(core)
    return cores


def _texts(results: list[Result]) -> str:
    """Every text of ``results`` as one string (a JSON array): what :meth:`results`
    searches; a value JSON cannot hold is searched as its ``repr``."""
    try:
        return _encoder.encode(
            [
                (
                    r.feedback,
                    r.output,
                    r.extra,
                    r.scores,
                    r.error,
                    r.observation.notes,
                    r.judge.notes,
                )
                for r in results
            ]
        ).decode("utf-8", "surrogatepass")
    except Exception:  # not encodable (too deep, a lone surrogate): searched piece by piece
        return "\n".join(_shown(r) for r in results)


def _scrubbed(redactor: Redactor, result: Result) -> Result:
    clean = redactor.secrets
    error = result.error
    changes: dict[str, Any] = {
        "feedback": clean(result.feedback),
        "scores": {clean(k): v for k, v in result.scores.items()},
        "output": _value(redactor, result.output, set()),
        "extra": _value(redactor, result.extra, set()),
        "error": None if error is None else ErrorInfo(error.kind, clean(error.message)),
        "observation": msgspec.structs.replace(
            result.observation, notes=tuple(clean(n) for n in result.observation.notes)
        ),
        "judge": msgspec.structs.replace(
            result.judge, notes=tuple(clean(n) for n in result.judge.notes)
        ),
    }
    return msgspec.structs.replace(result, **changes)


def _value(redactor: Redactor, value: Any, path: set[int]) -> Any:
    """``value`` with every key removed from its strings (dict keys included); ``path``
    holds the containers being walked (a container that holds itself is not re-entered)."""
    if isinstance(value, str):
        return redactor.secrets(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        text = raw.decode("utf-8", "surrogateescape")
        clean = redactor.secrets(text)
        return value if clean is text else clean.encode("utf-8", "surrogateescape")
    kind = type(value)
    if kind not in (list, tuple, dict) or id(value) in path or len(path) >= _MAX_DEPTH:
        return _object(redactor, value)
    path.add(id(value))
    try:
        if kind is dict:
            return {_value(redactor, k, path): _value(redactor, v, path) for k, v in value.items()}
        items = [_value(redactor, v, path) for v in value]
        return items if kind is list else tuple(items)
    finally:
        path.discard(id(value))


def _object(redactor: Redactor, value: Any) -> Any:
    """Another object: kept, unless its text shows a key; then that text, redacted."""
    shown = _shown(value)
    clean = redactor.secrets(shown)
    return value if clean is shown else clean
