"""``skynet-eval run --output`` attacked as a careless or hostile user would: any path
string, any file already there, two runs at once on one file.

Whatever the path, the run ends in 0 or 2 with one clear line, never a traceback, and a
file that is not a results file keeps every byte. Two runs on one file: one writes, the
other is refused at once, and the file ends with each id exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator._cli import main

ROOT = Path(__file__).resolve().parents[2]
HEADER_KEY = "skynet_eval_results"

METRIC = """
EXECUTION = "inline"

def score(input, output, expected=None):
    return 1.0, {"feedback": "ok"}
"""

GATED_METRIC = """\
import os
import time

GATE = {gate!r}


def score(input, output, expected=None):
    if input["i"] >= 3:
        deadline = time.monotonic() + 60
        while not os.path.exists(GATE) and time.monotonic() < deadline:
            time.sleep(0.005)
    return 1.0, {{"feedback": "ok"}}
"""


def _dataset(path: Path, n: int) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "input": {"i": i}, "output": "o"}) + "\n" for i in range(n)
        )
    )
    return path


def _ids(path: Path) -> list[Any]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [row["example_id"] for row in rows if HEADER_KEY not in row]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A metric, a dataset, a folder, a file with content and a results file to aim at."""
    folder = tmp_path_factory.mktemp("output")
    (folder / "metric.py").write_text(textwrap.dedent(METRIC))
    _dataset(folder / "data.jsonl", 3)
    (folder / "adir").mkdir()
    (folder / "notes.txt").write_text("my notes\n")
    return folder


# Path pieces a careless user or a broken script produces: control characters, NUL,
# dots, separators, very long names, existing folders and files. Relative, and at most one
# level above the scratch folder, so that nothing lands outside pytest's own folders; and
# a few absolute paths that must be refused (devices, /proc, the root).
_piece = st.one_of(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=12),
    st.sampled_from(
        ["adir", "notes.txt", "data.jsonl", "metric.py", "..", ".", "", "\x00", "\n", " ",
         "r.jsonl", "x" * 300, "~"]
    ),
)  # fmt: skip
_relative = (
    st.lists(_piece, min_size=1, max_size=3)
    .filter(lambda parts: parts.count("..") <= 1)
    .map(lambda parts: "/".join(parts).lstrip("/"))
)
_paths = st.one_of(
    _relative,
    st.sampled_from(["/dev/null", "/dev/full", "/proc/self/status", "/", "/proc"]),
)


@pytest.mark.slow
class TestAnyPath:
    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(output=_paths, resume=st.booleans())
    def test_any_output_path_ends_cleanly(
        self,
        scratch: Path,
        output: str,
        resume: bool,
        capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Any --output string: exit 0 (a results file was written there) or 2 (one line
        saying what is wrong with it), no traceback; the dataset, the metric and other
        files keep every byte."""
        monkeypatch.chdir(scratch)
        kept = {
            name: (scratch / name).read_bytes() for name in ("data.jsonl", "metric.py", "notes.txt")
        }
        argv = ["run", "--metric", "metric.py", "--data", "data.jsonl", "--output", output]
        capfd.readouterr()
        code = main([*argv, *(["--resume"] if resume else []), "--json"])
        out, err = capfd.readouterr()
        assert code in (0, 2), f"{output!r}: exit {code}\n{err[-2000:]}"
        assert "Traceback" not in err, f"{output!r}:\n{err[-3000:]}"
        if code == 2:
            errors = [line for line in err.splitlines() if "error:" in line]
            assert len(errors) == 1, f"{output!r}:\n{err}"
        for name, before in kept.items():
            assert (scratch / name).read_bytes() == before, f"{output!r} changed {name}"
        if code == 0:
            assert json.loads(out)["n"] == 3
            target = Path(output)
            if target.is_file() and target.name not in kept:
                target.unlink()  # each example starts afresh


@pytest.mark.slow
class TestTwoRunsAtOnce:
    def test_a_second_run_on_a_busy_output_is_refused(self, tmp_path: Path) -> None:
        """Two runs on one --output at the same time (the second with and without
        --resume): the second is refused at once with one line while the first runs on;
        the file ends with each id exactly once, and a later resume counts each once."""
        gate = tmp_path / "go"
        # The first run cannot finish before the test opens the gate, however slowly the
        # second interpreter starts on a loaded machine (the check's 3 examples pass).
        (tmp_path / "metric.py").write_text(GATED_METRIC.format(gate=str(gate)))
        data = _dataset(tmp_path / "data.jsonl", 300)
        out = tmp_path / "r.jsonl"
        argv = [sys.executable, "-m", "evaluator", "run", "--metric", str(tmp_path / "metric.py"),
                "--data", str(data), "--output", str(out), "--execution", "inline"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        first = subprocess.Popen(
            [*argv, "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and first.poll() is None and not out.exists():
                time.sleep(0.01)
            time.sleep(0.2)  # the file is locked right after it is created
            assert first.poll() is None, "the first run ended before the second started"
            for extra in ([], ["--resume"]):
                second = subprocess.run(
                    [*argv, *extra], env=env, capture_output=True, text=True, timeout=60
                )
                assert second.returncode == 2, second.stderr
                assert "another skynet-eval run is writing this results file" in second.stderr
                assert "Traceback" not in second.stderr
            assert first.poll() is None, "the refusals should come while the first still runs"
            gate.touch()
            stdout, stderr = first.communicate(timeout=120)
        finally:
            gate.touch()
            if first.poll() is None:
                first.kill()
            if first.stdout is not None and not first.stdout.closed:
                first.communicate()  # closes its pipes, also when an assertion failed above
        assert first.returncode == 0, stderr
        assert json.loads(stdout)["n"] == 300
        assert Counter(_ids(out)) == Counter(f"q{i}" for i in range(300))
        again = subprocess.run(
            [*argv, "--resume", "--json"], env=env, capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 0, again.stderr
        report = json.loads(again.stdout)
        assert report["n"] == 300 and report["resumed"] == 300
