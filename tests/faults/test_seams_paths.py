"""Every path the engine writes is checked before anything runs (issue 24, item 7).

A FIFO, a character device (a symlink in the test's folder to ``/dev/null``), a socket or
a directory given to any output flag (``run --output``, ``run --report``, ``report
--html`` and its default page path, ``judges --output``/``--plot``, the cache's files
under ``run --cache``) or to ``write_html_report`` is refused with one line naming the
flag: exit 2, nothing written, the node still what it was, no hang (a FIFO opened for
writing with no reader would block: the timeout marks guard that).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from evaluator import OutputPathError, write_html_report
from evaluator._cache import FILE_NAME
from evaluator._cli import main

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "examples" / "metrics"
JUDGES = ROOT / "examples" / "judges"

METRIC = """
def score(input, output, expected=None):
    return float(output == expected["label"]), {"feedback": "ok"}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A metric, a three-row dataset and a results file of a run over them."""
    (tmp_path / "metric.py").write_text(textwrap.dedent(METRIC))
    with (tmp_path / "data.jsonl").open("w") as fh:
        for i in range(3):
            row = {"id": i, "input": {"q": i}, "expected": {"label": "a"}, "output": "a"}
            fh.write(json.dumps(row) + "\n")
    return tmp_path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _device(path: Path) -> Path:
    """A character device at ``path``: a symlink to /dev/null (never written through)."""
    path.symlink_to("/dev/null")
    return path


def _socket(path: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    return path


NODES: dict[str, Callable[[Path], Path]] = {"fifo": _fifo, "device": _device, "socket": _socket}


def _kind(path: Path) -> int:
    return stat.S_IFMT(path.stat().st_mode)


def _results(folder: Path) -> Path:
    """A results file of a run over ``folder``'s dataset."""
    out = folder / "r.jsonl"
    argv = ["run", "--metric", str(folder / "metric.py"), "--data", str(folder / "data.jsonl")]
    assert main([*argv, "--output", str(out), "--json"]) == 0
    return out


def _run(folder: Path, *extra: str) -> list[str]:
    return [
        "run", "--metric", str(folder / "metric.py"), "--data", str(folder / "data.jsonl"),
        *extra,
    ]  # fmt: skip


def _judges(folder: Path, *extra: str) -> list[str]:
    return [
        "judges", "--metric", str(METRICS / "judge.py"), "--data", str(JUDGES / "data.jsonl"),
        "--models", "judge-mini", *extra,
    ]  # fmt: skip


#: (flag as the error names it, argv maker for the node's path).
FLAGS: dict[str, Callable[[Path, Path], list[str]]] = {
    "--output": lambda f, p: _run(f, "--output", str(p)),
    "--report": lambda f, p: _run(f, "--report", str(p)),
    "--html": lambda f, p: ["report", str(_results(f)), "--html", str(p)],
    "judges --output": lambda f, p: _judges(f, "--output", str(p)),
}


@pytest.mark.timeout(60)
@pytest.mark.slow
class TestEveryOutputFlag:
    @pytest.mark.parametrize("node", sorted(NODES))
    @pytest.mark.parametrize("flag", sorted(FLAGS))
    def test_a_node_that_is_not_a_file_is_refused(
        self, folder: Path, flag: str, node: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A FIFO, device or socket given to an output flag: exit 2, one error line naming
        the flag and saying it is not a regular file; the node is left as it was."""
        target = NODES[node](folder / f"target.{node}")
        kind = _kind(target)
        argv = FLAGS[flag](folder, target)
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if "error:" in line]
        assert len(errors) == 1, err
        assert f"{flag.split()[-1]} {target}" in errors[0], err
        assert "not a regular file" in errors[0], err
        assert "Traceback" not in err
        assert _kind(target) == kind  # still the FIFO, device or socket it was

    @pytest.mark.parametrize("node", sorted(NODES))
    def test_the_default_page_path_is_checked_too(
        self, folder: Path, node: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``report RESULTS`` without --html writes RESULTS.html: when that is a FIFO or a
        device, it is refused naming --html (the flag that would choose another path)."""
        results = _results(folder)
        target = NODES[node](results.with_suffix(".html"))
        kind = _kind(target)
        capsys.readouterr()
        assert main(["report", str(results)]) == 2
        err = capsys.readouterr().err
        assert f"--html {target}" in err and "not a regular file" in err, err
        assert _kind(target) == kind

    def test_a_directory_is_refused_for_the_page(
        self, folder: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--html DIR: exit 2 and one line, the directory untouched."""
        (folder / "pages").mkdir()
        results = _results(folder)
        capsys.readouterr()
        assert main(["report", str(results), "--html", str(folder / "pages")]) == 2
        assert "is a directory" in capsys.readouterr().err
        assert list((folder / "pages").iterdir()) == []

    @pytest.mark.parametrize("node", sorted(NODES))
    @pytest.mark.parametrize("name", [FILE_NAME, f"{FILE_NAME}-wal", f"{FILE_NAME}.lock"])
    def test_the_cache_files_are_checked(
        self, folder: Path, node: str, name: str, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--cache DIR whose cache file (or its -wal, or its lock) is a FIFO, device or
        socket: refused naming --cache before the run starts, the node left as it was."""
        cache = folder / "cache"
        cache.mkdir()
        target = NODES[node](cache / name)
        kind = _kind(target)
        capsys.readouterr()
        assert main(_run(folder, "--cache", str(cache), "--json")) == 2
        err = capsys.readouterr().err
        assert f"--cache {target}" in err and "not a regular file" in err, err
        assert _kind(target) == kind

    def test_a_plot_path_that_is_a_fifo_is_refused(
        self, folder: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """judges --plot FIFO: refused naming --plot (matplotlib would block on it)."""
        pytest.importorskip("matplotlib")
        target = _fifo(folder / "plot.png")
        assert main(_judges(folder, "--plot", str(target))) == 2
        err = capsys.readouterr().err
        assert f"--plot {target}" in err and "not a regular file" in err, err
        assert stat.S_ISFIFO(target.stat().st_mode)


@pytest.mark.timeout(60)
@pytest.mark.slow
class TestWriteHtmlReport:
    @pytest.mark.parametrize("node", sorted(NODES))
    def test_the_library_call_refuses_a_node(self, folder: Path, node: str) -> None:
        """write_html_report(results, FIFO/device/socket): OutputPathError naming `out`,
        before the page is built; the node is left as it was."""
        results = _results(folder)
        target = NODES[node](folder / f"page.{node}")
        kind = _kind(target)
        with pytest.raises(OutputPathError, match="not a regular file") as caught:
            write_html_report(str(results), target)
        assert caught.value.option == "out"
        assert _kind(target) == kind

    def test_a_regular_file_is_still_replaced(self, folder: Path) -> None:
        """The check refuses only what is not a regular file: an old page is replaced."""
        results = _results(folder)
        page = folder / "page.html"
        page.write_text("old")
        write_html_report(str(results), page)
        assert page.read_text().startswith("<!")
