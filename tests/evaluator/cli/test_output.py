"""What the commands print: standard output kept for --json, progress on stderr."""

from __future__ import annotations

import os
import sys

import pytest

from evaluator import ErrorInfo, Result
from evaluator._cli._output import reserved_stdout
from evaluator._cli._progress import ModelCounts, RunProgress


class TestReservedStdout:
    def test_only_the_yielded_stream_reaches_stdout(
        self, capfd: pytest.CaptureFixture[str]
    ) -> None:
        """Inside, print() and raw writes to fd 1 (what user code and worker processes
        do) go to stderr; the yielded stream writes to the real stdout; fd 1 is back after."""
        with reserved_stdout() as stream:
            print("user print")
            os.write(1, b"raw fd write\n")
            stream.write('{"n": 1}\n')
        print("after")
        out, err = capfd.readouterr()
        assert out == '{"n": 1}\nafter\n'
        assert "user print" in err and "raw fd write" in err

    def test_not_reserved_is_plain_stdout(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Without --json nothing is moved: the stream is sys.stdout."""
        with reserved_stdout(False) as stream:
            assert stream is sys.stdout


class TestRunProgress:
    def test_plain_lines_count_errors_and_unknown_cost(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Off a terminal the progress is a plain line on stderr (at the end at least):
        done of total, errors, model calls, 429s, and `cost ?` while a cost is unknown."""
        results = [
            Result(example_id=1, score=1.0),
            Result(example_id=2, score=0.0, error=ErrorInfo("metric_error", "boom")),
        ]
        with RunProgress(total=10, done=2, live=False) as progress:
            progress.advance(results, ModelCounts(calls=3, rate_limited=1, cost=None), errors=1)
        out, err = capsys.readouterr()
        assert out == ""
        line = err.strip().splitlines()[-1]
        assert line.startswith("4/10 done") and "1 error " in line
        assert "3 model calls" in line and "1 429s" in line and "cost ?" in line

    def test_known_cost_in_dollars(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A measured cost is shown in dollars; no model calls, no model figures."""
        with RunProgress(total=1, done=0, live=False) as progress:
            progress.advance(
                [Result(example_id=1, score=1.0)], ModelCounts(calls=2, cost=0.5), errors=0
            )
        assert "$0.5000" in capsys.readouterr().err
        with RunProgress(total=1, done=0, live=False) as progress:
            progress.advance([Result(example_id=1, score=1.0)], ModelCounts(), errors=0)
        assert "model calls" not in capsys.readouterr().err
