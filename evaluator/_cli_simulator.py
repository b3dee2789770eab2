"""``skynet-eval simulator``: serve the OpenAI-compatible simulator on 127.0.0.1 until Ctrl-C.

Prints one line, ``simulator serving at http://127.0.0.1:PORT/v1``, once it is listening
(so a script can read the port when ``--port 0`` picks one), and a summary of what it saw
when it stops (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any

__all__ = ["add_parser"]

_MODEL_FIELDS = {"latency_ms": float, "jitter_ms": float, "noise": float, "reasoning_tokens": int}


def _model_spec(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` or ``NAME:latency_ms=50,noise=0.1`` -> (name, settings)."""
    name, _, rest = text.partition(":")
    if not name:
        raise argparse.ArgumentTypeError(f"--model needs a name, got {text!r}")
    settings: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in _MODEL_FIELDS:
            raise argparse.ArgumentTypeError(
                f"--model {text!r}: expected NAME:key=value,... with keys "
                f"{', '.join(_MODEL_FIELDS)}; got {item!r}"
            )
        try:
            settings[key] = _MODEL_FIELDS[key](value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--model {text!r}: {key} must be a number, got {value!r}"
            ) from None
    return name, settings


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulator",
        help="serve a local OpenAI-compatible model simulator (for tests and examples)",
        description=__doc__,
    )
    p.add_argument("--port", type=int, default=8765, help="TCP port; 0 picks a free one")
    p.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    p.add_argument("--seed", type=int, default=0, help="seed of latency jitter and faults")
    p.add_argument("--latency-ms", type=float, default=0.0, help="fixed latency per reply")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="uniform extra latency 0..J")
    p.add_argument("--rpm", type=float, default=None, help="requests per minute limit")
    p.add_argument("--tpm", type=float, default=None, help="tokens per minute limit")
    p.add_argument(
        "--window", type=float, default=60.0, help="sliding window of the limits, seconds"
    )
    for kind, what in (
        ("error-500", "HTTP 500"),
        ("error-503", "HTTP 503"),
        ("rate-limit", "injected 429 (apart from --rpm/--tpm)"),
        ("insufficient-quota", "429 insufficient_quota"),
        ("slow", "replies delayed by --slow-ms"),
        ("malformed", "malformed 200 bodies"),
        ("drop", "dropped connections"),
    ):
        p.add_argument(f"--{kind}-rate", type=float, default=0.0, help=f"share of {what}")
    p.add_argument("--slow-ms", type=float, default=5000.0, help="delay of a slow reply")
    p.add_argument(
        "--pass-rate", type=float, default=0.5, help="share of PASS for hashed judge verdicts"
    )
    p.add_argument(
        "--model",
        dest="models",
        action="append",
        type=_model_spec,
        default=[],
        metavar="NAME[:latency_ms=..,jitter_ms=..,noise=..,reasoning_tokens=..]",
        help="serve this model (repeatable); when given, other model names get 404",
    )
    p.add_argument("--api-key", default=None, help="require this bearer key (default: none)")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from llm_client import ModelConfigError, ModelSettings, Simulator, SimulatorConfig

    try:
        config = SimulatorConfig(
            host=args.host,
            port=args.port,
            seed=args.seed,
            latency_ms=args.latency_ms,
            jitter_ms=args.jitter_ms,
            rpm=args.rpm,
            tpm=args.tpm,
            window_s=args.window,
            error_500_rate=args.error_500_rate,
            error_503_rate=args.error_503_rate,
            rate_limit_rate=args.rate_limit_rate,
            insufficient_quota_rate=args.insufficient_quota_rate,
            slow_rate=args.slow_rate,
            slow_ms=args.slow_ms,
            malformed_rate=args.malformed_rate,
            drop_rate=args.drop_rate,
            pass_rate=args.pass_rate,
            models={name: ModelSettings(**kw) for name, kw in args.models},
            api_key=args.api_key,
        )
    except ModelConfigError as exc:
        print(f"skynet-eval simulator: error: {exc}", file=sys.stderr)
        return 2

    async def serve() -> Simulator:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        async with Simulator(config) as sim:
            print(f"simulator serving at {sim.base_url}", flush=True)
            await stop.wait()
        return sim

    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        runner = asyncio.run
    try:
        sim = runner(serve())
    except OSError as exc:
        print(f"skynet-eval simulator: cannot listen: {exc}", file=sys.stderr)
        return 1
    stats = sim.statistics()
    faults = ", ".join(f"{k} {v}" for k, v in stats.faults.items() if v) or "none"
    print(
        f"stopped: {stats.requests} requests, {stats.served} served, "
        f"{stats.rate_limited} rate-limited, faults: {faults}",
        flush=True,
    )
    return 0
