"""The screenshots of docs/guide/report.md (`skynet-eval report`), from the shipped example.

Runs examples/classify twice (the shipped prompt, and prompt_draft.txt as the baseline),
builds both pages as that page's commands do, and photographs them in the system
Chromium (the browser the tests use):

    python docs/report/make_screenshots.py

writes report.png, comparison.png and comparison-example.png in docs/report/.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the tests' helpers

from evaluator._cli import main
from tests._helpers import CHROMIUM, CHROMIUM_ARGS

ROOT = Path(__file__).resolve().parents[2]
CLASSIFY = ROOT / "examples" / "classify"
OUT = Path(__file__).resolve().parent
ARGS = [*CHROMIUM_ARGS, "--hide-scrollbars"]


def cli(*args: str) -> None:
    code = main(list(args))
    assert code == 0, (args, code)


def run(artifact: str, output: Path) -> None:
    cli(
        "run",
        "--metric", str(CLASSIFY / "metric.py"),
        "--program", str(CLASSIFY / "program.py"),
        "--artifact", str(CLASSIFY / artifact),
        "--data", str(CLASSIFY / "data.jsonl"),
        "--output", str(output),
        "--json",
    )  # fmt: skip


def shoot(
    browser: Any, page_path: Path, out: Path, height: int, *, at: str = "", click: str = ""
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": height})
    page.goto(page_path.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    if at:
        page.locator(at).evaluate("(el) => window.scrollTo(0, el.offsetTop - 8)")
    if click:
        page.click(click)
        page.wait_for_selector("#detail:not([hidden])")
    page.screenshot(path=str(out))
    page.close()


def make() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        run("prompt.txt", runs / "prompt.jsonl")
        run("prompt_draft.txt", runs / "draft.jsonl")
        data = str(CLASSIFY / "data.jsonl")
        single, compared = runs / "prompt.html", runs / "compared.html"
        cli("report", str(runs / "prompt.jsonl"), "--data", data, "--html", str(single))
        cli(
            "report", str(runs / "prompt.jsonl"),
            "--baseline", str(runs / "draft.jsonl"),
            "--data", data,
            "--html", str(compared),
        )  # fmt: skip
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            shoot(browser, single, OUT / "report.png", 1320)
            shoot(browser, compared, OUT / "comparison.png", 900, at="#comparison")
            shoot(
                browser,
                compared,
                OUT / "comparison-example.png",
                900,
                at="#examples",
                click="#window .row[data-row='3']",
            )
            browser.close()
    print(f"wrote report.png, comparison.png and comparison-example.png in {OUT}")


if __name__ == "__main__":
    make()
