"""The race's page: a candidates-by-examples matrix (promptfoo's matrix view), each
candidate's cells greyed from the round it was dropped in, beside its mean, interval and
the paired test's verdict; cards for the outcome and what the race saved.

:func:`print_race` prints the same in a terminal. Built from a
:class:`evaluator._race.RaceResult` (``skynet-eval race --report``, or
``skynet-eval report RACE.json``) with the report page's own pieces: its stylesheet,
head and policy (``_html.head``), cards (``_html._card``), number formats and writer
(``_build.write_file``). Plain HTML with no script: the policy allows none.
"""

from __future__ import annotations

import datetime
from html import escape
from pathlib import Path
from typing import Any

from ..._race import RaceResult
from ._build import write_file
from ._html import _asset, _card, _sha256, head, n_, pct_, score_, usd_

__all__ = ["print_race", "race_page", "write_race_page"]

#: Score shades of a cell: the score's place in the score range, in five steps.
_SHADES = 5


def _shade(value: float, low: float, high: float) -> int:
    return min(_SHADES - 1, max(0, int((value - low) / (high - low) * _SHADES)))


def _cards(race: RaceResult) -> str:
    s = race.spend
    names = ", ".join(race.candidates[i].label for i in race.winners)
    verdict = {"winner": "winner", "tied": "tied", "budget": "stopped by the budget"}[race.outcome]
    saved_calls = (
        "unmeasured" if s.full_model_calls is None else n_(s.full_model_calls - s.model_calls)
    )
    cost_note = f"of ~{usd_(s.full_cost_usd)} to evaluate everything"
    return (
        '<section id="race-headline" class="cards">'
        + _card(
            "outcome",
            verdict,
            names,
            race.reason,
            raw=race.outcome,
            tone="good" if race.outcome == "winner" else "",
        )
        + _card(
            "evaluations",
            "evaluations",
            n_(s.evaluations),
            f"{pct_(s.evaluations, s.full_evaluations)} of {n_(s.full_evaluations)}"
            + (f"; {n_(s.cached)} from the cache" if s.cached else ""),
            raw=s.evaluations,
        )
        + _card("model_calls", "model calls", n_(s.model_calls), f"saved ~{saved_calls}")
        + _card("cost", "cost", usd_(s.cost_usd), cost_note, raw=s.cost_usd)
        + _card("confidence", "confidence", f"{race.confidence:.0%}", f"ties: {race.ties}")
        + (
            ""
            if race.budget is None
            else _card(
                "budget",
                "budget",
                usd_(race.budget.spent_usd),
                race.budget.describe() + (f"; {n_(s.exhausted)} cut" if s.exhausted else ""),
                raw=race.budget.spent_usd,
            )
        )
        + "</section>"
    )


def _matrix(race: RaceResult) -> str:
    low, high = race.score_range
    # The first column of each round: a divider before it.
    starts = {r.examples for r in race.rounds[:-1]}
    round_of = []
    number = 1
    for column in range(len(race.example_ids)):
        while number <= len(race.rounds) and column >= race.rounds[number - 1].examples:
            number += 1
        round_of.append(number)
    rows = []
    for i in race.ranking:
        c = race.candidates[i]
        cut = set(race.exhausted[i]) if race.exhausted else set()
        cells = []
        for column, value in enumerate(race.scores[i]):
            css = ["cell"]
            if column in starts:
                css.append("round-start")
            dropped = c.dropped_round is not None and round_of[column] > c.dropped_round
            if column in cut:
                css += ["unseen", "exhausted"]
                tip = f"{race.example_ids[column]}: budget_exhausted (cut by the budget)"
            elif value is None:
                css.append("dropped" if dropped else "unseen")
                tip = f"{race.example_ids[column]}: not evaluated"
                if dropped:
                    tip += f" (dropped in round {c.dropped_round})"
            else:
                css.append(f"s{_shade(value, low, high)}")
                tip = f"{race.example_ids[column]}: {value:g}"
            cells.append(
                f'<td class="{" ".join(css)}" data-round="{round_of[column]}" '
                f'title="{escape(tip)}"></td>'
            )
        status = (
            "winner"
            if race.outcome == "winner" and i in race.winners
            else "tied"
            if i in race.winners
            else f"dropped in round {c.dropped_round}"
        )
        interval = "—" if c.low is None else f"[{score_(c.low)}, {score_(c.high)}]"
        rows.append(
            f'<tr data-candidate="{i}" data-dropped-round="{c.dropped_round or ""}">'
            f'<th class="name" title="{escape(c.dropped_reason or status)}">'
            f"{escape(c.label)}</th>"
            f'<td class="num">{score_(c.mean)}</td><td class="num">{interval}</td>'
            f'<td class="num">{n_(c.examples)}</td><td class="num">{n_(c.errors)}</td>'
            f'<td class="status">{escape(status)}</td>' + "".join(cells) + "</tr>"
        )
    return (
        '<section id="race-matrix"><h2>Candidates × examples</h2>'
        '<div class="race-scroll"><table class="race">'
        "<thead><tr><th>candidate</th><th>mean</th><th>interval</th><th>examples</th>"
        "<th>errors</th>"
        f'<th>verdict</th><th colspan="{len(race.example_ids)}">examples, in the order '
        "the race took them (a line at each round's start)</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
        f'<p class="hint">A cell is one score in [{low:g}, {high:g}], red low to green '
        "high; grey: not evaluated, because the candidate had been dropped (or, "
        "marked budget_exhausted, because the budget ran out). Intervals: "
        f"{race.confidence:.0%} confidence sequences (by betting) over the examples each "
        "candidate saw; a drop's p-value is the paired test's, valid whenever it is "
        "read.</p>"
        "</section>"
    )


def _reasons(race: RaceResult) -> str:
    items = []
    for i in race.ranking:
        c = race.candidates[i]
        if c.dropped_reason is not None:
            items.append(
                f'<li data-candidate="{i}"><b>{escape(c.label)}</b>, round '
                f"{c.dropped_round}: {escape(c.dropped_reason)}</li>"
            )
    if not items:
        return ""
    return (
        f'<section id="race-drops"><h2>Why each was dropped</h2><ul>{"".join(items)}</ul></section>'
    )


def race_page(race: RaceResult, title: str | None = None) -> str:
    """The race as one self-contained HTML document."""
    css = _asset("report.css")
    policy = (
        f"default-src 'none'; style-src 'sha256-{_sha256(css)}'; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )
    name = title or f"Race of {len(race.candidates)} candidates"
    built = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "".join(
        [
            head(name, css, policy),
            f'<header class="top"><h1>{escape(name)}</h1>'
            f'<p class="sub">{n_(len(race.example_ids))} examples in '
            f"{n_(len(race.rounds))} rounds · seed {race.seed} · built {built}</p></header>",
            "<main>",
            _cards(race),
            _matrix(race),
            _reasons(race),
            "</main></body></html>\n",
        ]
    )


def write_race_page(
    race: RaceResult, target: Path, *, title: str | None = None, option: str = "html"
) -> Path:
    """Write the race's page to ``target`` (checked, whole or not at all)."""
    write_file(race_page(race, title), target, option=option)
    return target


def print_race(race: RaceResult, out: Any) -> None:
    """The race in a terminal: the ranking, the verdict, and what it saved."""
    from rich.markup import escape as plain
    from rich.table import Table

    table = Table(title=f"race at {race.confidence:.0%}, ties: {race.ties}")
    for name in ("rank", "candidate", "mean", "interval", "examples", "dropped"):
        table.add_column(name, justify="right" if name in ("rank", "examples") else "left")
    for i in race.ranking:
        c = race.candidates[i]
        interval = "—" if c.low is None else f"[{c.low:.4f}, {c.high:.4f}]"
        mean = score_(c.mean)
        dropped = "—" if c.dropped_round is None else f"round {c.dropped_round}"
        table.add_row(str(c.rank), plain(c.label), mean, interval, f"{c.examples:,}", dropped)
    out.print(table)
    for i in race.ranking:
        c = race.candidates[i]
        if c.dropped_reason is not None:
            out.print(f"dropped {c.label}: {c.dropped_reason}", markup=False)
    errors = sum(c.errors for c in race.candidates)
    if errors:
        out.print(
            f"[yellow]warning[/yellow]: {errors:,} results were errors, each scored at the "
            "failure score (see them with `skynet-eval run` on the candidate)"
        )
    names = plain(", ".join(race.candidates[i].label for i in race.winners))
    verdict = {
        "winner": f"[green]winner[/green]: {names}",
        "tied": f"[yellow]tied[/yellow] (cannot be told apart): {names}",
        "budget": f"[yellow]stopped by the budget[/yellow]; standing: {names}",
    }[race.outcome]
    out.print(f"{verdict} — {plain(race.reason)}")
    if race.budget is not None:
        cut = race.spend.exhausted
        out.print(
            f"budget: {race.budget.describe()}"
            + (f"; {cut:,} evaluations cut (budget_exhausted, in no mean)" if cut else ""),
            markup=False,
        )
    s = race.spend
    share = s.evaluations / s.full_evaluations if s.full_evaluations else 0.0
    out.print(
        f"spent: {s.evaluations:,} evaluations of {s.full_evaluations:,} ({share:.1%})"
        f"{f', {s.cached:,} from the cache' if s.cached else ''}; "
        f"{s.model_calls:,} model calls of ~{_count(s.full_model_calls)}; "
        f"cost {usd_(s.cost_usd)} of ~{usd_(s.full_cost_usd)} to evaluate everything"
    )


def _count(value: int | None) -> str:
    return "unmeasured" if value is None else n_(value)
