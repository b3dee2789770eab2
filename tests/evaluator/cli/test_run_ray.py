"""`skynet-eval run --execution ray` on the shipped CPU example, as a user runs it.

Once on a local instance the engine starts and stops itself, once against a cluster
started with `ray start --head` (stopped by signalling that process, the one this test
started), and once against a head whose Ray Client server dies as it starts, as it did
now and then on its own (issue 14). Everything on 127.0.0.1.

Each run and each head has a Ray temp dir of its own (``RAY_TMPDIR``: its sessions, its
logs, its address record) and a marker in its environment, which every process it starts
inherits: the tests count and read only those, never Ray's processes or ``/tmp/ray`` of
the whole machine, where anything else may run Ray.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

# A real Ray instance or cluster (the mark implies slow).
pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None, reason="needs Ray (the extra `ray`)"
    ),
]

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ["--metric", "examples/cpu/metric.py", "--data", "examples/cpu/data.jsonl"]


#: The environment variable that marks the processes a test started (its value: the
#: test's Ray temp dir).
MARKER = "SKYNET_TEST_RAY_RUN"


@contextlib.contextmanager
def _ray_temp() -> Iterator[Path]:
    """A Ray temp dir of one run or head, removed after. Short, under the system's temp
    dir: Ray's sockets live below it and a Unix socket's path is at most 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix=f"ray-{uuid.uuid4().hex[:6]}-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _env(ray_temp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray process on loopback
    env["RAY_AUTH_MODE"] = "token"  # the default of `ray start`, explicit for an address
    # Ray Client's proxy gives the server it starts per client 30 s to come up; on a
    # loaded two-core machine the import of Ray alone can take that long.
    env["RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S"] = "120"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["RAY_TMPDIR"] = str(ray_temp)
    env[MARKER] = str(ray_temp)
    return env


def _started_by(ray_temp: Path) -> set[int]:
    """The processes still running that the run or head of ``ray_temp`` started (its
    marker is in their environment), wherever they were reparented. Processes of other
    users cannot be read, and are not ours."""
    found = set()
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(MARKER) == str(ray_temp) and proc.status() != "zombie":
                found.add(proc.info["pid"])
    return found


def _ray_logs(ray_temp: Path) -> str:
    """The ends of the Ray logs that tell why a run hung: the Ray Client servers' (the
    proxy's and each client's) and the newest workers' (the node actors'), of the latest
    session under ``ray_temp`` (the run's own, or its head's)."""
    logs = ray_temp / "ray" / "session_latest" / "logs"
    if not logs.is_dir():
        return f"(no Ray logs under {ray_temp})"
    workers = sorted(logs.glob("worker-*.err"), key=lambda p: p.stat().st_mtime)[-3:]
    parts = [f"Ray logs: {logs.resolve()}"]
    for path in [*sorted(logs.glob("ray_client_server*.err")), *workers]:
        text = path.read_text(errors="replace").strip()
        parts.append(f"--- {path.name}:\n{text[-2000:] or '(empty)'}")
    return "\n".join(parts)


def _kill_session(pid: int) -> None:
    """SIGKILL to every process of the session ``pid`` leads (none left: nothing to do)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _run(
    *args: str, ray_temp: Path, logs: Path | None = None, guard: float = 100.0
) -> subprocess.CompletedProcess[str]:
    """The command in a session of its own, with ``ray_temp`` as its Ray temp dir: a run
    that outlasts its guard (100 s, inside pytest's 120 s) is killed with every process
    it started, so that nothing of it is left to be counted by the tests after this one,
    and fails with what it printed: the Python stacks of all its threads (faulthandler,
    on SIGABRT) and Ray's logs (those under ``logs``: its head's, default its own)."""
    argv = [sys.executable, "-m", "evaluator", "run", *EXAMPLE, "--execution", "ray", "--json"]
    proc = subprocess.Popen(
        [*argv, *args],
        cwd=ROOT,
        env={**_env(ray_temp), "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=guard)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGABRT)  # faulthandler prints every thread's stack
        try:
            stdout, stderr = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            _kill_session(proc.pid)
            stdout, stderr = proc.communicate()
        _kill_session(proc.pid)  # what it started, if any is left
        raise AssertionError(
            f"the run did not end within {guard:g} s:\n{stderr[-6000:]}\n"
            + _ray_logs(logs or ray_temp)
        ) from None
    finally:
        if proc.poll() is None:
            _kill_session(proc.pid)
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _check_report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["n"] == 60 and report["ok"] == 60
    assert 0.9 < report["mean_score"] < 0.95
    cluster = report["cluster"]
    assert cluster["nodes"] == 1 and cluster["actors_lost"] == 0
    assert sum(cluster["calls_by_node"].values()) == 60
    return dict(cluster)


def test_run_on_a_local_instance() -> None:
    """Without --ray-address the engine starts a local instance (its session in the
    run's own Ray temp dir), runs, and stops it: none of the processes it started is
    left."""
    with _ray_temp() as ray_temp:
        done = _run(ray_temp=ray_temp)
        _check_report(done)
        assert "Traceback" not in done.stderr
        assert list((ray_temp / "ray").glob("session_2*")), "the run's Ray used another dir"
        deadline = time.monotonic() + 30  # a guard against a hang: Ray's daemons exit
        while _started_by(ray_temp) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _started_by(ray_temp) == set()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _head(folder: Path, env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """A cluster from `ray start --head --block` on free ports (``env`` gives it its Ray
    temp dir), its log in ``folder``: its address and its Ray Client address; stopped
    after."""
    port, client = _free_port(), _free_port()
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block"]
    argv += ["--num-cpus", "2", "--node-ip-address", "127.0.0.1", "--port", str(port)]
    argv += ["--ray-client-server-port", str(client)]
    argv += ["--include-dashboard", "false", "--disable-usage-stats"]
    argv += ["--object-store-memory", str(80 * 1024 * 1024)]
    log = folder / "ray-start.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120  # a guard against a hang
        while "block forever" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "ray start --head did not start"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}", f"ray://127.0.0.1:{client}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """A cluster from `ray start --head --block` on free ports: its address, its Ray
    Client address and its Ray temp dir. Its processes load :data:`_CRASH_NEXT_SERVER`,
    which does nothing until a test arms it (:data:`ARMED`, a file in the temp dir)."""
    folder = tmp_path_factory.mktemp("head")
    hooks = folder / "hooks"
    hooks.mkdir()
    with _ray_temp() as ray_temp:
        code = _CRASH_NEXT_SERVER.format(
            armed=str(ray_temp / ARMED), marker=str(ray_temp / CRASHED)
        )
        (hooks / "sitecustomize.py").write_text(textwrap.dedent(code))
        env = _env(ray_temp)
        env["PYTHONPATH"] = os.pathsep.join([str(hooks), env["PYTHONPATH"]])
        with _head(folder, env) as addresses:
            yield (*addresses, ray_temp)


ARMED, CRASHED = "crash-the-next-server", "crashed"

#: Loaded by every Python process of the head: once armed, in its Ray Client proxy, the
#: child of the next fork (the server for the next client, before it executes anything)
#: dies of a segmentation fault, as those children did now and then; the arm is used up.
#: The crashing fork is told in the parent (``before``), so other children run no more
#: Python than they would anyway.
_CRASH_NEXT_SERVER = """
import os, signal

_forks = []

def _before():
    crash = os.path.exists({armed!r})
    if crash:
        os.remove({armed!r})
        open({marker!r}, "w").close()
    _forks.append(crash)

def _in_parent():
    _forks[-1] = False

def _in_child():
    if _forks[-1]:
        os.kill(os.getpid(), signal.SIGSEGV)

with open("/proc/self/cmdline", "rb") as cmdline:
    if b"--mode=proxy" in cmdline.read().split(b"\\0"):
        os.register_at_fork(before=_before, after_in_parent=_in_parent, after_in_child=_in_child)
"""


@pytest.mark.timeout(240)
def test_run_when_the_ray_client_server_dies_as_it_starts(head: tuple[str, str, Path]) -> None:
    """Through Ray Client, a server for the connection that dies as the head's proxy
    starts it (the proxy answers "Starting Ray client server failed") costs a warning and
    a second server, not a hang: the engine connects again and the run completes. (It
    hung until the proxy gave up on the dead server, 120 s here, then failed; this run
    starts two servers, so its guard is 150 s, on two loaded cores 81 s.)"""
    pytest.importorskip("grpc")  # Ray Client: the extra ray[client]
    _, client, head_temp = head
    (head_temp / ARMED).touch()
    with _ray_temp() as run_temp:
        done = _run("--ray-address", client, ray_temp=run_temp, logs=head_temp, guard=150)
    assert (head_temp / CRASHED).exists(), "the proxy's server was not made to crash"
    assert not (head_temp / ARMED).exists()
    _check_report(done)
    assert "connecting again (2 of 3)" in done.stderr, done.stderr[-3000:]


@pytest.mark.parametrize("form", ["HOST:PORT", "ray://HOST:PORT"])
def test_run_against_ray_start_head(head: tuple[str, str, Path], form: str) -> None:
    """--ray-address runs the example on a cluster that `ray start --head` started,
    shipping the example's folder to it, directly or through Ray Client; the cluster
    keeps running afterwards."""
    if form.startswith("ray://"):
        pytest.importorskip("grpc")  # Ray Client: the extra ray[client]
    with _ray_temp() as run_temp:
        address = head[1] if form.startswith("ray://") else head[0]
        done = _run("--ray-address", address, ray_temp=run_temp, logs=head[2])
    cluster = _check_report(done)
    assert [node.split()[0] for node in cluster["calls_by_node"]] == ["127.0.0.1"]
