"""Ray stays optional: importing the engine never imports it, and without it "ray" says
how to install it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

METRIC = "def score(input, output, expected=None):\n    return 1.0, {'feedback': ''}\n"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )


def test_the_engine_never_imports_ray(tmp_path: Path) -> None:
    """`import evaluator`, the factory and the Ray executor's own modules leave Ray
    unimported; so does building an Evaluator whose metric runs on "ray"."""
    (tmp_path / "metric.py").write_text(METRIC)
    done = _python(
        f"""
        import sys, evaluator
        from evaluator._executors import _factory
        from evaluator._executors._ray import _executor, _members, _actor, _boot, _ship
        from evaluator._cli import _main, _options
        evaluator.Evaluator({str(tmp_path / "metric.py")!r}, execution="ray")
        bad = sorted(m for m in sys.modules if m.split(".")[0] == "ray")
        print(bad)
        sys.exit(1 if bad else 0)
        """
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_without_ray_the_error_says_how_to_install_it(tmp_path: Path) -> None:
    """Opening a "ray" executor where Ray cannot be imported is a ConfigError naming
    `execution` and the extra to install, not an ImportError."""
    (tmp_path / "metric.py").write_text(METRIC)
    done = _python(
        f"""
        import asyncio, sys
        sys.modules["ray"] = None  # as if Ray were not installed
        from evaluator import ConfigError, Evaluator

        async def main():
            async with Evaluator({str(tmp_path / "metric.py")!r}, execution="ray"):
                pass

        try:
            asyncio.run(main())
        except ConfigError as exc:
            print(exc.option, "|", exc)
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("execution | `execution` is 'ray' but Ray is not installed")
    assert "pip install 'skynet-eval[ray]'" in done.stdout
