"""The report page in a real headless browser (Debian's Chromium, driven by Playwright).

Skipped, with the reason, only where Chromium is not installed; `.ci/run` installs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evaluator._report.html import write_html_report

from ..conftest import result, write_results

# A real Chromium drives the page (the mark implies slow).
pytestmark = pytest.mark.browser

N = 60
LONG = "The answer names the right city but not the year. " * 12  # longer than a table cell
HOSTILE = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def _score(i: int) -> float:
    return [1.0, 0.5, 0.0, 1.0][i % 4]


def _current() -> list[Any]:
    out = []
    for i in range(N):
        key = f"q{i:02d}"
        if i in (5, 17, 29):
            out.append(result(key, 0.0, error="metric_timeout", message="timed out after 60 s"))
        elif i == 41:
            out.append(result(key, 0.0, error="program_error", message="KeyError: 'city'"))
        else:
            feedback = (
                LONG if i == 3 else f"Feedback for {key}: {'right' if _score(i) else 'wrong'}."
            )
            out.append(
                result(
                    key,
                    _score(i),
                    feedback=feedback,
                    scores={"format": 1.0, "accuracy": _score(i)},
                    output=f"answer {i}",
                    duration_ms=5.0 + i,
                    cost_usd=0.0001 * (i + 1),
                )
            )
    return out


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """A run with errors, its dataset, and a baseline: q07 fell from 1 to 0 (the only
    drop), q08 and q10 rose; q59 is missing from the baseline and the baseline has q99."""
    current = _current()
    baseline = [r for r in current if r.example_id != "q59"]
    baseline = [
        msgspec.structs.replace(r, score=0.0) if r.example_id == "q08" else r for r in baseline
    ]
    current = [
        msgspec.structs.replace(r, score=0.0, feedback="Wrong now.") if r.example_id == "q07" else r
        for r in current
    ]
    current = [
        msgspec.structs.replace(r, score=1.0) if r.example_id == "q10" else r for r in current
    ]
    baseline.append(result("q99", 0.5))
    header = {"skynet_eval_results": 1, "created": "2026-05-01T10:00:00Z"}
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i:02d}", "input": {"question": f"Where is {i}?"}, "expected": {"label": f"city {i}"}})
            + "\n"
            for i in range(N)
        )
    )  # fmt: skip
    return {
        "run": write_results(tmp_path / "run.jsonl", current, header=header),
        "base": write_results(tmp_path / "base.jsonl", baseline),
        "data": data,
    }


def _rows(path: Path) -> list[dict[str, Any]]:
    """The results of a file, read with nothing but json."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if "skynet_eval_results" not in r]


def _counts(path: Path) -> tuple[int, int, int]:
    """Examples, ok and errors, counted from the file itself."""
    rows = _rows(path)
    errors = sum(1 for r in rows if r.get("error"))
    return len(rows), len(rows) - errors, errors


class TestPage:
    def test_loads_with_no_console_errors_and_no_network(
        self, files: dict[str, Path], tmp_path: Path, open_page: Any
    ) -> None:
        """The page loads clean: nothing on the console, nothing fetched but the file."""
        out = tmp_path / "report.html"
        write_html_report(files["run"], out, baseline=files["base"], data=files["data"])
        page = open_page(out)
        assert page.page.get_attribute("body", "data-ready") == "1"
        assert page.problems() == []
        assert page.requests == [out.as_uri()]

    def test_counts_shown_are_the_files(
        self, files: dict[str, Path], tmp_path: Path, open_page: Any
    ) -> None:
        """The headline and the table show the counts of the results file."""
        out = tmp_path / "report.html"
        write_html_report(files["run"], out)
        page = open_page(out)
        n, ok, errors = _counts(files["run"])

        def card(stat: str) -> str:
            return str(page.page.inner_text(f"[data-stat='{stat}'] .value"))

        assert (card("n"), card("ok"), card("errors")) == (str(n), str(ok), str(errors))
        assert page.shown() == n
        assert page.page.inner_text("#count") == f"showing {n} of {n} examples"
        assert (
            page.page.locator(".error-group[data-kind='metric_timeout'] .count").inner_text()
            == "3 examples"
        )

    def test_filters_change_the_visible_rows(
        self, files: dict[str, Path], tmp_path: Path, open_page: Any
    ) -> None:
        """Errors only, a search, a score range and a click on a histogram bar each show
        exactly the matching examples; clearing shows all again."""
        out = tmp_path / "report.html"
        write_html_report(files["run"], out)
        page = open_page(out)
        n, _, errors = _counts(files["run"])
        page.page.select_option("#outcome", "errors")
        assert page.wait_shown_change(n) == errors
        kinds = page.page.locator("#window .row .cell[data-col='ek']").all_inner_texts()
        assert sorted(kinds) == ["metric_timeout"] * 3 + ["program_error"]
        page.page.click("#clear")
        assert page.wait_shown_change(errors) == n
        page.page.fill("#q", "WRONG")  # case-insensitive, in feedback
        wrong = sum(1 for r in _rows(files["run"]) if "wrong" in r.get("feedback", "").lower())
        assert page.wait_shown_change(n) == wrong
        page.page.fill("#q", "q1")  # in ids
        assert page.wait_shown_change(wrong) == 10
        page.page.fill("#q", "")
        page.wait_shown_change(10)
        page.page.fill("#smin", "0.4")
        page.page.fill("#smax", "0.6")
        page.page.press("#smax", "Enter")
        halves = sum(1 for r in _rows(files["run"]) if 0.4 <= r["score"] <= 0.6)
        assert page.wait_shown_change(n) == halves
        page.page.click("#clear")
        page.wait_shown_change(halves)
        bar = page.page.locator("g.bin[data-filter='sc'][data-closed]")  # the bar of score 1
        total = int(bar.locator("desc").get_attribute("data-total"))
        bar.click()
        assert page.wait_shown_change(n) == total
        assert page.page.locator(".chip").inner_text().startswith("score in [0.95, 1]")

    def test_sorting_by_a_column(
        self, files: dict[str, Path], tmp_path: Path, open_page: Any
    ) -> None:
        """A click on a column header sorts by it; a second click reverses."""
        out = tmp_path / "report.html"
        write_html_report(files["run"], out)
        page = open_page(out)
        page.page.click(".thead [data-key='pms']")
        page.page.wait_for_selector(".thead [data-key='pms'][aria-sort='descending']")
        assert page.row_ids()[0] == "q59"  # the slowest
        page.page.click(".thead [data-key='pms']")
        page.page.wait_for_selector(".thead [data-key='pms'][aria-sort='ascending']")
        assert page.row_ids()[0] == "q00"

    def test_clicking_an_example_shows_it_whole(
        self, files: dict[str, Path], tmp_path: Path, open_page: Any
    ) -> None:
        """The detail panel shows the input, output, expected value and the full
        feedback, which the table shortens; ↓ moves to the next example."""
        out = tmp_path / "report.html"
        write_html_report(files["run"], out, data=files["data"])
        page = open_page(out)
        page.page.click("#window .row[data-row='3']")
        page.page.wait_for_selector("#detail:not([hidden])")
        panel = page.page.inner_text("#detail")
        assert page.page.inner_text("#detail-title") == "q03"
        assert LONG.strip() in panel
        assert '"question": "Where is 3?"' in panel and '"label": "city 3"' in panel
        assert "answer 3" in panel
        cell = page.page.locator("#window .row[data-row='3'] .cell[data-col='fb']").inner_text()
        assert len(cell) < len(LONG)
        page.page.keyboard.press("ArrowDown")
        page.page.wait_for_selector("#detail-title:text-is('q04')")
        page.page.keyboard.press("Escape")
        page.page.wait_for_selector("#detail", state="hidden")

    def test_without_the_dataset_it_says_how_to_get_it(
        self, files: dict[str, Path], tmp_path: Path, open_page: Any
    ) -> None:
        """Without --data the panel says that input and expected are not in the file."""
        out = tmp_path / "report.html"
        write_html_report(files["run"], out)
        page = open_page(out)
        page.page.click("#window .row[data-row='0']")
        page.page.wait_for_selector("#detail:not([hidden])")
        assert "run skynet-eval report with --data DATASET" in page.page.inner_text("#detail")

    def test_a_link_opens_an_example(
        self, files: dict[str, Path], tmp_path: Path, open_page: Any
    ) -> None:
        """#example=<id> in the address opens that example."""
        out = tmp_path / "report.html"
        write_html_report(files["run"], out)
        page = open_page(out)
        page.page.goto(out.as_uri() + "#example=q41")
        page.page.reload()
        page.page.wait_for_selector("#detail-title:text-is('q41')")
        assert "KeyError: 'city'" in page.page.inner_text("#detail")

    def test_the_baseline_view_lists_the_regression_first(
        self, files: dict[str, Path], tmp_path: Path, open_page: Any
    ) -> None:
        """Against the baseline, the known regression (q07, 1 -> 0) is the first row;
        examples on one side only are flagged; the counts match."""
        out = tmp_path / "report.html"
        write_html_report(files["run"], out, baseline=files["base"])
        page = open_page(out)
        first = page.page.locator("#window .row").first
        assert first.locator(".cell[data-col='id']").inner_text() == "q07"
        assert first.locator(".cell[data-col='st']").inner_text().lower() == "worse"
        assert page.page.inner_text("#regressions li:first-child").startswith("q07")
        assert page.page.inner_text("[data-stat='worse'] .value") == "1"
        assert page.page.inner_text("[data-stat='better'] .value") == "2"
        assert page.page.inner_text("[data-stat='missing'] .value") == "1"
        page.page.select_option("#status", "oneside")
        page.wait_shown_change(N + 1)
        flags = dict(
            zip(
                page.row_ids(),
                page.page.locator("#window .row .cell[data-col='st']").all_inner_texts(),
                strict=True,
            )
        )
        assert {k: v.lower() for k, v in flags.items()} == {
            "q59": "new here",
            "q99": "missing here",
        }
        page.page.click("#window .row:has-text('q99')")
        page.page.wait_for_selector("#detail:not([hidden])")
        assert "not in this run" in page.page.inner_text("#detail")

    def test_hostile_strings_stay_text(self, tmp_path: Path, open_page: Any) -> None:
        """Feedback, ids and outputs holding tags and </script> show as text and run
        nothing; the page still loads clean."""
        results = [
            result(
                HOSTILE,
                0.0,
                feedback=HOSTILE,
                output=HOSTILE,
                error="metric_error",
                message=HOSTILE,
            ),
            result("fine", 1.0),
        ]
        path = write_results(tmp_path / "run.jsonl", results)
        out = tmp_path / "report.html"
        write_html_report(path, out)
        page = open_page(out)
        assert page.problems() == []
        assert page.page.evaluate("() => window.__pwned") is None
        assert page.page.locator("img").count() == 0
        page.page.click("#window .row[data-row='0']")
        page.page.wait_for_selector("#detail:not([hidden])")
        assert page.page.inner_text("#detail-title") == HOSTILE
        assert HOSTILE in page.page.inner_text("#detail")
        assert page.page.evaluate("() => window.__pwned") is None

    def test_a_screenshot(self, files: dict[str, Path], tmp_path: Path, open_page: Any) -> None:
        """The page renders to a screenshot (saved under the test's directory)."""
        out = tmp_path / "report.html"
        write_html_report(files["run"], out, baseline=files["base"], data=files["data"])
        page = open_page(out)
        shot = tmp_path / "report.png"
        page.page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


class TestLargeRun:
    @pytest.mark.timeout(300)
    def test_a_hundred_thousand_examples_stay_a_window(
        self, tmp_path: Path, open_page: Any
    ) -> None:
        """100,000 examples: the table keeps only the rows in view in the document, and
        a search still finds exactly the matching examples."""
        results = [
            result(f"ex{i:06d}", float(i % 2), feedback=f"needle {i}" if i % 1000 == 0 else "hay")
            for i in range(100_000)
        ]
        path = write_results(tmp_path / "run.jsonl", results)
        out = tmp_path / "report.html"
        write_html_report(path, out)
        page = open_page(out, height=900)
        assert page.problems() == []
        assert page.shown() == 100_000
        assert page.page.locator("#window .row").count() < 100
        page.page.fill("#q", "needle")
        assert page.wait_shown_change(100_000) == 100
        page.page.locator("#tbody").evaluate("(el) => { el.scrollTop = el.scrollHeight; }")
        page.page.wait_for_selector("#window .row:has-text('ex099000')")
        assert page.page.locator("#window .row").count() < 100
