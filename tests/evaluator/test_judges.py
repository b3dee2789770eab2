"""Comparing judge models against the simulator: providers with their own keys and prices,
repeats and self-agreement, confusion matrices and bias, failures, projection, the table,
the plot and the command."""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path
from typing import Any

import msgspec
import pytest

from evaluator._judges import (
    JudgeRow,
    JudgeSpec,
    JudgesReport,
    SelfAgreement,
    compare_judges,
    print_judges,
    serve_judges,
    verdict_of,
)
from evaluator._judges._projection import project
from llm_client import ModelConfig, ModelSettings, Simulator, SimulatorConfig

ROOT = Path(__file__).resolve().parents[2]
JUDGE = ROOT / "examples" / "metrics" / "judge.py"
EXAMPLE = ROOT / "examples" / "judges"

# A judge whose verdict is written in the prompt: the simulator passes iff Answer equals
# Expected (its noise aside). `flip_on` lists which of an example's calls (0, 1, ...) flip
# that verdict, standing in for a model sampled at temperature > 0: the calls are real,
# the variability is scripted so that the expected figures can be worked out by hand.
SCRIPTED = """
import threading
from skynet import llm

_lock = threading.Lock()
_calls = {}


def score(input, output, expected=None):
    reply = llm("Answer PASS or FAIL.", input=f"Answer: {output}\\nExpected: {input['want']}")
    passed = reply.strip().upper().startswith("PASS")
    with _lock:
        n = _calls.get(input["q"], 0)
        _calls[input["q"]] = n + 1
    if n in input.get("flip_on", ()):
        passed = not passed
    bonus = input.get("s")
    if bonus is not None:
        return bonus + (1.0 if passed else 0.0), {"feedback": reply}
    return (1.0 if passed else 0.0), {"feedback": reply}
"""


def rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"e{i}",
            "input": {"question": f"What is {i} plus {i}?"},
            "output": str(2 * i),
            "expected": {"human": "PASS" if i % 3 else "FAIL"},
        }
        for i in range(n)
    ]


def scripted_rows(spec: list[tuple[bool, list[int], str]]) -> list[dict[str, Any]]:
    """(the simulator's verdict, which calls flip, the human label) per example."""
    return [
        {
            "id": f"e{i}",
            "input": {"q": f"e{i}", "want": "a" if passes else "b", "flip_on": flips},
            "output": "a",
            "expected": {"human": human},
        }
        for i, (passes, flips, human) in enumerate(spec)
    ]


def scripted(tmp_path: Path) -> Path:
    path = tmp_path / "scripted_judge.py"
    path.write_text(SCRIPTED, encoding="utf-8")
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SIM = SimulatorConfig(
    seed=3,
    models={
        "big": ModelSettings(noise=0.0),
        "small": ModelSettings(noise=0.3),
        "contrary": ModelSettings(noise=1.0),
    },
)


def local(model: str, url: str, **kw: Any) -> ModelConfig:
    return ModelConfig(model=model, base_url=url, api_key_env=None, **kw)


# The repeatability set: verdicts per example over three calls, as multisets
# e0 {1,1,1}  e1 {1,1,0}  e2 {0,0,0}  e3 {1,0,0}  e4 {1,1,0}  e5 {0,0,0}
# never flip: e0, e2, e5 = 3/6. Fleiss: P_i = 1, 1/3, 1, 1/3, 1/3, 1 -> P = 2/3; passes 8 of
# 18 -> P_e = (4/9)^2 + (5/9)^2 = 41/81; kappa = (54/81 - 41/81) / (40/81) = 13/40.
# Majorities 1 1 0 0 1 0 against the human labels 1 1 0 1 0 0: agree on 4 of 6; e4 is a
# false pass, e3 a false fail; both pass e0, e1; both fail e2, e5.
REPEATABILITY = [
    (True, [], "PASS"),
    (True, [1], "PASS"),
    (False, [], "FAIL"),
    (False, [0], "PASS"),
    (True, [2], "FAIL"),
    (False, [], "FAIL"),
]


class TestCompareJudges:
    async def test_unknown_price_stays_unknown(self) -> None:
        """A model with no known price has cost None, a note, and null in JSON."""
        async with Simulator(SIM) as sim:
            models = [
                local("big", sim.base_url, price_input=1.0, price_output=2.0),
                local("small", sim.base_url),
            ]
            report = await compare_judges(JUDGE, rows(12), models, reference_model="big")
        big, small = report.rows
        assert big.cost_usd is not None and big.cost_usd > 0 and big.cost_note is None
        assert small.cost_usd is None and small.cost_per_1k_usd is None
        assert small.cost_note and "small" in small.cost_note
        encoded = json.loads(msgspec.json.encode(report))
        assert encoded["rows"][1]["cost_usd"] is None
        assert big.agreement == 1.0 and big.kappa == 1.0
        assert small.compared == 12 and small.agreement is not None

    async def test_two_providers_each_key_to_its_own_server(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Two simulators on their own ports, each requiring its own key, in one comparison:
        each judge's key reaches only its own server (a key sent elsewhere is refused with
        401, as the crossed control shows), and each judge is priced at its own rate."""
        monkeypatch.setenv("PROVIDER_A_KEY", "key-a-1234567")
        monkeypatch.setenv("PROVIDER_B_KEY", "key-b-7654321")
        sim_a = SimulatorConfig(api_key="key-a-1234567", models={"judge-a": ModelSettings()})
        sim_b = SimulatorConfig(api_key="key-b-7654321", models={"judge-b": ModelSettings()})
        async with Simulator(sim_a) as a, Simulator(sim_b) as b:
            assert a.port != b.port
            specs = [
                JudgeSpec(
                    label="a",
                    model="judge-a",
                    base_url=a.base_url,
                    api_key_env="PROVIDER_A_KEY",
                    price_input=1.0,
                    price_output=2.0,
                ),
                JudgeSpec(
                    label="b",
                    model="judge-b",
                    base_url=b.base_url,
                    api_key_env="PROVIDER_B_KEY",
                    price_input=10.0,
                    price_output=20.0,
                ),
                JudgeSpec(  # the control: A's key sent to B's server
                    label="crossed",
                    model="judge-b",
                    base_url=b.base_url,
                    api_key_env="PROVIDER_A_KEY",
                ),
            ]
            report = await compare_judges(JUDGE, rows(5), specs, reference_model="a", repeat=2)
            seen_a, seen_b = a.statistics(), b.statistics()
        row_a, row_b, crossed = report.rows
        assert (row_a.scored, row_a.errors, row_b.scored, row_b.errors) == (10, 0, 10, 0)
        assert seen_a.requests == 10 and seen_a.client_errors == 0
        # B served its own judge's 10 calls and refused every one of the 10 crossed calls.
        assert seen_b.requests == 20 and seen_b.served == 10 and seen_b.client_errors == 10
        assert crossed.scored == 0 and crossed.failure is not None and "401" in crossed.failure
        # Same prompts and replies, so the same tokens: B costs ten times A.
        assert row_a.cost_usd is not None and row_b.cost_usd is not None
        assert row_b.cost_usd == pytest.approx(10 * row_a.cost_usd)
        encoded = msgspec.json.encode(report).decode()
        assert "key-a-1234567" not in encoded and "key-b-7654321" not in encoded

    async def test_one_model_down(self) -> None:
        """A model whose base URL refuses connections fails alone; its row says why."""
        async with Simulator(SIM) as sim:
            models = [
                local("big", sim.base_url),
                local("gone", f"http://127.0.0.1:{closed_port()}/v1", max_retries=1),
            ]
            report = await compare_judges(JUDGE, rows(6), models, reference_model="big")
        big, gone = report.rows
        assert big.scored == 6 and big.errors == 0
        assert gone.scored == 0 and gone.errors == 6 and gone.error_kinds == {"llm_error": 6}
        assert gone.failure is not None and "every call failed" in gone.failure
        assert gone.agreement is None and not gone.pareto

    async def test_model_that_cannot_start_keeps_its_row(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A judge whose client cannot open (its key variable is not set) gets a row with
        the reason; the other judges run."""
        monkeypatch.delenv("SKYNET_TEST_UNSET_KEY", raising=False)
        async with Simulator(SIM) as sim:
            specs = [
                JudgeSpec(label="big", model="big", base_url=sim.base_url, api_key_env=None),
                JudgeSpec(
                    label="keyless",
                    model="big",
                    base_url=sim.base_url,
                    api_key_env="SKYNET_TEST_UNSET_KEY",
                ),
            ]
            report = await compare_judges(
                JUDGE, rows(4), specs, reference_model="big", repeat=2, project=100
            )
        big, keyless = report.rows
        assert big.scored == 8
        assert keyless.scored == 0 and keyless.errors == 8
        assert keyless.error_kinds == {"not_started": 8}
        assert keyless.failure is not None and "SKYNET_TEST_UNSET_KEY" in keyless.failure
        assert keyless.agreement is None and keyless.self_agreement is None
        assert keyless.projection is not None and keyless.projection.wall_s is None
        assert all("keyless" not in case.calls for case in report.cases)

    async def test_repeatability_hand_computed(self, tmp_path: Path) -> None:
        """Three repeats, every call made anew: flip-free share 3/6, Fleiss' kappa 13/40,
        the majority's agreement and confusion matrix against the labels as worked out
        above, and every call kept per example."""
        async with Simulator(SIM) as sim:
            report = await compare_judges(
                scripted(tmp_path),
                scripted_rows(REPEATABILITY),
                [local("big", sim.base_url)],
                labels="human",
                repeat=3,
            )
            requests = sim.statistics().requests
        (row,) = report.rows
        assert requests == 18  # 6 examples x 3 repeats: nothing cached or merged
        assert (row.examples, row.repeats, row.scored) == (6, 3, 18)
        s = row.self_agreement
        assert s is not None and (s.repeats, s.compared, s.ties) == (3, 6, 0)
        assert s.stable == pytest.approx(0.5)
        assert s.kappa == pytest.approx(13 / 40)
        assert s.stable_ci is not None and s.stable_ci[0] <= 0.5 <= s.stable_ci[1]
        assert row.agreement == pytest.approx(4 / 6)
        c = row.confusion
        assert c is not None
        assert (c.both_pass, c.false_pass, c.false_fail, c.both_fail) == (2, 1, 1, 2)
        assert c.lenient_rate == pytest.approx(1 / 3) and c.strict_rate == pytest.approx(1 / 3)
        cases = {case.id: case for case in report.cases}
        assert [len(case.calls["big"]) for case in report.cases] == [3] * 6
        assert sorted(x.score for x in cases["e1"].calls["big"]) == [0.0, 1.0, 1.0]  # type: ignore[type-var]
        assert [k for k, c in cases.items() if c.flips] == ["e1", "e3", "e4"]
        assert [k for k, c in cases.items() if c.disagree] == ["e3", "e4"]
        assert cases["e4"].verdicts == {"big": 1.0} and cases["e4"].reference == 0.0
        assert cases["e0"].calls["big"][0].feedback.startswith("PASS")

    async def test_ties_take_the_first_repeat(self, tmp_path: Path) -> None:
        """Two repeats split 1-1 on e1 and e3: two ties, counted; flip-free 4/6 and Fleiss'
        kappa (2/3 - 1/2) / (1/2) = 1/3 (P_i = 1, 0, 1, 0, 1, 1; passes 6 of 12)."""
        async with Simulator(SIM) as sim:
            report = await compare_judges(
                scripted(tmp_path),
                scripted_rows(REPEATABILITY),
                [local("big", sim.base_url)],
                labels="human",
                repeat=2,
            )
        s = report.rows[0].self_agreement
        assert s is not None and s.ties == 2
        assert s.stable == pytest.approx(4 / 6) and s.kappa == pytest.approx(1 / 3)
        for case in report.cases:  # a tie takes the first repeat's verdict
            first = case.calls["big"][0].score
            if case.id in ("e1", "e3"):
                assert case.verdicts["big"] == first

    async def test_confusion_against_a_reference_model(self) -> None:
        """A judge that flips every verdict (noise 1) against an exact one: reference
        P P P F F, judge F F F P P: 2 false passes, 3 false fails, agreement 0, kappa
        (0 - 0.48) / 0.52."""
        data = [
            {"id": f"e{i}", "input": {"question": "q"}, "output": out}
            for i, out in enumerate(["Paris", "Tokyo", "Lima", "x", "y"])
        ]
        metric_rows = [
            {**row, "input": {"question": f"Capital?\nExpected: {want}"}}
            for row, want in zip(data, ["Paris", "Tokyo", "Lima", "Oslo", "Rome"], strict=True)
        ]
        async with Simulator(SIM) as sim:
            report = await compare_judges(
                JUDGE,
                metric_rows,
                [local("big", sim.base_url), local("contrary", sim.base_url)],
                reference_model="big",
            )
        big, contrary = report.rows
        assert big.confusion is not None and contrary.confusion is not None
        b, c = big.confusion, contrary.confusion
        assert (b.both_pass, b.false_pass, b.false_fail, b.both_fail) == (3, 0, 0, 2)
        assert (c.both_pass, c.false_pass, c.false_fail, c.both_fail) == (0, 2, 3, 0)
        assert c.lenient_rate == 1.0 and c.strict_rate == 1.0
        assert contrary.agreement == 0.0
        assert contrary.kappa == pytest.approx(-0.48 / 0.52)

    async def test_numeric_scores_bias_and_icc(self, tmp_path: Path) -> None:
        """Numeric scores (2, 2, 4, 4) against labels (1, 2, 3, 5): bias 0.25, Pearson
        5 / sqrt(35); two identical repeats: never flips, ICC 1, within-example std 0."""
        data = [
            {
                "id": f"e{i}",
                "input": {"q": f"e{i}", "want": want, "s": float(s)},
                "output": "a",
                "expected": {"gold": gold},
            }
            for i, (s, want, gold) in enumerate(
                [(1, "a", 1), (2, "b", 2), (3, "a", 3), (4, "b", 5)]
            )
        ]
        async with Simulator(SIM) as sim:
            report = await compare_judges(
                scripted(tmp_path), data, [local("big", sim.base_url)], labels="gold", repeat=2
            )
        (row,) = report.rows
        assert report.kind == "scores" and row.confusion is None
        assert row.bias == pytest.approx(0.25)
        assert row.bias_ci is not None and row.bias_ci[0] <= 0.25 <= row.bias_ci[1]
        assert row.pearson == pytest.approx(5 / math.sqrt(35))
        s = row.self_agreement
        assert s is not None and s.stable == 1.0 and s.kappa == pytest.approx(1.0)
        assert s.within_std == 0.0

    async def test_labels(self) -> None:
        """Agreement against a labels column compares each verdict with the human label."""
        data = rows(9)
        async with Simulator(SIM) as sim:
            report = await compare_judges(JUDGE, data, [local("big", sim.base_url)], labels="human")
        (row,) = report.rows
        assert report.reference == "labels:human" and row.compared == 9
        verdicts = [case.verdicts["big"] for case in report.cases]
        labels = [1.0 if r["expected"]["human"] == "PASS" else 0.0 for r in data]
        same = sum(v == lab for v, lab in zip(verdicts, labels, strict=True))
        assert row.agreement == pytest.approx(same / 9)

    async def test_projection_from_the_run(self) -> None:
        """With --project, each row projects cost at its measured rate and time at the
        tightest limit; a tight rpm binds."""
        async with Simulator(SIM) as sim:
            models = [local("big", sim.base_url, price_input=1.0, price_output=2.0, rpm=600)]
            report = await compare_judges(
                JUDGE, rows(4), models, reference_model="big", project=10_000
            )
        (row,) = report.rows
        p = row.projection
        assert p is not None and report.project == 10_000
        assert row.cost_usd is not None and p.cost_usd == pytest.approx(row.cost_usd / 4 * 10_000)
        assert p.limited_by == "rpm" and p.per_minute == pytest.approx(600 * 0.98)
        assert p.wall_s is not None and p.wall_s >= 10_000 / (600 * 0.98) * 60

    async def test_validation(self) -> None:
        """A reference that is not a label, a repeat of 0 and a label used twice are refused."""
        one = [ModelConfig(model="a", api_key_env=None)]
        with pytest.raises(ValueError, match="not among"):
            await compare_judges(JUDGE, rows(1), one, reference_model="b")
        with pytest.raises(ValueError, match="`repeat` must be a whole number"):
            await compare_judges(JUDGE, rows(1), one, repeat=0)
        with pytest.raises(ValueError, match="own label"):
            await compare_judges(JUDGE, rows(1), one * 2)


class TestServeJudges:
    async def test_one_simulator_per_provider(self) -> None:
        """Each provider gets its own simulator (its own port); no key is sent to it."""
        specs = [
            JudgeSpec(label="a1", model="big", provider="a", api_key_env="A_KEY"),
            JudgeSpec(label="a2", model="small", provider="a", api_key_env="A_KEY"),
            JudgeSpec(label="b1", model="big", base_url="https://b.example/v1"),
        ]
        async with serve_judges(specs, SIM) as served:
            ports = [s.base_url for s in served]
            assert ports[0] == ports[1] != ports[2]
            assert all(s.simulated and s.api_key_env is None for s in served)
            report = await compare_judges(JUDGE, rows(3), served, reference_model="a1")
        assert [r.scored for r in report.rows] == [3, 3, 3]
        assert [r.provider for r in report.rows] == ["a", "a", None]

    async def test_without_simulator_unchanged(self) -> None:
        """Without a simulator config the specs are served as given."""
        specs = [JudgeSpec(label="a", model="a")]
        async with serve_judges(specs, None) as served:
            assert served == specs


def _row(**kw: Any) -> JudgeRow:
    base: dict[str, Any] = {"label": "j", "model": "j", "examples": 10, "scored": 10, "errors": 0}
    return JudgeRow(**(base | kw))


class TestProject:
    def test_tpm_binds(self) -> None:
        """10 in flight at 100 ms: 6,000/min; rpm 600 paced 2% below: 588/min; tpm 30,000
        at 100 tokens: 294/min binds. 1,000 examples: 1000/294 min plus one call."""
        row = _row(
            cost_usd=0.005,
            cost_per_1k_usd=0.5,
            service_ms_mean=100.0,
            concurrency=10,
            calls_per_example=1.0,
            input_tokens_per_example=80.0,
            output_tokens_per_example=20.0,
        )
        p = project(row, 1000, rpm=600, tpm=30_000, rate_margin=0.02)
        assert p.limited_by == "tpm" and p.per_minute == pytest.approx(294.0)
        assert p.wall_s == pytest.approx(1000 / 294 * 60 + 0.1)
        assert p.cost_usd == pytest.approx(0.5)
        assert "configured limits" in p.basis

    def test_concurrency_binds_and_calls_per_example(self) -> None:
        """No rpm/tpm: concurrency binds; an rpm counts every model call of an example."""
        row = _row(cost_per_1k_usd=None, service_ms_mean=50.0, concurrency=4, calls_per_example=2.0)
        assert project(row, 10, rpm=None, tpm=None, rate_margin=0.0).limited_by == "concurrency"
        p = project(row, 10, rpm=60, tpm=None, rate_margin=0.0)
        assert p.limited_by == "rpm" and p.per_minute == pytest.approx(30.0)
        assert p.cost_usd is None

    def test_nothing_measured(self) -> None:
        """A judge with no successful call projects no time, and says why."""
        p = project(
            _row(scored=0, cost_note="no model call completed"), 10, rpm=1, tpm=1, rate_margin=0
        )
        assert p.wall_s is None and p.note is not None and "no call succeeded" in p.note


def _report(repeats: int) -> JudgesReport:
    rows = [
        _row(
            label="cheap",
            cost_usd=0.001,
            cost_per_1k_usd=0.1,
            agreement=0.8,
            agreement_ci=(0.6, 0.9),
            pareto=True,
            self_agreement=SelfAgreement(
                repeats=repeats, compared=10, stable=0.7, kappa=0.55, kappa_ci=(0.3, 0.8)
            )
            if repeats > 1
            else None,
        ),
        _row(
            label="dear[1]",
            cost_usd=None,
            cost_note="price unknown",
            failure="every call failed; first: [Errno 111] refused",
        ),
    ]
    return JudgesReport(
        reference="model:cheap", kind="verdicts", examples=10, rows=rows, repeats=repeats
    )


class TestPrintJudges:
    def test_tables_and_notes(self) -> None:
        """Two tables (self-agreement columns with repeats), and failure notes printed as
        written even when they hold brackets."""
        from rich.console import Console

        out = Console(record=True, width=250)
        print_judges(_report(3), out)
        text = out.export_text()
        assert "x 3 repeats" in text and "self: kappa [95% CI]" in text
        assert "0.550 [0.30, 0.80]" in text and "70%" in text
        assert "Cost and speed" in text and "unknown" in text
        assert "dear[1]: every call failed; first: [Errno 111] refused" in text

    def test_no_repeats_no_self_columns(self) -> None:
        """Without repeats there are no self-agreement columns."""
        from rich.console import Console

        out = Console(record=True, width=250)
        print_judges(_report(1), out)
        assert "self:" not in out.export_text()


class TestPlot:
    def test_two_panels(self) -> None:
        """The figure has the cost panel and the self-agreement panel, the latter listing
        the judges that have a self-agreement."""
        from evaluator._judges._plot import judges_figure

        fig = judges_figure(_report(3))
        try:
            cost_ax, self_ax = fig.axes[:2]
            assert "agreement with model:cheap" in cost_ax.get_ylabel()
            assert [t.get_text() for t in self_ax.get_yticklabels()] == ["cheap"]
            assert "3 repeats" in self_ax.get_title()
        finally:
            import matplotlib.pyplot as plt

            plt.close(fig)

    def test_second_panel_without_repeats(self) -> None:
        """Without repeats the second panel says what it needs."""
        from evaluator._judges._plot import judges_figure

        fig = judges_figure(_report(1))
        try:
            texts = [t.get_text() for t in fig.axes[1].texts]
            assert any("--repeat 2" in t for t in texts)
        finally:
            import matplotlib.pyplot as plt

            plt.close(fig)


class TestVerdictOf:
    @pytest.mark.parametrize(
        ("value", "want"),
        [
            ("PASS", 1.0),
            ("fail", 0.0),
            (" Yes ", 1.0),
            (True, 1.0),
            (0, 0.0),
            ("0.25", 0.25),
            ("maybe", None),
            (None, None),
            (float("nan"), None),
        ],
    )
    def test_values(self, value: Any, want: float | None) -> None:
        """Labels read as numbers: pass/fail words, booleans, numbers; else None."""
        assert verdict_of(value) == want
