"""Checking the output path before a run: each way it cannot be written is one clear line."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from evaluator._exceptions import ConfigError, OutputPathError
from evaluator._outpath import check_output_path


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Path]:
    """A fresh mount point; the test mounts a tmpfs there (needs root), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / "mnt"
    point.mkdir()
    yield point
    subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


def _mount(point: Path, options: str) -> None:
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
        capture_output=True,
        check=False,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")


def fill(path: Path) -> None:
    """Write ``path`` until its file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            try:
                os.write(fd, b"x" * 4096)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return
    finally:
        os.close(fd)


class TestCheckOutputPath:
    def test_new_file_in_new_directories_is_fine(self, tmp_path: Path) -> None:
        """Missing parents are created by the writer: the check passes and creates nothing."""
        check = check_output_path(tmp_path / "a" / "b" / "r.jsonl")
        assert not check.exists and check.free_bytes is not None and check.free_bytes > 0
        assert not (tmp_path / "a").exists()

    @pytest.mark.parametrize(
        ("make", "words"),
        [
            (lambda p: p, "is a directory"),
            (lambda p: Path("/dev/null"), "not a regular file"),
            (lambda p: p / "file.txt" / "r.jsonl", "is a file, not a directory"),
            (lambda p: p / "file.txt" / "deeper" / "r.jsonl", "is a file, not a directory"),
            (lambda p: p / ("x" * 300 + ".jsonl"), "longer than"),
            (lambda p: Path("/proc/none/r.jsonl"), "virtual file system"),
            (lambda p: "", "empty"),
        ],
    )
    def test_refusals(self, tmp_path: Path, make: object, words: str) -> None:
        """Each unwritable path is refused with what is wrong; it is a ConfigError for --output."""
        (tmp_path / "file.txt").write_text("x")
        path = make(tmp_path)  # type: ignore[operator]
        with pytest.raises(OutputPathError, match=words) as info:
            check_output_path(path)
        assert isinstance(info.value, ConfigError) and info.value.option == "output"
        assert info.value.render("--output").startswith("--output ")

    def test_read_only_file_system(self, mount: Path) -> None:
        """A path on a read-only mount is refused before the run."""
        _mount(mount, "ro,size=64k")
        with pytest.raises(OutputPathError, match="read-only file system"):
            check_output_path(mount / "r.jsonl")

    def test_full_disk_is_refused_and_low_space_noted(self, mount: Path) -> None:
        """A full disk is refused; one nearly full is a note."""
        _mount(mount, "size=64k")
        check = check_output_path(mount / "r.jsonl")
        assert check.free_bytes is not None and check.free_bytes <= 64 * 1024
        assert check.notes and "MiB free" in check.notes[0]
        fill(mount / "filler")
        with pytest.raises(OutputPathError, match="is full"):
            check_output_path(mount / "r.jsonl")
