"""Shared pieces of the report tests: results files written as `run --output` writes them,
and a real headless Chromium (the system's, driven by Playwright) for the page tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evaluator import ErrorInfo, Observation, Result, Usage
from evaluator._call._results import ErrorKind
from tests._helpers import CHROMIUM, CHROMIUM_ARGS


def result(
    example_id: Any,
    score: float,
    *,
    feedback: str = "ok",
    error: ErrorKind | None = None,
    message: str = "",
    duration_ms: float | None = 10.0,
    cost_usd: float | None = 0.001,
    judge_cost: float | None = 0.0,
    judge_calls: int = 0,
    metric_ms: float | None = 1.0,
    scores: dict[str, float] | None = None,
    output: Any = None,
    notes: tuple[str, ...] = (),
) -> Result:
    """A result as the engine makes it."""
    return Result(
        example_id=example_id,
        score=score,
        scores=scores or {},
        feedback=feedback,
        error=ErrorInfo(error, message or feedback) if error else None,
        observation=Observation(duration_ms=duration_ms, cost_usd=cost_usd, notes=notes),
        judge=Usage(llm_calls=judge_calls, cost_usd=judge_cost),
        metric_ms=metric_ms,
        output=output,
    )


def write_results(
    path: Path, results: Sequence[Result], *, header: dict[str, Any] | None = None
) -> Path:
    """A results file: an optional header line, then one result per line."""
    with path.open("wb") as fh:
        if header is not None:
            fh.write(msgspec.json.encode(header) + b"\n")
        fh.write(msgspec.json.Encoder().encode_lines(list(results)))
    return path


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The system Chromium under Playwright; the test is skipped when it is not installed.

    Module-scoped: Playwright's sync API keeps an event loop marked running on this thread
    while it is open, which would stop later tests in this process from running their own.
    """
    if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
        pytest.skip(
            "Chromium is not installed at /usr/bin/chromium: `apt-get install chromium` "
            "(.ci/run does) to run the report's browser tests"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed: pip install -e '.[test]'"
    )
    manager = sync_api.sync_playwright().start()
    try:
        browser = manager.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        manager.stop()


class OpenPage:
    """A report opened in the browser, with what it said on its console and asked of the
    network while it loaded."""

    def __init__(self, browser: Any, path: Path, *, width: int = 1400, height: int = 1000):
        self.page = browser.new_page(viewport={"width": width, "height": height})
        self.console: list[tuple[str, str]] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("body[data-ready]", timeout=60_000)

    def problems(self) -> list[tuple[str, str]]:
        return [
            (kind, text) for kind, text in self.console if kind in ("error", "warning", "pageerror")
        ]

    def shown(self) -> int:
        return int(self.page.get_attribute("#count", "data-shown") or -1)

    def wait_shown_change(self, before: int) -> int:
        # The page's policy forbids eval, so the wait is a selector, not a script predicate.
        self.page.wait_for_selector(f"#count:not([data-shown='{before}'])", timeout=30_000)
        return self.shown()

    def row_ids(self) -> list[str]:
        cells = self.page.locator("#window .row .cell[data-col='id']")
        return [cells.nth(i).inner_text() for i in range(cells.count())]

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def open_page(chromium: Any) -> Iterator[Any]:
    """Opens report pages in the browser; closes them after the test."""
    pages: list[OpenPage] = []

    def opener(path: Path, **size: int) -> OpenPage:
        page = OpenPage(chromium, path, **size)
        pages.append(page)
        return page

    yield opener
    for page in pages:
        page.close()
