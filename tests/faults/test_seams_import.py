"""Where the engine's process meets the user's files: the import, its signals, its names.

Three classes of hostile user code, each tried in several forms (issue 24, items 3, 4, 9):

- **What an import does to the engine's process.** The engine imports the metric and the
  program itself, even when they run in workers: a non-daemonic thread started at import,
  a ``SIG_IGN`` for the stop signals, a ``chdir``, a swapped ``sys.modules`` entry must not
  keep the command from ending, deafen Ctrl-C, lose the dataset or move the cache.
- **What user code inherits from a worker.** A metric's own processes (a
  ``multiprocessing.Pool``, a subprocess) start with the default signal dispositions, and
  none outlives the executor, a timeout kill or a worker's end.
- **Modules named like the engine's packages or standard modules**, in the working
  directory or beside the metric or the program: the engine's imports never resolve to
  them, a user file that imports one is told to rename it (at "Metric file" or "Program
  file"), and a worker that dies while starting says what it last wrote.

Real parts: user files on disk, the command line in a subprocess (the installed console
script's own form, so the process ends as ``skynet-eval`` does), worker processes.
Descendants are this test's own, counted with psutil.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from evaluator._call._loader import load_metric, load_program
from evaluator._exceptions import ContractError
from evaluator._pipeline import Evaluator
from tests._helpers import result_rows

ROOT = Path(__file__).resolve().parents[2]
#: Every run of the command line is stopped after this long: a hang fails, not blocks.
GUARD_S = 120

#: Names that are the engine's (packages) or the standard library's (modules), and one
#: that is neither, for contrast.
ENGINE = ["reward", "evaluator", "llm_client", "skynet"]
STDLIB = ["types", "random", "signal", "json"]
RESERVED = STDLIB + ENGINE

#: The console script pip writes for ``skynet-eval`` (its file name is what makes the
#: process the command line itself).
_SCRIPT = """\
import sys
from evaluator._cli import main
if __name__ == '__main__':
    sys.exit(main())
"""

OK_METRIC = """
def score(input, output, expected=None):
    return 1.0, {"feedback": "ok"}
"""

OK_PROGRAM = """
def run(artifact, input):
    return "out"
"""


def _write(path: Path, *sources: str) -> Path:
    """``sources``, each dedented, one after the other, in the file ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(textwrap.dedent(source) for source in sources))
    return path


def _data(folder: Path, n: int = 5, **input: Any) -> Path:
    rows = [{"id": i, "input": {"n": i, **input}, "output": "o"} for i in range(n)]
    return _write(folder / "data.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def _shadow(folder: Path, name: str, form: str) -> None:
    """A module ``name`` in ``folder`` that fails loudly if anything ever imports it."""
    body = f"raise SystemExit('the user\\'s {name} was imported')\n"
    if form == "file":
        _write(folder / f"{name}.py", body)
    else:
        _write(folder / name / "__init__.py", body)


def _cli_argv(tmp: Path) -> list[str]:
    script = tmp / "bin" / "skynet-eval"
    if not script.exists():
        _write(script, _SCRIPT)
    return [sys.executable, str(script)]


def _run(
    tmp: Path, metric: Path, program: Path, *extra: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """``run`` of ``metric`` and ``program`` on ``data.jsonl`` in ``cwd``."""
    args = ["run", "--metric", str(metric), "--program", str(program), "--data", "data.jsonl"]
    return _cli(tmp, *args, *extra, cwd=cwd)


def _cli(
    tmp: Path, *args: str, cwd: Path, timeout: float = GUARD_S
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*_cli_argv(tmp), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


# -- 9. user modules named like the engine's packages or standard modules ---------------


@pytest.mark.slow
class TestShadowingModules:
    @pytest.mark.parametrize("form", ["file", "package"])
    def test_the_engine_never_imports_a_users_module(self, tmp_path: Path, form: str) -> None:
        """Modules named like the standard modules and the engine's packages (every one
        of RESERVED at once, each failing loudly with its name if imported), in the
        working directory, beside the metric and beside the program, are never
        imported: ``run`` with worker processes and a REWARD_SPEC (so the engine imports
        ``reward`` after the metric) completes every example, exit 0."""
        work, mdir, pdir = tmp_path / "work", tmp_path / "m", tmp_path / "p"
        for folder in (work, mdir, pdir):
            for name in RESERVED:
                _shadow(folder, name, form)
        metric = _write(
            mdir / "metric.py",
            """
            REWARD_SPEC = {"weights": {"accuracy": 1, "speed": 0, "cost": 0}, "accuracy": {},
                           "speed": {"reference": 1000}, "cost": {"reference": 0.01}}

            def score(input, output, expected=None):
                return 1.0, {"feedback": "ok", "scores": {"accuracy": 1.0}}
            """,
        )
        program = _write(pdir / "program.py", OK_PROGRAM)
        _data(work)
        out = work / "out.jsonl"
        done = _run(
            tmp_path,
            metric,
            program,
            "--output",
            str(out),
            "--execution",
            "process",
            "--program-execution",
            "process",
            cwd=work,
        )
        assert done.returncode == 0, done.stderr
        assert "was imported" not in done.stdout + done.stderr
        results = result_rows(out)
        assert len(results) == 5 and all(r["error"] is None for r in results)

    @pytest.mark.parametrize("form", ["file", "package"])
    @pytest.mark.parametrize("name", RESERVED)
    @pytest.mark.parametrize("role", ["metric", "program"])
    def test_a_file_importing_a_shadowed_name_is_told_to_rename(
        self, tmp_path: Path, name: str, form: str, role: str
    ) -> None:
        """A user file that imports a reserved name its own folder shadows fails at its
        own file step ("Metric file" / "Program file"), at the import's line, naming the
        module and saying to rename it; the shadowing module is never run."""
        _shadow(tmp_path, name, form)
        body = OK_METRIC if role == "metric" else OK_PROGRAM
        path = _write(tmp_path / f"{role}.py", f"x = 1\nimport {name}\n{textwrap.dedent(body)}")
        load = load_metric if role == "metric" else load_program
        with pytest.raises(ContractError) as info:
            load(path)
        err = info.value
        assert err.step == ("Metric file" if role == "metric" else "Program file")
        assert err.line == 2 and err.path == str(path.resolve())
        there = f"{name}.py" if form == "file" else f"{name}/"
        assert there in err.message and "rename" in err.message

    def test_the_users_own_modules_still_import(self, tmp_path: Path) -> None:
        """Siblings with names of their own import as outside the engine, and the engine's
        ``skynet`` and ``reward`` are the engine's for the user too."""
        _write(tmp_path / "helpers_x.py", "VALUE = 'mine'\n")
        _write(tmp_path / "pkg_x" / "__init__.py", "VALUE = 'pkg'\n")
        path = _write(
            tmp_path / "metric.py",
            """
            import helpers_x, pkg_x, reward, skynet
            def score(input, output, expected=None):
                return 1.0, {"feedback": helpers_x.VALUE + pkg_x.VALUE}
            """,
        )
        fn = load_metric(path)
        assert fn.module is not None
        assert fn.module.helpers_x.VALUE == "mine" and fn.module.pkg_x.VALUE == "pkg"
        assert Path(fn.module.reward.__file__).is_relative_to(ROOT / "reward")
        assert Path(fn.module.skynet.__file__).is_relative_to(ROOT / "skynet")

    def test_a_shadowing_folder_without_init_is_not_a_module(self, tmp_path: Path) -> None:
        """A folder named like a standard module that holds no ``__init__.py`` (data, say)
        does not shadow it, inside the engine as outside: the import is the standard one."""
        _write(tmp_path / "json" / "rows.txt", "data\n")
        path = _write(tmp_path / "metric.py", "import json\n" + textwrap.dedent(OK_METRIC))
        fn = load_metric(path)
        assert fn.module is not None and fn.module.json is json

    @pytest.mark.parametrize("command", ["run", "check"])
    def test_program_errors_say_program_file(self, tmp_path: Path, command: str) -> None:
        """A program that cannot be imported is reported at "Program file", never
        "Metric file"; ``check`` has no program, so its own error is the metric's."""
        metric = _write(tmp_path / "metric.py", OK_METRIC)
        program = _write(tmp_path / "program.py", "def run(artifact, input)\n    return 1\n")
        _data(tmp_path)
        if command == "check":
            metric = program  # a metric file that does not parse
            done = _cli(tmp_path, "check", str(metric), "--data", "data.jsonl", cwd=tmp_path)
            assert done.returncode == 1 and "Metric file" in done.stdout
            return
        done = _run(tmp_path, metric, program, cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        assert "Program file" in done.stderr and "Metric file" not in done.stderr

    async def test_a_worker_dying_at_start_shows_its_last_stderr_lines(
        self, tmp_path: Path
    ) -> None:
        """A metric whose import kills the worker processes (and only them) after writing
        a line to stderr: every call fails as worker_crash, and the message quotes that
        line and says the workers die while starting."""
        path = _write(
            tmp_path / "metric.py",
            """
            import os, sys
            if os.getpid() != ENGINE_PID:  # a worker, not the engine (nor pytest's own)
                sys.stderr.write("the licence server is unreachable (code 7)\\n")
                sys.stderr.flush()
                os.kill(os.getpid(), 9)
            """.replace("ENGINE_PID", str(os.getpid())),
            OK_METRIC,
        )
        async with Evaluator(path, execution="process", workers=1, timeout=30) as ev:
            results = await ev.evaluate_many(None, [{"id": 0, "input": {}, "output": "o"}])
        (result,) = results
        assert result.error is not None and result.error.kind == "worker_crash"
        assert "die while starting" in result.error.message
        assert "the licence server is unreachable (code 7)" in result.error.message


# -- 3. what an import does to the engine's process -------------------------------------

THREAD_AT_IMPORT = {
    "thread": "threading.Thread(target=time.sleep, args=(3600,), name='heartbeat').start()",
    "timer": "threading.Timer(3600, print).start()",
    "waiting": "threading.Thread(target=threading.Event().wait, name='waiter').start()",
}


@pytest.mark.slow
class TestImportInTheEngine:
    @pytest.mark.parametrize("execution", ["process", "thread"])
    @pytest.mark.parametrize("kind", sorted(THREAD_AT_IMPORT))
    @pytest.mark.parametrize("command", ["run", "check"])
    def test_a_thread_started_at_import_does_not_keep_the_command_alive(
        self, tmp_path: Path, command: str, kind: str, execution: str
    ) -> None:
        """A metric that starts a non-daemonic thread when imported: ``run`` and ``check``
        end (guard 120 s) with their exit code 0 and their output whole, and say they did
        not wait for the thread."""
        metric = _write(
            tmp_path / "metric.py",
            f"import threading, time\n{THREAD_AT_IMPORT[kind]}\n"
            + "EXECUTION = "
            + repr(execution)
            + "\n"
            + textwrap.dedent(OK_METRIC),
        )
        _data(tmp_path)
        if command == "run":
            args = ["run", "--metric", str(metric), "--data", "data.jsonl"]
        else:
            args = ["check", str(metric), "--data", "data.jsonl"]
        done = _cli(tmp_path, *args, "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        if command == "run":
            assert report["n"] == 5 and report["ok"] == 5
        else:
            assert report["ok"] is True
        assert "not waiting for 1 thread(s)" in done.stderr

    @pytest.mark.parametrize(
        ("stop", "disposition", "code"),
        [
            (signal.SIGINT, "signal.SIG_IGN", 130),
            (signal.SIGINT, "lambda *a: None", 130),
            (signal.SIGTERM, "signal.SIG_IGN", 143),
            (signal.SIGTERM, "signal.SIG_DFL", 143),
        ],
        ids=["SIGINT-ignored", "SIGINT-handled", "SIGTERM-ignored", "SIGTERM-default"],
    )
    def test_a_stop_signal_set_at_import_still_stops_the_run(
        self, tmp_path: Path, stop: signal.Signals, disposition: str, code: int
    ) -> None:
        """A metric that sets its own disposition for SIGINT or SIGTERM when imported:
        the signal still stops the run cleanly, with exit 128 + its number and the note
        of what was kept (guard 60 s after the signal)."""
        metric = _write(
            tmp_path / "metric.py",
            f"""
            import signal, time
            signal.signal(signal.{stop.name}, {disposition})

            def score(input, output, expected=None):
                if input["n"] >= 3:
                    time.sleep(120)  # the run is stopped while these run
                return 1.0, {{"feedback": "ok"}}
            """,
        )
        _data(tmp_path, n=8)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [*_cli_argv(tmp_path), "run", "--metric", str(metric), "--data", "data.jsonl"]
        argv += ["--execution", "process", "--timeout", "300"]
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + GUARD_S
            seen = ""
            while "Metric return value" not in seen and time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                seen += line
            assert "Metric return value" in seen, seen
            proc.send_signal(stop)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == code, err
        assert "interrupted" in err

    @pytest.mark.parametrize("execution", ["process", "thread", "inline"])
    @pytest.mark.parametrize("where", ["root", "elsewhere", "metric folder"])
    def test_a_chdir_at_import_loses_neither_the_dataset_nor_the_cache(
        self, tmp_path: Path, where: str, execution: str
    ) -> None:
        """A metric that changes the working directory when imported: a run given a
        relative ``--data`` and ``--cache`` reads every example (the dataset is read again
        after the contract check) and makes its cache where it was told, not in the
        folder the metric moved to."""
        work, mdir, elsewhere = tmp_path / "work", tmp_path / "m", tmp_path / "elsewhere"
        elsewhere.mkdir()
        target = {"root": "/", "elsewhere": str(elsewhere), "metric folder": str(mdir)}[where]
        metric = _write(
            mdir / "metric.py",
            f"import os\nos.chdir({target!r})\n" + textwrap.dedent(OK_METRIC),
        )
        _data(work, n=12)
        done = _cli(
            tmp_path,
            "run",
            "--metric",
            str(metric),
            "--data",
            "data.jsonl",
            "--cache",
            "cache",
            "--execution",
            execution,
            "--json",
            cwd=work,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["n"] == 12
        assert (work / "cache").is_dir() and any((work / "cache").iterdir())
        for other in (elsewhere, mdir):
            assert not (other / "cache").exists()

    def test_sys_modules_swapped_at_import_are_put_back(self, tmp_path: Path) -> None:
        """A metric that replaces the engine's ``reward`` and deletes one of its modules
        from ``sys.modules`` when imported: the engine's entries are back after the
        import, and a stand-in with an engine's name that is not the engine's is gone."""
        import evaluator._call._contract as contract
        import reward

        path = _write(
            tmp_path / "metric.py",
            """
            import sys, types
            sys.modules["reward"] = types.SimpleNamespace(parse_spec=None)
            sys.modules.pop("evaluator._call._contract", None)
            sys.modules["skynet.fake_part"] = types.ModuleType("skynet.fake_part")
            """,
            OK_METRIC,
        )
        load_metric(path)
        assert sys.modules["reward"] is reward
        assert sys.modules["evaluator._call._contract"] is contract
        assert "skynet.fake_part" not in sys.modules


# -- 4. what user code inherits from a worker -------------------------------------------

POOL_METRIC = """
import multiprocessing, os, signal, subprocess, sys, time

_KEPT = []

def _square(x):
    return x * x

def _dispositions():
    return [
        signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
    ]

CHILD = (
    "import signal, sys; "
    "ok = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL "
    "and signal.getsignal(signal.SIGINT) is signal.default_int_handler; "
    "sys.exit(0 if ok else 3)"
)
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]

def score(input, output, expected=None):
    mode = input["mode"]
    if mode == "exit":
        os._exit(3)
    if mode.startswith("pool-"):
        method = mode[5:]
        # A fresh interpreter (spawn, forkserver) cannot import the user's module by the
        # engine's name for it: it maps a builtin.
        task = _square if method == "fork" else abs
        with multiprocessing.get_context(method).Pool(2) as pool:
            squares = pool.map(task, [-2, 3])  # the with-block ends it: terminate()
        assert squares == ([4, 9] if method == "fork" else [2, 3])
    elif mode == "left-open":  # processes it never ends: a pool, a sleeper
        _KEPT.append(multiprocessing.get_context("fork").Pool(1))
        _KEPT.append(subprocess.Popen(SLEEPER))
    elif mode == "hang":  # a child, then past the timeout: the worker is killed
        _KEPT.append(subprocess.Popen(SLEEPER))
        time.sleep(600)
    child = subprocess.run([sys.executable, "-c", CHILD], check=False).returncode
    return 1.0, {"feedback": mode, "child": child, "signals": _dispositions()}
"""

#: Runs the process executor on POOL_METRIC in a process that is a child subreaper, so
#: that what the metric's processes leave behind (orphans, which would otherwise go to
#: init) stays its descendants and is counted. Prints one JSON object.
HELPER = """
import asyncio, ctypes, json, sys
import psutil
from evaluator._call._calls import ScoreCall
from evaluator._executors._process._executor import ProcessExecutor
from evaluator._call._loader import load_function

ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
metric, fork_server, timeout, modes = sys.argv[1:5]
modes = modes.split(",")

def alive(words=""):
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and words in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found

def still(procs):
    _, left = psutil.wait_procs(procs, timeout=10)
    return [p.pid for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

async def until(ex, ready):
    for _ in range(3000):
        if ready(ex.statistics()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(ex.statistics())

async def main():
    fn = load_function(metric, "score")
    report = {}
    on = fork_server == "1"
    async with ProcessExecutor(
        fn, "score", timeout=float(timeout), workers=1, fork_server=on
    ) as ex:
        # Two crashes: the worker that runs next is the fork server's (if there is one).
        await until(ex, lambda s: s.spare_ready)
        for i in range(2):
            await ex.submit([ScoreCall(100 + i, f"crash{i}", {"mode": "exit"}, "o", None)])
            await until(ex, lambda s: s.spare_ready)
        calls = [ScoreCall(i, f"ex{i}", {"mode": m}, "o", None) for i, m in enumerate(modes)]
        outs = await ex.submit(calls)
        report["kinds"] = [o.error.kind if o.error else "ok" for o in outs]
        report["extra"] = [dict(o.value.extra) if o.value else None for o in outs]
        report["forked"] = ex.statistics().workers_forked
        report["sleepers_while_open"] = still(alive("time.sleep(600)"))
    report["left"] = still(alive())
    print(json.dumps(report))

asyncio.run(main())
"""


def _helper(tmp: Path, *, fork_server: bool, timeout: float, modes: list[str]) -> Any:
    metric = _write(tmp / "metric.py", POOL_METRIC)
    helper = _write(tmp / "helper.py", HELPER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, str(helper), str(metric), "1" if fork_server else "0"]
    done = subprocess.run(
        [*argv, str(timeout), ",".join(modes)],
        capture_output=True,
        text=True,
        env=env,
        timeout=GUARD_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")
@pytest.mark.process
class TestWhatUserCodeInherits:
    @pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
    def test_a_pool_and_a_subprocess_in_a_metric_behave_and_end(
        self, tmp_path: Path, fork_server: bool
    ) -> None:
        """In a worker process (forked by the fork server, or spawned), a metric's
        ``multiprocessing.Pool`` (fork, spawn and forkserver contexts) ends at its
        ``with`` without a spurious timeout; the metric and the subprocess it starts see
        SIGINT and SIGTERM at their defaults; and once the executor is closed nothing the
        metric started (a pool and a sleeper it left running) is left."""
        modes = ["pool-fork", "pool-spawn", "pool-forkserver", "left-open", "pool-fork"]
        report = _helper(tmp_path, fork_server=fork_server, timeout=60, modes=modes)
        assert report["kinds"] == ["ok"] * len(modes)
        assert (report["forked"] > 0) is fork_server
        for extra in report["extra"]:
            assert extra["child"] == 0
            assert extra["signals"] == [True, True]
        assert report["left"] == []

    @pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "spawned"])
    def test_a_timeout_kill_takes_the_metrics_children(
        self, tmp_path: Path, fork_server: bool
    ) -> None:
        """A metric that starts a child process and then hangs past its timeout: the call
        is a metric_timeout, the next call runs, and the child dies with the killed
        worker (its process group) while the executor is still open."""
        report = _helper(tmp_path, fork_server=fork_server, timeout=1.0, modes=["hang", "x"])
        assert report["kinds"] == ["metric_timeout", "ok"]
        assert report["sleepers_while_open"] == []
        assert report["left"] == []
