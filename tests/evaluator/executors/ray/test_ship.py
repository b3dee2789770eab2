"""What the Ray executor ships to the nodes: the engine's packages and the user's folder."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from evaluator._call._loader import load_function
from evaluator._exceptions import ConfigError
from evaluator._executors._ray._boot import FOLDER_PREFIX, remove_orphans
from evaluator._executors._ray._ship import MAX_FOLDER_BYTES, PACKAGES, bundle

METRIC = "def score(input, output, expected=None):\n    return 1.0, {'feedback': ''}\n"


def _names(data: bytes) -> set[str]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return set(archive.namelist())


def test_the_folder_goes_without_version_control_or_caches(tmp_path: Path) -> None:
    """The user's file, its siblings and data go; .git, __pycache__, .venv do not; the
    engine's packages always go."""
    (tmp_path / "metric.py").write_text(METRIC)
    (tmp_path / "helpers.py").write_text("X = 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "words.txt").write_text("a b c\n")
    for skipped in (".git", "__pycache__", ".venv"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "junk").write_text("x")
    fn = load_function(tmp_path / "metric.py", "score")
    names = _names(bundle(fn, with_folder=True))
    user = {n for n in names if n.startswith("user/")}
    assert user == {"user/metric.py", "user/helpers.py", "user/data/words.txt"}
    for package in PACKAGES:
        assert f"packages/{package}/__init__.py" in names
    assert "packages/evaluator/_executors/_ray/_boot.py" in names
    assert not any(n.endswith(".pyc") for n in names)
    assert not any(n.startswith("user/") for n in _names(bundle(fn, with_folder=False)))


def test_a_folder_too_large_to_ship_is_refused(tmp_path: Path) -> None:
    """A folder over the limit is a ConfigError naming it and the way out."""
    (tmp_path / "metric.py").write_text(METRIC)
    with (tmp_path / "dataset.bin").open("wb") as big:
        big.truncate(MAX_FOLDER_BYTES + 1)  # sparse: no disk used
    fn = load_function(tmp_path / "metric.py", "score")
    with pytest.raises(ConfigError) as caught:
        bundle(fn, with_folder=True)
    message = str(caught.value)
    assert str(tmp_path) in message and "more than 100 MB" in message
    assert "folder of their own" in message


def test_a_gone_actors_folder_is_removed_and_no_other(tmp_path: Path) -> None:
    """A node actor killed before it could close leaves its folder; the next boot removes
    the folders whose actor process is gone, never a live one's nor anything else."""
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(child.stdout)  # reaped: no such process now
    names = [
        f"{FOLDER_PREFIX}{dead}-abc",  # a killed actor's
        f"{FOLDER_PREFIX}{os.getpid()}-def",  # a running actor's
        f"{FOLDER_PREFIX}old_name",  # not named by a pid: not ours to judge
        "someone-else",
    ]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_text("x")
    assert remove_orphans(str(tmp_path)) == [str(tmp_path / names[0])]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names[1:])
    assert remove_orphans(str(tmp_path / "missing")) == []


def test_a_killed_actor_not_yet_reaped_is_gone_too(tmp_path: Path) -> None:
    """A zombie (killed, its parent has not reaped it yet: a removed node's actor under
    its raylet) holds a pid but runs nothing: its folder goes."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        stat = Path(f"/proc/{child.pid}/stat")
        if not stat.exists():
            pytest.skip("needs /proc (Linux) to tell a zombie")
        while stat.read_bytes().rpartition(b")")[2].split()[0] != b"Z":
            os.sched_yield()  # until the child has exited, unreaped
        folder = tmp_path / f"{FOLDER_PREFIX}{child.pid}-abc"
        folder.mkdir()
        assert remove_orphans(str(tmp_path)) == [str(folder)]
    finally:
        child.wait()
