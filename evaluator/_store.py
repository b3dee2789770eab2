"""The results file: JSON Lines, one :class:`Result` per line, appended as results arrive.

Every write ends on a line boundary and is flushed to the operating system at once, so a
run killed at any moment keeps every result it had written (at worst the last line is
cut short if the kill lands inside a write). :func:`read_results` reads a file back for
``--resume``: it drops an incomplete last line with a warning (and cuts it off the file,
so that appending goes on cleanly); any other broken line is an error naming it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import msgspec

from ._exceptions import ConfigError
from ._results import Result

__all__ = ["ResultsWriter", "ResumeWarning", "done_ids", "read_results"]

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Result)


class ResumeWarning(UserWarning):
    """A results file ended with an incomplete line, which was dropped."""


class ResultsWriter:
    """Appends results to a JSON Lines file; each :meth:`write` is flushed at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fh: IO[bytes] | None = None
        self.written = 0

    def __enter__(self) -> ResultsWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("ab")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def write(self, results: Iterable[Result]) -> None:
        """Append ``results``, one line each, in one write, and flush."""
        if self._fh is None:
            raise RuntimeError("the results file is not open; use `with ResultsWriter(...)`")
        batch = list(results)
        if not batch:
            return
        # One buffer, one write: a kill can only cut the last line of this batch short.
        self._fh.write(_encoder.encode_lines(batch))
        self._fh.flush()
        self.written += len(batch)

    def close(self) -> None:
        if self._fh is not None:
            fh, self._fh = self._fh, None
            fh.close()


def read_results(path: str | Path, *, repair: bool = True) -> Iterator[Result]:
    """The results stored in ``path``, in file order.

    An incomplete last line (a run killed mid-write) is dropped with a
    :class:`ResumeWarning`; with ``repair`` it is also cut off the file. A broken line
    anywhere else raises :class:`ConfigError` naming the file and line.
    """
    p = Path(path)
    if not p.exists():
        return
    good_end = 0  # the byte offset just after the last good line
    torn: tuple[int, bytes] | None = None  # a bad line, forgiven only if it is the last
    with p.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if torn is not None:
                raise _damaged(p, *torn)
            if not raw.strip():
                good_end += len(raw)
                continue
            if not raw.endswith(b"\n"):
                torn = (number, raw)
                break
            try:
                result = _decoder.decode(raw)
            except msgspec.DecodeError:
                torn = (number, raw)
                continue
            good_end += len(raw)
            yield result
    if torn is not None:
        warnings.warn(
            f"{p}:{torn[0]}: dropped an incomplete last line ({len(torn[1])} bytes), left by "
            "a run that was stopped mid-write; that example will be run again",
            ResumeWarning,
            stacklevel=2,
        )
        if repair:
            with p.open("r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())


def _damaged(path: Path, number: int, raw: bytes) -> ConfigError:
    return ConfigError(
        f"{path}:{number}: not a result line ({raw[:60]!r}); the results file is damaged: "
        "move it away to start over, or delete that line to resume"
    )


def done_ids(path: str | Path) -> set[Any]:
    """The example ids already in the results file (see :func:`read_results`)."""
    return {result.example_id for result in read_results(path)}
