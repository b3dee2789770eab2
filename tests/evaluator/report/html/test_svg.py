"""Charts drawn as SVG at build time: counts as attributes, every label escaped."""

from __future__ import annotations

from html.parser import HTMLParser

from evaluator._report._stats import Bin
from evaluator._report.html._svg import Marker, Series, bar_chart, fmt_number

BINS = [Bin(0.0, 0.5, (2, 1, 4)), Bin(0.5, 1.0, (5, 0, 3))]


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(svg: str) -> _Collect:
    parser = _Collect()
    parser.feed(svg)
    return parser


class TestBarChart:
    def test_bars_carry_their_counts_and_ranges(self) -> None:
        """Each bin is a group with its range and total; stacked parts with their counts;
        the last bin is marked closed (its upper end is included)."""
        svg = parse(
            bar_chart(
                BINS,
                label="Scores",
                stacked=[Series(0, "ok", "ok"), Series(1, "err", "errors")],
                overlay=Series(2, "base", "baseline"),
                filter_key="sc",
            )
        )
        groups = [a for tag, a in svg.elements if tag == "g"]
        assert [(g["data-lo"], g["data-hi"], "data-closed" in g) for g in groups] == [
            ("0.0", "0.5", False),
            ("0.5", "1.0", True),
        ]
        totals = [a["data-total"] for tag, a in svg.elements if tag == "desc"]
        assert totals == ["3", "5"]
        parts = [(a["class"], a["data-count"]) for tag, a in svg.elements if "data-count" in a]
        assert parts == [("ok", "2"), ("err", "1"), ("ok", "5")]
        assert any(tag == "path" and a["class"] == "base" for tag, a in svg.elements)

    def test_labels_are_escaped(self) -> None:
        """A label with markup stays text inside the SVG."""
        hostile = "<script>alert(1)</script>"
        svg = bar_chart(
            BINS,
            label=hostile,
            stacked=[Series(0, "ok", hostile)],
            markers=[Marker(0.25, hostile)],
            x_label=hostile,
            filter_key="sc",
        )
        assert "<script" not in svg
        assert hostile in "".join(parse(svg).text)

    def test_nothing_to_draw(self) -> None:
        """No bins: a line of text saying so, not an empty chart."""
        assert bar_chart([], label="Cost", stacked=[], note="3 unmeasured") == (
            '<p class="empty">Cost: nothing measured (3 unmeasured)</p>'
        )


class TestFmtNumber:
    def test_short_readable_numbers(self) -> None:
        """Three significant digits, thousands separated, exponents only at the extremes."""
        assert [fmt_number(v) for v in (0, 0.0123, 1.5, 250, 12_345, 2e7, 3e-6)] == [
            "0",
            "0.0123",
            "1.5",
            "250",
            "12,345",
            "2e+07",
            "3e-06",
        ]
