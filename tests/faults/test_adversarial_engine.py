"""Hostile and careless user code against the engine's promises, class by class.

Whatever a metric or program raises (every builtin ``BaseException`` subclass, asyncio's
``CancelledError``, the user's own subclasses), however async code blocks the loop or
swallows its cancellation, whatever user code does to its arguments and to the engine's
clocks: every example gets exactly one result, a timeout holds, a real cancellation of
the run is still a cancellation, the measurements stay the engine's, and a run with fewer
results than examples never exits 0.

Real parts throughout: user files on disk, the Evaluator and its executors (the event
loop, threads, worker processes), the command line in a subprocess.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evaluator._call._results import Result
from evaluator._data._dataset import Example
from evaluator._pipeline import Evaluator
from tests._helpers import PROCESS, result_rows, write

ROOT = Path(__file__).resolve().parents[2]


def _kind(result: Result) -> str | None:
    return None if result.error is None else result.error.kind


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for a whole hypothesis test (an Evaluator lives in one loop)."""
    with asyncio.Runner() as loop_runner:
        yield loop_runner


_settings = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# -- 1. whatever user code raises --------------------------------------------------------

#: Every exception class the interpreter defines, and asyncio's cancellation.
BUILTIN = sorted(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)
USER = ["MyBase", "MyCancel", "MyInterrupt", "MyExit", "Unprintable"]
RAISABLE = [*BUILTIN, "CancelledError", *USER]

_RAISERS = """
import asyncio, builtins

class MyBase(BaseException): pass
class MyCancel(asyncio.CancelledError): pass
class MyInterrupt(KeyboardInterrupt): pass
class MyExit(SystemExit): pass
class Unprintable(BaseException):
    def __str__(self):
        raise RuntimeError("no text")

USER = {c.__name__: c for c in (MyBase, MyCancel, MyInterrupt, MyExit, Unprintable)}

def make(name):
    cls = USER.get(name) or getattr(builtins, name, None) or getattr(asyncio, name)
    for args in (("boom",), ("boom", [ValueError("inner")])):
        try:
            return cls(*args)
        except TypeError:
            pass
    return cls.__new__(cls)
"""

ASYNC_RAISERS = (
    _RAISERS
    + """
async def score(input, output, expected=None):
    name = input.get("raise")
    if input.get("later"):
        await asyncio.sleep(0)
    if name:
        raise make(name)
    return 1.0, {"feedback": "ok"}

async def run(artifact, input):
    name = input.get("raise")
    if input.get("later"):
        await asyncio.sleep(0)
    if name:
        raise make(name)
    return "out"
"""
)

SYNC_RAISERS = (
    _RAISERS
    + """
def score(input, output, expected=None):
    name = input.get("raise")
    if name:
        raise make(name)
    return 1.0, {"feedback": "ok"}

def run(artifact, input):
    name = input.get("raise")
    if name:
        raise make(name)
    return "out"
"""
)

_raises = st.lists(
    st.tuples(st.one_of(st.none(), st.sampled_from(RAISABLE)), st.booleans()),
    min_size=1,
    max_size=6,
)


def _check_raised(results: list[Result], plan: list[tuple[str | None, bool]], stage: str) -> None:
    """One result per example, in order: each raise is that example's error naming it."""
    assert [r.example_id for r in results] == list(range(len(plan)))
    kind = "program_error" if stage == "run" else "metric_error"
    for result, (name, _) in zip(results, plan, strict=True):
        if name is None:
            assert result.error is None, result.error
            continue
        assert result.error is not None, name
        # StopIteration and such out of a coroutine become RuntimeError (PEP 479).
        assert result.error.kind == kind, result.error
        function = "`run`" if stage == "run" else "`score`"
        assert result.error.message.startswith(function), result.error.message


class TestWhateverUserCodeRaises:
    @pytest.mark.parametrize("stage", ["score", "run"])
    def test_async_code_raising_any_exception_is_that_examples_error(
        self, tmp_path: Path, runner: asyncio.Runner, stage: str
    ) -> None:
        """An async metric or program raising any BaseException (CancelledError,
        KeyboardInterrupt, GeneratorExit, SystemExit, exception groups, user subclasses),
        at once or after a suspension, gives that example its error; the others are
        scored, the caller's task is not cancelled, and the Evaluator goes on."""
        path = write(tmp_path, "raisers.py", ASYNC_RAISERS)
        metric, program = (path, None) if stage == "score" else (tmp_path / "ok.py", path)
        write(
            tmp_path, "ok.py", "async def score(i, o, e=None):\n    return 1.0, {'feedback': ''}\n"
        )
        ev = Evaluator(metric, program, timeout=10)
        runner.run(ev.__aenter__())
        seen: list[int] = []
        try:

            @_settings
            @given(plan=_raises)
            def check(plan: list[tuple[str | None, bool]]) -> None:
                rows = [
                    {"id": i, "input": {"raise": name, "later": later}, "output": "o"}
                    for i, (name, later) in enumerate(plan)
                ]

                async def evaluate() -> tuple[list[Result], int]:
                    results = await ev.evaluate_many("a", rows)
                    task = asyncio.current_task()
                    assert task is not None
                    return results, task.cancelling()

                results, cancelling = runner.run(evaluate())
                assert cancelling == 0
                _check_raised(results, plan, stage)
                seen.append(len(plan))

            check()
        finally:
            runner.run(ev.__aexit__(None, None, None))
        assert sum(seen) >= 30

    @pytest.mark.parametrize("execution", ["thread", "inline", PROCESS])
    def test_sync_code_raising_any_exception_is_that_examples_error(
        self, tmp_path: Path, runner: asyncio.Runner, execution: str
    ) -> None:
        """In every sync executor, any BaseException from the metric is that example's
        error: a worker process that sees KeyboardInterrupt or a user BaseException
        stays alive (never worker_crash for its batch)."""
        metric = write(tmp_path, "raisers.py", SYNC_RAISERS)
        ev = Evaluator(metric, timeout=30, execution=execution, workers=1)
        runner.run(ev.__aenter__())
        try:

            @settings(
                max_examples=12,
                deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture],
            )
            @given(plan=_raises)
            def check(plan: list[tuple[str | None, bool]]) -> None:
                rows = [
                    {"id": i, "input": {"raise": name}, "output": "o"}
                    for i, (name, _) in enumerate(plan)
                ]
                results = runner.run(ev.evaluate_many(None, rows))
                _check_raised(results, plan, "score")

            check()
            stats = ev.statistics().metric
            if execution == "process":
                assert stats.crashes == 0
        finally:
            runner.run(ev.__aexit__(None, None, None))


# -- 2. a real cancellation is told apart -------------------------------------------------

CONVERTING = """
import asyncio

async def score(input, output, expected=None):
    mode = input["mode"]
    if mode == "quick":
        return 1.0, {"feedback": "quick"}
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        if mode == "convert":
            raise ValueError("turned the cancellation into an error")
        if mode == "interrupt":
            raise KeyboardInterrupt
        if mode == "return":
            return 1.0, {"feedback": "returned instead of stopping"}
        raise
    return 1.0, {"feedback": "slept"}
"""


class TestARealCancellationIsACancellation:
    @pytest.mark.parametrize("mode", ["plain", "convert", "interrupt", "return"])
    async def test_caller_cancelling_evaluate_many_is_not_an_example_error(
        self, tmp_path: Path, mode: str
    ) -> None:
        """The caller's own timeout around evaluate_many cancels it (TimeoutError), even
        when the metric turns the cancellation into an error, a KeyboardInterrupt or a
        value; nothing is left running and the Evaluator goes on."""
        metric = write(tmp_path, "metric.py", CONVERTING)
        async with Evaluator(metric, timeout=60) as ev:
            rows = [{"id": i, "input": {"mode": mode}, "output": "o"} for i in range(5)]
            started = time.perf_counter()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await ev.evaluate_many(None, rows)
            assert time.perf_counter() - started < 5  # a guard against a hang
            task = asyncio.current_task()
            assert task is not None and task.cancelling() == 0
            assert ev.statistics().metric.busy == 0
            (again,) = await ev.evaluate_many(
                None, [{"id": "x", "input": {"mode": "quick"}, "output": "o"}]
            )
            assert again.error is None
        assert asyncio.all_tasks() == {asyncio.current_task()}


# -- 3. async code that blocks the loop --------------------------------------------------

BLOCKERS = {
    "sleep": "time.sleep(HOLD)",
    "busy": "while time.perf_counter() < deadline: pass",
    "select": "select.select([], [], [], HOLD)",
    "event": "threading.Event().wait(HOLD)",
    "socket": "a, b = socket.socketpair()\n        a.settimeout(HOLD)\n        try:\n            a.recv(1)\n        except OSError:\n            pass\n        a.close()\n        b.close()",
}

BLOCKING = """
import asyncio, select, socket, threading, time

HOLD = {hold}

async def score(input, output, expected=None):
    if input["role"] == "victim":
        for _ in range(10):
            await asyncio.sleep(0.02)
        return 1.0, {{"feedback": "waited its turn"}}
    if input["role"] == "blocker":
        deadline = time.perf_counter() + HOLD
        {block}
        return 1.0, {{"feedback": "blocked"}}
    return 1.0, {{"feedback": "quick"}}
"""


@pytest.mark.slow
class TestAsyncCodeThatBlocksTheLoop:
    @pytest.mark.parametrize("how", list(BLOCKERS))
    async def test_blocking_past_the_timeout_is_a_timeout_naming_the_place(
        self, tmp_path: Path, how: str
    ) -> None:
        """An async metric that blocks the loop past its timeout (sleep, a busy loop,
        select, a thread event, a socket) gets metric_timeout saying it held the loop,
        with its file, line and code; calls that waited behind it are not charged for
        the time it held the loop (tolerances: timeout 0.4 s, held 1.0 s)."""
        source = BLOCKING.format(hold=1.0, block=BLOCKERS[how])
        metric = write(tmp_path, "metric.py", source)
        line = next(
            i
            for i, text in enumerate(source.splitlines(), 1)
            if "HOLD)" in text or "deadline: pass" in text
        )
        roles = ["victim", "victim", "blocker", "quick"]
        rows = [{"id": i, "input": {"role": r}, "output": "o"} for i, r in enumerate(roles)]
        async with Evaluator(metric, timeout=0.4) as ev:
            results = await ev.evaluate_many(None, rows)
            stats = ev.statistics().metric
        assert [_kind(r) for r in results] == [None, None, "metric_timeout", None]
        message = results[2].feedback
        assert "held the event loop" in message and "0.4 s timeout" in message
        if how != "socket":  # the socket's line is the recv below the timeout
            assert f"metric.py:{line}" in message, message
        assert stats.loop_blocks == 1

    async def test_blocking_within_the_timeout_is_counted_not_failed(self, tmp_path: Path) -> None:
        """A call that blocks the loop for less than its timeout is scored, and counted
        as a loop block in the executor's statistics."""
        metric = write(tmp_path, "metric.py", BLOCKING.format(hold=0.15, block=BLOCKERS["sleep"]))
        rows = [{"id": 0, "input": {"role": "blocker"}, "output": "o"}]
        async with Evaluator(metric, timeout=5) as ev:
            (result,) = await ev.evaluate_many(None, rows)
            assert ev.statistics().metric.loop_blocks == 1
        assert result.error is None


# -- 4. async code that swallows its cancellation ------------------------------------------

SWALLOWERS = """
import asyncio

WAKES = []
GIVE_UP = False  # set by the test to let the coroutines that ignore GeneratorExit go

async def score(input, output, expected=None):
    mode = input["mode"]
    if mode == "quick":
        return 1.0, {"feedback": "quick"}
    if mode == "late":
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)
            return 1.0, {"feedback": "returned late"}
    while True:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            WAKES.append(mode)
        except BaseException:
            if mode == "everything" and not GIVE_UP:
                WAKES.append(mode)
                continue
            raise
"""


@pytest.mark.slow
class TestAsyncCodeThatSwallowsItsCancellation:
    @pytest.mark.parametrize("mode", ["late", "forever", "everything"])
    async def test_it_is_timed_out_abandoned_and_stopped_at_close(
        self, tmp_path: Path, mode: str
    ) -> None:
        """A metric that swallows its cancellation (returns late, or never ends, even
        ignoring GeneratorExit) gets metric_timeout at its timeout; one that keeps going
        is abandoned (counted, reported) while the run goes on, and after close it is
        never resumed again and no task is left (timeout 0.3 s; guard 10 s)."""
        metric = write(tmp_path, f"metric_{mode}.py", SWALLOWERS)
        rows = [
            {"id": i, "input": {"mode": m}, "output": "o"}
            for i, m in enumerate([mode, "quick", mode, "quick"])
        ]
        started = time.perf_counter()
        async with Evaluator(metric, timeout=0.3) as ev:
            results = await ev.evaluate_many(None, rows)
            report = await ev.evaluate(None, rows[:1])
            stats = ev.statistics().metric
        assert time.perf_counter() - started < 10
        assert [_kind(r) for r in results] == ["metric_timeout", None, "metric_timeout", None]
        if mode == "late":
            assert stats.abandoned_tasks == 0
        else:
            assert "abandoned" in results[0].feedback
            assert stats.abandoned_tasks == 3 and report.abandoned_tasks == 3
        module: Any = sys.modules[ev.metric.module_name]
        wakes = len(module.WAKES)
        await asyncio.sleep(0.3)
        assert len(module.WAKES) == wakes  # never resumed after close
        assert asyncio.all_tasks() == {asyncio.current_task()}
        from evaluator._executors._async import _UNSTOPPABLE

        frozen = [c for c in _UNSTOPPABLE if c.cr_code.co_filename == str(metric)]
        assert len(frozen) == (3 if mode == "everything" else 0)
        module.GIVE_UP = True  # let them finish now, inside the test, not at exit
        for coro in frozen:
            coro.close()
            _UNSTOPPABLE.remove(coro)


# -- 5. each call gets its own copy of the example --------------------------------------

MUTATING_PROGRAM = """
import asyncio

def _mutate(artifact, input):
    seen = sorted(input)
    input["program"] = True
    input["nested"].append("program")
    artifact["shots"].append("program")
    return {"answer": "a", "seen": seen, "shots": len(artifact["shots"])}

def run(artifact, input):
    return _mutate(artifact, input)

async def arun(artifact, input):
    await asyncio.sleep(0)
    return _mutate(artifact, input)
"""

MUTATING_METRIC = """
import asyncio

def _mutate(input, output, expected):
    feedback = f"input={sorted(input)} nested={input['nested']} label={expected['label']}"
    good = expected["label"] == "B" and output["seen"] == ["nested", "q"] and output["shots"] == 2
    input["metric"] = True
    expected["label"] = "corrupted"
    output["answer"] = "corrupted"
    return (1.0 if good else 0.0), {"feedback": feedback}

def score(input, output, expected=None):
    return _mutate(input, output, expected)

async def ascore(input, output, expected=None):
    await asyncio.sleep(0)
    return _mutate(input, output, expected)
"""


class TestEachCallGetsItsOwnCopy:
    @pytest.mark.parametrize("execution", ["thread", "inline", "async"])
    async def test_mutations_reach_neither_the_caller_nor_the_next_call(
        self, tmp_path: Path, execution: str
    ) -> None:
        """In every executor that shares the engine's memory, a program that edits its
        input and artifact, and a metric that edits input, output and expected, change
        neither the caller's examples and artifact, nor what the metric sees of the
        program, nor the output recorded, nor the next evaluation."""
        asynchronous = execution == "async"
        program = write(
            tmp_path, "program.py", MUTATING_PROGRAM + ("\nrun = arun\n" if asynchronous else "")
        )
        metric = write(
            tmp_path, "metric.py", MUTATING_METRIC + ("\nscore = ascore\n" if asynchronous else "")
        )
        examples = [
            Example(id=i, input={"q": i, "nested": ["x"]}, expected={"label": "B"})
            for i in range(4)
        ]
        artifact = {"shots": ["one"]}
        async with Evaluator(
            metric, program, execution=execution, program_execution=execution, timeout=10
        ) as ev:
            first = await ev.evaluate_many(artifact, examples)
            second = await ev.evaluate_many(artifact, examples)
        assert [r.score for r in first + second] == [1.0] * 8, first[0].feedback
        assert all(r.output == {"answer": "a", "seen": ["nested", "q"], "shots": 2} for r in first)
        assert [e.input for e in examples] == [{"q": i, "nested": ["x"]} for i in range(4)]
        assert all(e.expected == {"label": "B"} for e in examples)
        assert artifact == {"shots": ["one"]}
        assert first[0].feedback == "input=['nested', 'q'] nested=['x'] label=B"


NESTED_MUTATING_METRIC = """
def score(input, output, expected=None):
    seen = (list(input["nested"]), list(expected["labels"]), list(output["items"]))
    input["nested"].append("metric")
    input["deep"]["k"].append(1)
    expected["labels"].append("corrupted")
    output["items"].append("corrupted")
    good = seen == (["x"], ["B"], ["o"])
    return (1.0 if good else 0.0), {"feedback": repr(seen)}
"""

#: Never names ``input`` in its code, and edits it through ``locals()``: introspection
#: makes every argument a private copy.
INTROSPECTING_METRIC = """
def score(input, output, expected=None):
    own = locals()
    mine = own[next(name for name in own if name.startswith("inp"))]
    seen = list(mine["nested"])
    mine["nested"].append("metric")
    return (1.0 if seen == ["x"] else 0.0), {"feedback": repr(seen)}
"""


class TestNestedDataIsCopiedToo:
    @pytest.mark.parametrize("execution", ["thread", "inline", "async"])
    async def test_nested_mutations_reach_neither_the_caller_nor_the_next_call(
        self, tmp_path: Path, execution: str
    ) -> None:
        """A metric that edits lists nested in its input, expected and output changes
        neither the caller's rows, nor the output recorded in the result, nor what the
        next evaluation of the same rows sees."""
        source = NESTED_MUTATING_METRIC
        if execution == "async":
            source = source.replace("def score", "async def score")
        metric = write(tmp_path, "metric.py", source)
        rows = [
            {
                "id": i,
                "input": {"nested": ["x"], "deep": {"k": []}},
                "expected": {"labels": ["B"]},
                "output": {"items": ["o"]},
            }
            for i in range(4)
        ]
        before = json.dumps(rows)
        async with Evaluator(metric, execution=execution, timeout=10) as ev:
            first = await ev.evaluate_many(None, rows)
            second = await ev.evaluate_many(None, rows)
        assert [r.score for r in first + second] == [1.0] * 8, first[0].feedback
        assert json.dumps(rows) == before
        assert all(r.output == {"items": ["o"]} for r in first + second)

    @pytest.mark.parametrize("execution", ["thread", "inline"])
    async def test_a_metric_reaching_its_input_through_locals_gets_a_copy(
        self, tmp_path: Path, execution: str
    ) -> None:
        """A metric whose code never names ``input`` but edits it through ``locals()``
        still edits only its own copy."""
        metric = write(tmp_path, "metric.py", INTROSPECTING_METRIC)
        examples = [Example(id=i, input={"nested": ["x"]}, output="a") for i in range(3)]
        async with Evaluator(metric, execution=execution, timeout=10) as ev:
            first = await ev.evaluate_many(None, examples)
            second = await ev.evaluate_many(None, examples)
        assert [r.score for r in first + second] == [1.0] * 6, first[0].feedback
        assert [e.input for e in examples] == [{"nested": ["x"]}] * 3


# -- 6. clocks user code patches -----------------------------------------------------------

CLOCK_PATCHER = """
import gc, sys, time

_real = {{n: getattr(time, n) for n in ("perf_counter_ns", "perf_counter", "monotonic_ns",
                                        "monotonic", "time", "time_ns")}}
_sleep = time.sleep
ENGINE = [
    "evaluator._call._calls", "evaluator._executors._threads", "evaluator._executors._async",
    "evaluator._executors._process._child", "evaluator._executors._process._pool",
    "evaluator._executors._process._queue", "evaluator._executors._process._executor",
]

def _zero_ns():
    return 0

def _zero():
    return 0.0

def patch(names):
    for name in names:
        setattr(time, name, _zero_ns if name.endswith("_ns") else _zero)
    for module in ENGINE:
        module = sys.modules.get(module)
        for attr in ("_clock", "perf_counter_ns"):
            if module is not None and hasattr(module, attr):
                setattr(module, attr, _zero_ns)

def restore():
    for name, fn in _real.items():
        setattr(time, name, fn)

# At import: every clock but the one asyncio's own loop reads (time.monotonic), which
# only the call itself patches (and restores), and the collector switched off.
patch(["perf_counter_ns", "perf_counter", "monotonic_ns", "time", "time_ns"])
gc.disable()
gc.freeze()

def _work():
    patch(list(_real))
    try:
        _sleep(0.15)
    finally:
        restore()
        patch(["perf_counter_ns", "perf_counter", "monotonic_ns", "time", "time_ns"])

{functions}
"""

SYNC_FUNCTIONS = """
def run(artifact, input):
    _work()
    return "done"

def score(input, output, expected=None):
    _work()
    return 1.0, {"feedback": "ok"}
"""

ASYNC_FUNCTIONS = """
async def run(artifact, input):
    _work()
    return "done"

async def score(input, output, expected=None):
    _work()
    return 1.0, {"feedback": "ok"}
"""


ENGINE_MODULES = (
    "evaluator._call._calls",
    "evaluator._executors._threads",
    "evaluator._executors._async",
    "evaluator._executors._process._pool",
    "evaluator._executors._process._queue",
    "evaluator._executors._process._executor",
)


@pytest.fixture
def restored_clocks() -> Iterator[None]:
    """Undo, after the test, what the user file patched in this process."""
    import gc

    names = ("perf_counter_ns", "perf_counter", "monotonic_ns", "monotonic", "time", "time_ns")
    saved = {n: getattr(time, n) for n in names}
    modules = {
        m: {
            a: getattr(sys.modules[m], a)
            for a in ("_clock", "perf_counter_ns")
            if hasattr(sys.modules[m], a)
        }
        for m in ENGINE_MODULES
        if m in sys.modules
    }
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(time, name, fn)
        for module, attrs in modules.items():
            for attr, value in attrs.items():
                setattr(sys.modules[module], attr, value)
        gc.unfreeze()
        gc.enable()


@pytest.mark.slow
class TestClocksUserCodePatches:
    @pytest.mark.parametrize("execution", ["thread", "inline", "async", PROCESS])
    @pytest.mark.usefixtures("restored_clocks")
    async def test_patched_clocks_change_no_measurement(
        self, tmp_path: Path, execution: str
    ) -> None:
        """A program and a metric that patch time.* and the engine's clock attributes
        to report no time passing, at import and during their calls, and switch the
        collector off, still get their real durations measured (each call sleeps
        150 ms: program duration and metric time >= 150 ms; guard < 5 s)."""
        functions = ASYNC_FUNCTIONS if execution == "async" else SYNC_FUNCTIONS
        source = CLOCK_PATCHER.format(functions=functions)
        program = write(tmp_path, "program.py", source)
        metric = write(tmp_path, "metric.py", source)
        rows = [{"id": i, "input": {}} for i in range(2)]
        async with Evaluator(
            metric, program, execution=execution, program_execution=execution, timeout=10
        ) as ev:
            results = await ev.evaluate_many("a", rows)
            report = await ev.evaluate("a", rows)
        for r in results:
            assert r.ok, r.error
            assert r.observation.duration_ms is not None
            assert 150 <= r.observation.duration_ms < 5000, r.observation
            assert r.metric_ms is not None and 150 <= r.metric_ms < 5000
        assert report.wall_s >= 0.3  # two examples, each 300 ms of sleeping calls


# -- 7. values that cannot cross to a worker -------------------------------------------------


class Unrebuildable:
    """Pickles in the engine; cannot be unpickled anywhere (``int("not a number")``)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        return (int, ("not a number",))


class TestValuesThatCannotCross:
    async def test_an_output_a_worker_cannot_rebuild_fails_only_its_example(
        self, tmp_path: Path
    ) -> None:
        """Outputs the metric's worker cannot rebuild fail their own examples with a
        clear message; their batch neighbours are scored; no worker crashes."""
        metric = write(
            tmp_path,
            "metric.py",
            "def score(i, o, e=None):\n    return 1.0, {'feedback': str(o)}\n",
        )
        rows: list[dict[str, Any]] = [
            {"id": i, "input": {}, "output": Unrebuildable(i) if i % 3 == 0 else f"plain {i}"}
            for i in range(9)
        ]
        async with Evaluator(metric, execution="process", workers=1, timeout=30) as ev:
            results = await ev.evaluate_many(None, rows)
            stats = ev.statistics().metric
        assert [_kind(r) for r in results] == ["metric_error", None, None] * 3
        assert "cannot be rebuilt in its worker process" in results[0].feedback
        assert results[1].feedback == "plain 1"
        assert stats.crashes == 0


# -- 8. the count check ---------------------------------------------------------------------

ASYNC_CANCEL_PROGRAM = """
import asyncio

async def run(artifact, input):
    if input["n"] % 40 == 7:
        raise asyncio.CancelledError()
    return "o"
"""


def _run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "evaluator", "run", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


class TestEveryExampleHasItsResult:
    def test_issue_program_raising_cancelled_error_loses_nothing(self, tmp_path: Path) -> None:
        """The issue's case: an async program raising CancelledError for some examples
        of 200; the run writes 200 results (those examples with program_error) and
        exits 0 with a complete count."""
        data = tmp_path / "data.jsonl"
        data.write_text(
            "".join(json.dumps({"id": i, "input": {"n": i}}) + "\n" for i in range(200))
        )
        program = write(tmp_path, "program.py", ASYNC_CANCEL_PROGRAM)
        metric = write(
            tmp_path, "metric.py", "def score(i, o):\n    return 1.0, {'feedback': ''}\n"
        )
        out = tmp_path / "out.jsonl"
        done = _run_cli(
            "--metric",
            str(metric),
            "--program",
            str(program),
            "--data",
            str(data),
            "--output",
            str(out),
            "--execution",
            "thread",
        )
        assert done.returncode == 0, done.stderr
        rows = result_rows(out)
        assert sorted(x["example_id"] for x in rows) == list(range(200))
        errors = [x for x in rows if x["error"] is not None]
        assert len(errors) == 5 and all(e["error"]["kind"] == "program_error" for e in errors)

    def test_a_run_with_fewer_results_than_examples_exits_1(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Were the engine ever to lose a batch of results, the command line would say so
        and exit 1, not 0 (the loss simulated by dropping one batch of the stream)."""
        from evaluator._cli import main
        from evaluator._pipeline._flow import ResultStream

        batches = ResultStream.batches

        async def lossy(self: ResultStream) -> Any:
            dropped = False
            async for batch in batches(self):
                if not dropped:
                    dropped = True
                    continue
                yield batch

        monkeypatch.setattr(ResultStream, "batches", lossy)
        data = tmp_path / "data.jsonl"
        data.write_text(
            "".join(json.dumps({"id": i, "input": {}, "output": "o"}) + "\n" for i in range(40))
        )
        metric = write(
            tmp_path, "metric.py", "def score(i, o):\n    return 1.0, {'feedback': ''}\n"
        )
        code = main(["run", "--metric", str(metric), "--data", str(data), "--execution", "inline"])
        err = capsys.readouterr().err
        assert code == 1
        assert "have no result" in err and "of 40 examples" in err and "--resume" in err

    def test_ctrl_c_with_an_async_metric_that_swallows_cancellation(self, tmp_path: Path) -> None:
        """Ctrl-C during a run whose async metric swallows every cancellation still stops
        the run promptly with exit 130 and the partial report (guard 30 s)."""
        data = tmp_path / "data.jsonl"
        modes = ["quick"] * 3 + ["forever"] * 17  # the contract check passes, then it hangs
        data.write_text(
            "".join(
                json.dumps({"id": i, "input": {"mode": m}, "output": "o"}) + "\n"
                for i, m in enumerate(modes)
            )
        )
        metric = write(tmp_path, "metric.py", SWALLOWERS)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [
            sys.executable,
            "-m",
            "evaluator",
            "run",
            "--metric",
            str(metric),
            "--data",
            str(data),
            "--timeout",
            "60",
        ]
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        try:
            deadline = time.monotonic() + 30
            assert proc.stdout is not None
            seen = ""
            while "Metric return value" not in seen and time.monotonic() < deadline:
                seen += proc.stdout.readline()
            time.sleep(0.3)  # the main run's calls are in flight
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, err
        assert "interrupted" in err


class _SubmitRaisesCancelled:
    """An executor with a bug: its submit raises CancelledError nobody requested."""

    kind = "thread"
    stage = "score"
    parallelism = 1
    backlog_s = 0.0
    idle = False

    async def submit(self, calls: Any, progress: Any = None) -> Any:
        raise asyncio.CancelledError

    def statistics(self) -> Any:
        return None


class TestTheFlowLosesNoChunk:
    async def test_a_stray_cancellation_inside_the_engine_is_every_examples_error(
        self, tmp_path: Path
    ) -> None:
        """Were an executor to raise a CancelledError nobody asked for, each example of
        its chunk would get a 'cancelled' error result saying so, and the run would go
        on: a task group drops a cancelled task silently, the flow must not."""
        metric = write(
            tmp_path, "metric.py", "def score(i, o):\n    return 1.0, {'feedback': ''}\n"
        )
        async with Evaluator(metric, execution="inline", timeout=10) as ev:
            flow = ev._flow
            real = flow.metric
            flow.metric = _SubmitRaisesCancelled()  # type: ignore[assignment]
            try:
                rows = [{"id": i, "input": {}, "output": "o"} for i in range(50)]
                results = await ev.evaluate_many(None, rows)
                streamed = [r async for r in ev.stream(None, rows)]
            finally:
                flow.metric = real
        assert [r.example_id for r in results] == list(range(50))
        assert len(streamed) == 50
        assert all(_kind(r) == "cancelled" for r in results + streamed)
        assert "not requested by the caller" in results[0].feedback


OBSERVATION_TAMPER = """
import msgspec
from evaluator._call._context import current

def _tamper():
    obs = current().observation
    for name, value in (("duration_ms", 0.001), ("cost_usd", 123.0), ("notes", ("forged",))):
        msgspec.structs.force_setattr(obs, name, value)
    return obs.duration_ms

def score(input, output, expected=None):
    return 1.0, {"feedback": "seen", "seen": _tamper()}

async def ascore(input, output, expected=None):
    return 1.0, {"feedback": "seen", "seen": _tamper()}
"""


class TestTheRecordedObservationIsTheEngines:
    @pytest.mark.parametrize("execution", ["thread", "inline", "async", PROCESS])
    async def test_forcing_the_context_observation_changes_only_a_copy(
        self, tmp_path: Path, execution: str
    ) -> None:
        """A metric that reaches past skynet.observation() to the call's context and
        force-sets its observation's fields changes its own copy only: the recorded
        observation keeps the program's measured time and cost, for every example."""
        suffix = "\nscore = ascore\n" if execution == "async" else ""
        metric = write(tmp_path, "metric.py", OBSERVATION_TAMPER + suffix)
        program = write(
            tmp_path,
            "program.py",
            "import time\ndef run(a, i):\n    time.sleep(0.02)\n    return 'o'\n",
        )
        rows = [{"id": i, "input": {}} for i in range(4)]
        async with Evaluator(
            metric, program, execution=execution, program_execution="thread", timeout=10
        ) as ev:
            results = await ev.evaluate_many("a", rows)
        for r in results:
            assert r.ok, r.error
            assert r.extra["seen"] == 0.001  # the forgery happened, on the copy
            assert r.observation.duration_ms is not None and r.observation.duration_ms >= 20
            assert r.observation.cost_usd == 0.0 and r.observation.notes == ()
