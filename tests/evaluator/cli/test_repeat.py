"""`skynet-eval run --repeat K` (epochs): K results per example, each example's score
variance in the report, --resume by (id, repeat), the refusals, and files without repeats
unchanged."""

from __future__ import annotations

import json
import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evaluator._cli import main
from evaluator._stats import bootstrap_mean_ci
from tests._helpers import write

HEADER_KEY = "skynet_eval_results"
N = 6
K = 3

# Even ids score 1.0 every time; odd ids a seeded random score per (id, call), and an id's
# n-th call is its n-th repeat (the passes run one after the other). Each call is logged.
METRIC = """
import json, random
EXECUTION = "inline"
LOG = {log!r}

def score(input, output, expected=None):
    with open(LOG, "a+") as fh:
        fh.seek(0)
        calls = sum(1 for line in fh if json.loads(line) == input["id"])
        fh.write(json.dumps(input["id"]) + "\\n")
    if input["i"] % 2 == 0:
        return 1.0, {{"feedback": "stable"}}
    return random.Random(f"{{input['id']}}:{{calls}}").random(), {{"feedback": "noisy"}}
"""


def _expected_score(i: int, repeat: int) -> float:
    return 1.0 if i % 2 == 0 else random.Random(f"r{i}:{repeat}").random()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    data = tmp_path / "data.jsonl"
    with data.open("w") as fh:
        for i in range(N):
            row = {"id": f"r{i}", "input": {"id": f"r{i}", "i": i}, "output": "x"}
            fh.write(json.dumps(row) + "\n")
    log = tmp_path / "calls.log"
    metric = write(tmp_path, "metric.py", METRIC.format(log=str(log)))
    return {"data": data, "metric": metric, "log": log, "out": tmp_path / "results.jsonl"}


def _argv(files: dict[str, Path], *extra: str) -> list[str]:
    return [
        "run",
        "--metric", str(files["metric"]),
        "--data", str(files["data"]),
        "--output", str(files["out"]),
        "--execution", "inline",
        *extra,
    ]  # fmt: skip


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _results(path: Path) -> list[dict[str, Any]]:
    return [row for row in _lines(path) if HEADER_KEY not in row]


def _calls(files: dict[str, Path]) -> list[str]:
    return [json.loads(line) for line in files["log"].read_text().splitlines()]


def test_k_results_per_id_and_the_variance_figures(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """K results per id, pass 0 unmarked and passes 1..K-1 marked; the report's figures
    are the hand computation's over the file's scores."""
    assert main(_argv(files, "--repeat", str(K), "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    rows = _results(files["out"])
    pairs = Counter((r["example_id"], r.get("repeat", 0)) for r in rows)
    assert pairs == Counter({(f"r{i}", k): 1 for i in range(N) for k in range(K)})
    assert all("repeat" not in r for r in rows[:N])  # the first pass is written as before
    assert Counter(_calls(files)) == Counter({f"r{i}": K for i in range(N)})  # no extra call
    for row in rows:
        i = int(row["example_id"][1:])
        assert row["score"] == _expected_score(i, row.get("repeat", 0))
    assert _lines(files["out"])[0]["repeat"] == K  # the header records it
    assert report["n"] == N * K

    per_example = [[_expected_score(i, k) for k in range(K)] for i in range(N)]
    stds = [statistics.stdev(scores) for scores in per_example]
    means = [statistics.fmean(scores) for scores in per_example]
    summary = report["repeats"]
    assert summary["repeats"] == K and summary["examples"] == N and summary["incomplete"] == 0
    assert summary["mean_std"] == pytest.approx(statistics.fmean(stds))
    assert summary["mean_std"] > 0
    assert summary["changed"] == pytest.approx(0.5)  # the odd ids, 3 of 6
    assert summary["mean"] == pytest.approx(statistics.fmean(means))
    low, high = summary["mean_ci"]
    assert (low, high) == pytest.approx(bootstrap_mean_ci(means))
    assert low <= summary["mean"] <= high


def test_the_terminal_report_shows_the_variance(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_argv(files, "--repeat", "2")) == 0
    text = capsys.readouterr().out
    assert "repeats" in text and "2 per example (6 with all)" in text
    assert "examples whose score changed" in text and "50.0%" in text
    assert "score std dev per example (mean)" in text and "95% CI" in text


def test_resume_runs_only_the_missing_pairs(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A run stopped after 10 of 18 results: --resume runs exactly the 8 missing
    (id, repeat) pairs, and the file then holds each pair once."""
    assert main(_argv(files, "--repeat", str(K))) == 0
    capsys.readouterr()
    header, *rest = files["out"].read_text().splitlines(keepends=True)
    kept = [line for line in rest if HEADER_KEY not in line][:10]
    files["out"].write_text(header + "".join(kept))
    missing = Counter(
        (r["example_id"], r.get("repeat", 0)) for r in _results(files["out"])
    )  # what is left
    before = len(_calls(files))

    assert main(_argv(files, "--repeat", str(K), "--resume", "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == N * K and report["resumed"] == 10
    new_calls = _calls(files)[before:]
    everything = Counter({(f"r{i}", k): 1 for i in range(N) for k in range(K)})
    assert Counter(new_calls) == Counter(pair[0] for pair in everything - missing)
    pairs = Counter((r["example_id"], r.get("repeat", 0)) for r in _results(files["out"]))
    assert pairs == everything
    assert report["repeats"]["examples"] == N


def test_resume_with_fewer_repeats_says_so(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Resuming a 3-repeat file with --repeat 1 runs nothing new and warns that the
    other repeats' results stay and count."""
    assert main(_argv(files, "--repeat", str(K))) == 0
    capsys.readouterr()
    assert main(_argv(files, "--resume", "--json")) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["resumed"] == N * K
    assert f"holds results of {K} repeats and this run has --repeat 1" in captured.err
    assert len(_calls(files)) == N * K


@pytest.mark.parametrize("value", ["0", "-2"])
def test_repeat_below_one_is_refused(
    files: dict[str, Path], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_argv(files, "--repeat", value)) == 2
    err = capsys.readouterr().err
    assert f"--repeat must be a whole number of at least 1, got {value}" in err
    assert "Traceback" not in err and not files["log"].exists()


def test_repeat_with_cache_is_refused(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cached result would repeat identically: the run refuses, naming both flags."""
    cache = tmp_path / "cache"
    assert main(_argv(files, "--repeat", "2", "--cache", str(cache))) == 2
    err = capsys.readouterr().err
    assert "--repeat 2" in err and "drop --cache, or use --repeat 1" in err
    assert not files["log"].exists() and not files["out"].exists()


def test_repeat_1_is_the_default_and_writes_as_before(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """No repeat key in the header or the results, and no variance in the report."""
    assert main(_argv(files, "--repeat", "1", "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["repeats"] is None and report["n"] == N
    assert all("repeat" not in line for line in _lines(files["out"]))


def test_the_html_report_reads_a_repeated_file(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`skynet-eval report` reads K results per id (one per pass), not as duplicates;
    a second result for one (id, repeat) is still refused."""
    assert main(_argv(files, "--repeat", "2")) == 0
    capsys.readouterr()
    assert main(["report", str(files["out"]), "--no-html"]) == 0
    text = capsys.readouterr().out  # the variance figures, as `run` prints them
    assert "2 per example (6 with all)" in text and "examples whose score changed" in text
    with files["out"].open("a") as fh:
        fh.write(json.dumps({"example_id": "r1", "score": 0.5, "repeat": 1}) + "\n")
    assert main(["report", str(files["out"]), "--no-html"]) == 2
    assert "example id 'r1' has two results in repeat 1" in capsys.readouterr().err


def test_a_changed_value_keeps_its_repeat() -> None:
    """The careful encoding (a value JSON cannot hold) writes `repeat` when set, and
    leaves it out when not, as the fast one does."""
    from evaluator._call._results import Result
    from evaluator._storable import encode_results

    marked, _ = encode_results([Result(example_id="c", score=1.0, output=2j, repeat=2)])
    plain, _ = encode_results([Result(example_id="c", score=1.0, output=2j)])
    assert json.loads(marked)["repeat"] == 2 and "repeat" not in json.loads(plain)
