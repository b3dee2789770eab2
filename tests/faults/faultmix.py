"""The fault mix shared by ``tests/faults/test_fault_mix.py`` and ``benchmarks/bench_faults.py``.

One program file and one metric file misbehave on purpose, each example in one known way.
The fault of an example is a deterministic function of its id (``schedule[i % period]``,
the schedule a seeded shuffle of per-period counts), so the expected error kind of every
example is known before the run. The program passes the fault on in its output only when
the artifact says ``{"faults": true}``: the same files and examples with
``{"faults": false}`` are the fault-free reference run.

Judge faults go through ``skynet.llm`` to real simulators on 127.0.0.1: one clean
simulator and one per fault with that fault at rate 1, behind a small router that picks
the simulator by a ``[fault:j_...]`` tag in the request. Everything a model call sees is
real HTTP on loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import textwrap
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from evaluator._call._results import ERROR_KINDS, Result
from evaluator._models import Models
from llm_client import ModelConfig, Simulator, SimulatorConfig

__all__ = [
    "BENCH_PLAN",
    "CI_PLAN",
    "FAULTS",
    "JudgeFaults",
    "Leaks",
    "check_results",
    "expected_counts",
    "make_rows",
    "schedule",
    "write_files",
]

MEMORY_LIMIT_MB = 512


@dataclass(frozen=True)
class Fault:
    """What an example does wrong, the error kind it must get, and words of its message."""

    kind: str | None  # None: the example must be ok
    words: tuple[str, ...] = ()
    needs_process: bool = False  # crashes the process it runs in: process executor only


FAULTS: dict[str, Fault] = {
    "ok": Fault(None),
    "ok_judge": Fault(None),  # a judge call that succeeds
    "m_print": Fault(None),  # prints to stdout and stderr, then scores normally
    "m_raise": Fault("metric_error", ("ValueError", "metric failed on purpose")),
    "m_hang": Fault("metric_timeout", ("timeout",)),
    "m_exit": Fault("worker_crash", ("exited with code 3",), needs_process=True),
    "m_segv": Fault("worker_crash", ("SIGSEGV",), needs_process=True),
    "m_memory": Fault(
        "worker_crash", (f"memory limit of {MEMORY_LIMIT_MB} MB exceeded",), needs_process=True
    ),
    "inv_bare": Fault("invalid_return", ("Metric return value", "not a pair")),
    "inv_info_str": Fault("invalid_return", ("Metric return value", "not a dict")),
    "inv_no_feedback": Fault("invalid_return", ("Metric return value", "'feedback'")),
    "inv_str_score": Fault("invalid_return", ("Metric return value", "score is a str")),
    "inv_named_str": Fault("invalid_return", ("Metric return value", "named score")),
    "inv_bool": Fault("invalid_return", ("Metric return value", "bool")),
    "inv_nan": Fault("invalid_return", ("Metric return value", "NaN")),
    "p_raise": Fault("program_error", ("RuntimeError", "program failed on purpose")),
    "p_hang": Fault("program_timeout", ("timeout",)),
    "j_429": Fault("llm_error", ("429",)),
    "j_500": Fault("llm_error", ("500",)),
    "j_503": Fault("llm_error", ("503",)),
    "j_timeout": Fault("llm_error", ("timed out",)),
    "j_malformed": Fault("llm_error", ("malformed",)),
    "j_drop": Fault("llm_error", ("connection dropped",)),
}

# Per 100 examples: every fault at least once; few hangs (each costs a timeout).
CI_PLAN: dict[str, int] = {
    "ok": 50,
    "ok_judge": 8,
    "m_print": 3,
    "m_raise": 3,
    "m_hang": 1,
    "m_exit": 2,
    "m_segv": 2,
    "m_memory": 1,
    "inv_bare": 2,
    "inv_info_str": 2,
    "inv_no_feedback": 2,
    "inv_str_score": 2,
    "inv_named_str": 2,
    "inv_bool": 2,
    "inv_nan": 2,
    "p_raise": 3,
    "p_hang": 1,
    "j_429": 2,
    "j_500": 2,
    "j_503": 2,
    "j_timeout": 2,
    "j_malformed": 2,
    "j_drop": 2,
}
assert sum(CI_PLAN.values()) == 100

# Per 1,000 examples, for the benchmark: about 20 % faults.
BENCH_PLAN: dict[str, int] = {
    "ok": 760,
    "ok_judge": 60,
    "m_print": 10,
    "m_raise": 20,
    "m_hang": 2,
    "m_exit": 8,
    "m_segv": 8,
    "m_memory": 4,
    "inv_bare": 10,
    "inv_info_str": 10,
    "inv_no_feedback": 10,
    "inv_str_score": 10,
    "inv_named_str": 10,
    "inv_bool": 10,
    "inv_nan": 10,
    "p_raise": 20,
    "p_hang": 2,
    "j_429": 6,
    "j_500": 6,
    "j_503": 6,
    "j_timeout": 6,
    "j_malformed": 6,
    "j_drop": 6,
}
assert sum(BENCH_PLAN.values()) == 1000

PROGRAM = """
import time

def run(artifact, input):
    fault = input["fault"]
    if not artifact["faults"] and fault not in ("ok", "ok_judge", "m_print"):
        fault = "ok"  # the fault-free reference run: only the faults are off
    i = input["i"]
    if fault == "p_raise":
        raise RuntimeError(f"program failed on purpose on {i}")
    if fault == "p_hang":
        time.sleep(artifact["hang_s"])
    answer = str(i) if i % 3 else "wrong"
    return {"answer": answer, "fault": fault, "hang_s": artifact["hang_s"]}
"""

METRIC = """
import ctypes, math, os, sys, time
from skynet import llm

def score(input, output, expected=None):
    fault = output["fault"]
    i = input["i"]
    base = (i % 7) / 7.0
    good = 1.0 if output["answer"] == expected["answer"] else 0.0
    value = round(0.5 * base + 0.5 * good, 6)
    info = {"feedback": f"example {i}: base {base:.3f}", "scores": {"base": base, "good": good}}
    if fault == "ok":
        return value, info
    if fault == "ok_judge" or fault.startswith("j_"):
        tag = "" if fault == "ok_judge" else f"[fault:{fault}] "
        reply = llm(
            "Answer PASS or FAIL.",
            input=f"{tag}\\nAnswer: {output['answer']}\\nExpected: {expected['answer']}",
        )
        return (1.0 if reply.startswith("PASS") else 0.0), {"feedback": reply}
    if fault == "m_print":
        print(f"stdout noise from example {i}")
        print(f"stderr noise from example {i}", file=sys.stderr)
        return value, info
    if fault == "m_raise":
        raise ValueError(f"metric failed on purpose on {i}")
    if fault == "m_hang":
        time.sleep(output["hang_s"])
        return value, info
    if fault == "m_exit":
        os._exit(3)
    if fault == "m_segv":
        ctypes.string_at(0)
    if fault == "m_memory":
        block = bytearray(64 * 1024 * 1024 * 1024)
        return float(len(block)), info
    if fault == "inv_bare":
        return value
    if fault == "inv_info_str":
        return value, "Close."
    if fault == "inv_no_feedback":
        return value, {}
    if fault == "inv_str_score":
        return str(value), info
    if fault == "inv_named_str":
        return value, {"feedback": "ok", "scores": {"a": "high"}}
    if fault == "inv_bool":
        return True, info
    if fault == "inv_nan":
        return math.nan, info
    raise AssertionError(f"unknown fault {fault!r}")
"""


def write_files(folder: Path) -> tuple[Path, Path]:
    """Write the program and metric files into ``folder``; return their paths."""
    program = folder / "fault_program.py"
    metric = folder / "fault_metric.py"
    program.write_text(textwrap.dedent(PROGRAM))
    metric.write_text(textwrap.dedent(METRIC))
    return program, metric


def schedule(plan: dict[str, int], *, seed: int = 7, process: bool = True) -> list[str]:
    """The faults of one period, shuffled with ``seed``; crash faults dropped (made ok)
    unless the run uses worker processes."""
    kinds: list[str] = []
    for name, count in plan.items():
        if not process and FAULTS[name].needs_process:
            name = "ok"
        kinds.extend([name] * count)
    random.Random(seed).shuffle(kinds)
    return kinds


def fault_of(example_id: str, period: Sequence[str]) -> str:
    """The fault of an example: a deterministic function of its id ``exNNNNN``."""
    return period[int(example_id[2:]) % len(period)]


def make_rows(n: int, period: Sequence[str]) -> list[dict[str, Any]]:
    """``n`` examples ``ex00000 ..``; each input carries its fault (a function of the id)."""
    rows = []
    for i in range(n):
        example_id = f"ex{i:05d}"
        rows.append(
            {
                "id": example_id,
                "input": {"i": i, "fault": fault_of(example_id, period)},
                "expected": {"answer": str(i)},
            }
        )
    return rows


def expected_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Error kind -> how many examples must get it ("ok" for the ok ones)."""
    counts: Counter[str] = Counter()
    for row in rows:
        counts[FAULTS[row["input"]["fault"]].kind or "ok"] += 1
    return dict(counts)


def check_results(
    rows: Sequence[dict[str, Any]],
    results: Sequence[Result],
    clean: Sequence[Result] | None = None,
) -> list[str]:
    """Every way ``results`` break the fault-mix guarantees, as readable lines (empty: none).

    Exactly one result per example; each fault labelled with its kind (one of
    ``ERROR_KINDS``) and a message that says what happened; each ok example with the
    same score, named scores and feedback as in the fault-free run ``clean``.
    """
    problems: list[str] = []
    ids = [r.example_id for r in results]
    counts = Counter(ids)
    want = [row["id"] for row in rows]
    dupes = sorted(k for k, v in counts.items() if v > 1)
    missing = sorted(set(want) - set(counts))
    extra = sorted(set(counts) - set(want))
    if dupes:
        problems.append(f"{len(dupes)} example(s) with more than one result: {dupes[:5]}")
    if missing:
        problems.append(f"{len(missing)} example(s) without a result: {missing[:5]}")
    if extra:
        problems.append(f"{len(extra)} result(s) for unknown ids: {extra[:5]}")
    by_id = {r.example_id: r for r in results}
    reference = {r.example_id: r for r in clean} if clean is not None else {}
    for row in rows:
        result = by_id.get(row["id"])
        if result is None:
            continue
        name = row["input"]["fault"]
        fault = FAULTS[name]
        got = result.error.kind if result.error is not None else None
        if got is not None and got not in ERROR_KINDS:
            problems.append(f"{row['id']} ({name}): kind {got!r} is not in ERROR_KINDS")
        if got != fault.kind:
            message = result.error.message if result.error is not None else result.feedback
            problems.append(
                f"{row['id']} ({name}): expected {fault.kind or 'ok'}, got {got or 'ok'}: "
                f"{message[:300]!r}"
            )
            continue
        if result.error is not None:
            for word in fault.words:
                if word not in result.error.message:
                    problems.append(
                        f"{row['id']} ({name}): the {got} message does not say {word!r}: "
                        f"{result.error.message[:300]!r}"
                    )
            if result.feedback != result.error.message:
                problems.append(f"{row['id']} ({name}): the feedback is not the error message")
            continue
        ref = reference.get(row["id"])
        if clean is not None and ref is None:
            problems.append(f"{row['id']} ({name}): no result in the fault-free run")
        elif ref is not None and (
            ref.error is not None
            or (result.score, result.scores, result.feedback)
            != (ref.score, ref.scores, ref.feedback)
        ):
            problems.append(
                f"{row['id']} ({name}): ok but differs from the fault-free run: "
                f"{(result.score, result.scores, result.feedback)!r} vs "
                f"{(ref.score, ref.scores, ref.feedback, ref.error)!r}"
            )
    return problems


# -- judge faults -------------------------------------------------------------------------

_SIMULATED: dict[str | None, dict[str, Any]] = {
    None: {},
    "j_429": {"rate_limit_rate": 1.0},
    "j_500": {"error_500_rate": 1.0},
    "j_503": {"error_503_rate": 1.0},
    "j_timeout": {"slow_rate": 1.0, "slow_ms": 5_000.0},
    "j_malformed": {"malformed_rate": 1.0},
    "j_drop": {"drop_rate": 1.0},
}
_TAG = re.compile(rb"\[fault:(j_[a-z0-9]+)\]")
_PASSED_HEADERS = ("retry-after", "retry-after-ms", "x-ratelimit-")


class JudgeFaults:
    """Simulators on 127.0.0.1 behind a router: a request tagged ``[fault:j_xxx]`` goes
    to the simulator that always answers with that fault, any other to a clean one.

    A dropped connection upstream is passed on as a dropped connection.
    """

    def __init__(self) -> None:
        self._sims: dict[str | None, Simulator] = {}
        self._stack = contextlib.AsyncExitStack()
        self._session: Any = None
        self._runner: Any = None
        self.port = 0
        self.routed: Counter[str] = Counter()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def model(self, **options: Any) -> ModelConfig:
        """The judge model behind the router; one attempt, a short timeout by default (1 s:
        a j_timeout reply never comes, and an answered call on a loaded machine, four
        test workers on 2 cores, has taken past 0.3 s)."""
        options.setdefault("api_key_env", None)
        options.setdefault("timeout", 1.0)
        options.setdefault("max_retries", 0)
        options.setdefault("price_input", 0.15)
        options.setdefault("price_output", 0.6)
        return ModelConfig(model="judge-sim", base_url=self.base_url, **options)

    def models(self, **options: Any) -> Models:
        return Models(metric=self.model(**options))

    async def __aenter__(self) -> JudgeFaults:
        import aiohttp
        from aiohttp import web

        await self._stack.__aenter__()
        try:
            for name, config in _SIMULATED.items():
                sim = Simulator(SimulatorConfig(seed=1, **config))
                self._sims[name] = await self._stack.enter_async_context(sim)
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None), trust_env=False
            )
            self._stack.push_async_callback(self._session.close)
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._route)
            self._runner = web.AppRunner(
                app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5
            )
            await self._runner.setup()
            self._stack.push_async_callback(self._runner.cleanup)
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = int(self._runner.addresses[0][1])
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.aclose()

    async def _route(self, request: Any) -> Any:
        import aiohttp
        from aiohttp import web

        body = await request.read()
        match = _TAG.search(body)
        name = match.group(1).decode() if match else None
        self.routed[name or "clean"] += 1
        sim = self._sims[name]
        headers = {"Content-Type": "application/json"}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        try:
            async with self._session.post(
                sim.base_url + "/chat/completions", data=body, headers=headers
            ) as upstream:
                data = await upstream.read()
                passed = {
                    k: v
                    for k, v in upstream.headers.items()
                    if k.lower().startswith(_PASSED_HEADERS)
                }
                return web.Response(
                    status=upstream.status,
                    body=data,
                    headers=passed,
                    content_type="application/json",
                )
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionError):
            # The simulator dropped the connection: drop ours too.
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError from None


# -- leaks ----------------------------------------------------------------------------------


@dataclass
class Leaks:
    """What a run left behind: child processes, threads and asyncio tasks of ours.

    Take a snapshot with :meth:`before` (inside the loop) and call :meth:`after` once
    everything is closed. The loop's own default-executor threads (``asyncio_N``, used
    by ``getaddrinfo`` and ``to_thread``) belong to the loop and end with it.
    """

    threads: set[int] = field(default_factory=set)
    children: set[int] = field(default_factory=set)

    def before(self) -> Leaks:
        self.threads = {t.ident or 0 for t in threading.enumerate()}
        self.children = {p.pid for p in psutil.Process().children(recursive=True)}
        return self

    def processes(self) -> list[psutil.Process]:
        return [p for p in psutil.Process().children(recursive=True) if p.pid not in self.children]

    async def after(self, *, thread_grace_s: float = 0.0) -> list[str]:
        """What remains; waits up to ``thread_grace_s`` for abandoned threads to end."""
        problems: list[str] = []
        for p in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                problems.append(f"child process {p.pid} {p.status()} {p.cmdline()[:3]}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + thread_grace_s
        while True:
            threads = [
                t
                for t in threading.enumerate()
                if (t.ident or 0) not in self.threads
                and not t.name.startswith("asyncio_")
                and t.is_alive()
            ]
            if not threads or loop.time() >= deadline:
                break
            await asyncio.sleep(0.05)  # abandoned threads end on their own: poll, bounded
        problems += [f"thread {t.name!r} still alive" for t in threads]
        current = asyncio.current_task()
        problems += [
            f"task {t.get_name()} {t.get_coro()!r} still pending"
            for t in asyncio.all_tasks()
            if t is not current and not t.done()
        ]
        return problems


def async_metric_source() -> str:
    """The same metric as ``async def``, awaiting ``skynet.allm`` and ``asyncio.sleep``."""
    source = textwrap.dedent(METRIC)
    source = source.replace("from skynet import llm", "import asyncio\nfrom skynet import allm")
    source = source.replace("def score(", "async def score(")
    source = source.replace("reply = llm(", "reply = await allm(")
    return source.replace("time.sleep(output", "await asyncio.sleep(output")
