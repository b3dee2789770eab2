"""Building the page: one self-contained file, every value escaped, the data whole."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from evaluator import Example
from evaluator._report.html import build_report, write_html_report
from evaluator._report.html._rows import encode_json, id_text

from ..conftest import result, write_results

HOSTILE = (
    '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2"> & <!--'
)


def page_data(html: str) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The page's config, columns and detail lines, read back as the browser reads them."""

    def block(name: str) -> str:
        match = re.search(rf'<script type="[^"]+" id="report-{name}">(.*?)</script>', html, re.S)
        assert match is not None, name
        return match.group(1)

    config = json.loads(block("config"))
    columns = json.loads(zlib.decompress(base64.b64decode(block("columns"))))
    details = zlib.decompress(base64.b64decode(block("details"))).decode()
    assert details.endswith("\n")
    return config, columns, [json.loads(line) for line in details.splitlines()]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


class TestSelfContained:
    def test_nothing_to_fetch(self) -> None:
        """No element loads anything: no src or href to a resource, no link, no import."""
        html = build_report([result("a", 1.0)]).html
        for tag, attrs in tags(html):
            assert tag not in ("link", "iframe", "img", "object", "embed"), tag
            assert "src" not in attrs, (tag, attrs)
            href = attrs.get("href")
            assert href is None or href.startswith("#"), (tag, attrs)
        assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in html

    def test_the_policy_allows_only_the_pages_own_script_and_style(self) -> None:
        """The Content-Security-Policy pins the inline script and style by their SHA-256
        and forbids every fetch; exactly one script element runs."""
        html = build_report([result("a", 1.0)]).html
        policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
        assert policy is not None
        script = re.findall(r"<script>(.*?)</script>", html, re.S)
        style = re.findall(r"<style>(.*?)</style>", html, re.S)
        assert len(script) == 1 and len(style) == 1

        def digest(text: str) -> str:
            return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()

        assert f"script-src 'sha256-{digest(script[0])}'" in policy.group(1)
        assert f"style-src 'sha256-{digest(style[0])}'" in policy.group(1)
        assert "default-src 'none'" in policy.group(1)


class TestEscaping:
    def test_hostile_strings_never_become_markup(self) -> None:
        """Feedback, ids, error messages and outputs holding tags and </script> appear
        only escaped in the markup, and whole in the data."""
        results = [
            result(
                HOSTILE,
                0.0,
                feedback=HOSTILE,
                error="metric_error",
                message=HOSTILE,
                output=HOSTILE,
            )
        ]
        html = build_report(results, meta={"note": HOSTILE}, title=HOSTILE).html
        assert "window.__pwned" in html  # it is there, as text...
        assert html.count("<script") == 4  # ...but the page's own four script elements only
        assert "<img" not in html and "<!--" not in html
        _, columns, details = page_data(html)
        assert columns["fb"] == [HOSTILE] and columns["id"] == [HOSTILE]
        assert details[0]["r"]["output"] == HOSTILE
        assert details[0]["r"]["error"]["message"] == HOSTILE

    def test_plain_json_blocks_escape_angle_brackets(self) -> None:
        """JSON placed in a script element never holds <, > or &, whatever its strings."""
        encoded = encode_json({"k": HOSTILE}).decode()
        assert not set("<>&") & set(encoded)
        assert json.loads(encoded) == {"k": HOSTILE}

    def test_unencodable_values_do_not_break_the_page(self) -> None:
        """A lone surrogate in feedback or an object JSON cannot hold as output (a run in
        memory) are shown, not fatal."""

        class Opaque:
            def __repr__(self) -> str:
                return "<Opaque thing>"

        results = [result("a", 1.0, feedback="bad \udc80 text", output=Opaque())]
        _, columns, details = page_data(build_report(results).html)
        assert columns["fb"] == ["bad \\udc80 text"]
        assert details[0]["r"]["output"] == "<Opaque thing>"

    def test_ids_are_shown_as_written(self) -> None:
        """String ids as themselves; other ids as JSON."""
        assert id_text("q1") == "q1" and id_text(7) == "7" and id_text(["a", 1]) == '["a",1]'


class TestData:
    def test_columns_and_details_are_the_results(self, tmp_path: Path) -> None:
        """The table's columns and each detail line hold the file's results whole."""
        long_feedback = "word " * 2000
        path = write_results(
            tmp_path / "r.jsonl",
            [
                result("a", 1.0, feedback=long_feedback, scores={"acc": 1.0}, output="x" * 500),
                result("b", 0.0, error="metric_timeout", message="timed out", duration_ms=None),
            ],
        )
        config, columns, details = page_data(build_report(path).html)
        assert config["n"] == 2 and config["kinds"] == ["metric_timeout"]
        assert columns["id"] == ["a", "b"] and columns["sc"] == [1.0, 0.0]
        assert columns["ek"] == [-1, 0] and columns["fb"][0] == long_feedback
        assert columns["named"] == {"acc": [1.0, None]}
        assert columns["pms"] == [10.0, None]
        assert len(columns["out"][0]) == 120 and columns["out"][0].endswith("…")
        assert details[0]["r"]["output"] == "x" * 500  # whole on click
        assert details[0]["line"] == 1 and details[1]["line"] == 2
        assert details[0].get("src", "none") == "none"

    def test_the_dataset_is_joined_by_id(self, tmp_path: Path) -> None:
        """With the dataset, each detail carries its input and expected value; an id the
        dataset lacks says so."""
        results = [result("a", 1.0), result("b", 1.0)]
        data = [Example(id="a", input={"q": "2+2"}, expected={"label": "4"})]
        built = build_report(results, data=data)
        _, _, details = page_data(built.html)
        assert details[0]["src"] == "data"
        assert details[0]["input"] == {"q": "2+2"} and details[0]["expected"] == {"label": "4"}
        assert details[1]["src"] == "missing"
        assert built.warnings == [
            "1 result(s) have no example with their id in (examples given in memory): "
            "is it the dataset this run used?"
        ]

    def test_the_dataset_from_a_file(self, tmp_path: Path) -> None:
        """A dataset path is read as `run` reads it, flat columns included."""
        data = tmp_path / "d.jsonl"
        data.write_text(json.dumps({"id": "a", "question": "2+2", "label": "4"}) + "\n"
                        + json.dumps({"id": "z", "question": "?", "label": "?"}) + "\n")  # fmt: skip
        built = build_report(
            [result("a", 1.0)], data=data, input_cols=["question"], output_cols=["label"]
        )
        _, _, details = page_data(built.html)
        assert details[0]["input"] == {"question": "2+2"}
        assert details[0]["expected"] == {"label": "4"}
        assert any("1 example(s) of" in w and "have no result" in w for w in built.warnings)

    def test_comparison_rows(self) -> None:
        """Against a baseline: statuses in rank order, deltas, and the baseline's examples
        this run misses appended and flagged."""
        current = [result("a", 0.0), result("b", 1.0), result("c", 1.0), result("new", 1.0)]
        baseline = [result("a", 1.0), result("b", 0.0), result("c", 1.0), result("gone", 0.5)]
        built = build_report(current, baseline=baseline)
        config, columns, details = page_data(built.html)
        assert config["compare"] is True
        assert columns["id"] == ["a", "b", "c", "new", "gone"]
        status = [config["statusCodes"][s] for s in columns["st"]]
        assert status == ["worse", "better", "same", "new", "missing"]
        assert columns["d"] == [-1.0, 1.0, 0.0, None, None]
        assert columns["sc"][4] is None and columns["bs"][4] == 0.5
        assert "r" not in details[4] and details[4]["b"]["score"] == 0.5
        assert built.regressions == [("a", -1.0)]
        assert any("missing from this run" in w for w in built.warnings)


class TestMarkup:
    def test_headline_counts_are_the_files(self, tmp_path: Path) -> None:
        """The cards carry the counts and means as data values."""
        results = [result("a", 1.0), result("b", 0.0, error="metric_error"), result("c", 0.5)]
        html = build_report(results).html

        def value(stat: str) -> str:
            match = re.search(rf'data-stat="{stat}" data-value="([^"]*)"', html)
            assert match is not None, stat
            return match.group(1)

        assert value("n") == "3" and value("ok") == "2" and value("errors") == "1"
        assert float(value("mean")) == 0.5 and float(value("mean_ok")) == 0.75

    def test_unmeasured_cost_reads_unmeasured(self) -> None:
        """An unknown price shows as unmeasured with its count, never as $0."""
        html = build_report([result("a", 1.0, cost_usd=None), result("b", 1.0)]).html
        card = re.search(r'data-stat="program_cost".*?</div></div>', html, re.S)
        assert card is not None
        text = card.group(0)
        assert "unmeasured" in text and "1 of 2 examples without a known price" in text
        assert "$0<" not in text

    def test_wall_time_is_not_made_up(self) -> None:
        """A file alone does not know its wall time; a run's meta does."""
        assert "not recorded" in build_report([result("a", 1.0)]).html
        html = build_report([result("a", 1.0)], meta={"wall_s": 4.0}).html
        assert 'data-stat="wall" data-value="4.0"' in html and "0.2 /s" in html

    def test_header_metadata_is_shown(self, tmp_path: Path) -> None:
        """The header's fingerprints appear on the page."""
        header = {"skynet_eval_results": 1, "fingerprints": {"metric": "sha256:abc"}}
        path = write_results(tmp_path / "r.jsonl", [result("a", 1.0)], header=header)
        html = build_report(path).html
        assert "fingerprints.metric" in html and "sha256:abc" in html

    def test_chart_bars_count_the_scores(self) -> None:
        """The score histogram's bars hold the counts of ok and error scores."""
        results = [result(i, 1.0) for i in range(3)] + [result("e", 0.0, error="llm_error")]
        html = build_report(results).html
        counts = {
            (m.group(1), m.group(2))
            for m in re.finditer(
                r'data-filter="sc".*?data-lo="([^"]+)".*?<desc data-total="(\d+)"', html
            )
        }
        assert ("0.0", "1") in counts and ("0.95", "3") in counts


class TestWriteHtmlReport:
    def test_written_whole(self, tmp_path: Path) -> None:
        """The page is written to the path given, leaving no temporary file behind."""
        out = tmp_path / "deep" / "report.html"
        built = write_html_report([result("a", 1.0)], out)
        assert built.path == out and out.read_text() == built.html
        assert sorted(p.name for p in out.parent.iterdir()) == ["report.html"]

    def test_from_files(self, tmp_path: Path) -> None:
        """Results and baseline may be paths."""
        run = write_results(tmp_path / "run.jsonl", [result("a", 0.0)])
        base = write_results(tmp_path / "base.jsonl", [result("a", 1.0)])
        built = write_html_report(run, tmp_path / "r.html", baseline=base)
        assert built.comparison is not None and built.comparison.worse == 1

    def test_a_bad_results_file_is_a_clear_error(self, tmp_path: Path) -> None:
        """A foreign line stops the report with the file and line named."""
        path = tmp_path / "r.jsonl"
        path.write_text('{"hello": 1}\n')
        with pytest.raises(ValueError, match=r"r\.jsonl:1: an object that is not a result"):
            write_html_report(path, tmp_path / "r.html")
        assert not (tmp_path / "r.html").exists()
