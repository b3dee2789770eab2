"""Progress on standard error: a live bar on a terminal, plain periodic lines otherwise.

Standard error, so that standard output stays the report's (and ``--json``'s).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._output import console

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from evaluator import Result

__all__ = ["JudgesProgress", "ModelCounts", "RunProgress", "plural"]

PLAIN_EVERY_S = 2.0


def plural(count: int, noun: str) -> str:
    """``1 error``, ``2 errors``, ``1,000 errors``."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


@dataclass(frozen=True, slots=True)
class ModelCounts:
    """The model calls so far; ``cost`` None while some cost is unknown."""

    calls: int = 0
    rate_limited: int = 0
    cost: float | None = 0.0


class RunProgress:
    """The run's progress: examples done of the total, rate, errors and model calls."""

    def __init__(self, total: int, done: int, *, live: bool) -> None:
        self.total = total
        self.done = done
        self.live = live
        self.errors = 0
        self.new = 0
        self.models = ModelCounts()
        self.started = time.perf_counter()
        self._last_line = self.started
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> RunProgress:
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]evaluating"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                console=console(stderr=True),
                transient=False,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("run", total=self.total, completed=self.done, info="")
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._bar is not None:
            self._bar.refresh()
            self._bar.__exit__(*exc_info)
        elif self.new:
            self._line()

    def _info(self) -> str:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        parts = [f"{self.new / elapsed:,.0f} ex/s", plural(self.errors, "error")]
        if self.models.calls:
            parts.append(f"{self.models.calls:,} model calls")
            parts.append(f"{self.models.rate_limited:,} 429s")
            cost = self.models.cost
            parts.append("cost ?" if cost is None else f"${cost:.4f}")
        return "  ".join(parts)

    def _line(self) -> None:
        elapsed = time.perf_counter() - self.started
        rate = self.new / elapsed if elapsed > 0 else 0.0
        left = self.total - self.done
        eta = f"{left / rate:,.0f}s" if rate > 0 else "?"
        print(
            f"{self.done:,}/{self.total:,} done  {self._info()}  ETA {eta}",
            file=sys.stderr,
            flush=True,
        )

    def advance(
        self, results: Sequence[Result], models: ModelCounts, *, errors: int, timed: bool = True
    ) -> None:
        """Count ``results`` as done; ``models`` is the run's model calls so far and
        ``errors`` its errors (the report's count: the progress does not count them a
        second time). ``timed`` False: made before this display started (the contract
        check's), so done but not in the rate (they were not instant)."""
        self.done += len(results)
        self.new += len(results) if timed else 0
        self.errors = errors
        self.models = models
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.done, info=self._info())
            return
        now = time.perf_counter()
        if now - self._last_line >= PLAIN_EVERY_S:
            self._last_line = now
            self._line()


class JudgesProgress:
    """One bar per judge model, on a terminal only; gone when the table is printed."""

    def __init__(self, models: Sequence[str], total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[errors]}"),
            console=console(stderr=True),
            transient=True,
            disable=not sys.stderr.isatty(),
        )
        self._tasks = {
            m: self._bar.add_task(m, total=total, errors=plural(0, "error")) for m in models
        }
        self._errors = dict.fromkeys(models, 0)

    def __enter__(self) -> JudgesProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._bar.__exit__(*exc_info)

    def on_result(self, model: str, result: Result) -> None:
        """One more example judged by ``model``."""
        if result.error is not None:
            self._errors[model] += 1
        errors = plural(self._errors[model], "error")
        self._bar.update(self._tasks[model], advance=1, errors=errors)
