"""Test setup shared by every test: no network but loopback."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
from typing import Any

import pytest

# Optional integrations must never reach out either.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault(
    "DSPY_CACHEDIR", os.path.join(os.environ.get("TMPDIR", "/tmp"), "skynet-dspy-cache")
)
os.environ.pop("OPENAI_API_KEY", None)
# Bytecode is cached, even where the environment says not to (CI images set
# PYTHONDONTWRITEBYTECODE): else each of the four workers rewrites the asserts of every
# test module again (11 s of CPU each), and every process a test starts (a command, a
# worker, a Ray node) compiles the engine from source again. Set before any test module
# is imported and before the workers start, which inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# A suite started in the background of a script inherits SIGINT ignored, and so would
# every command the tests start (an ignored signal survives exec): the Ctrl-C tests
# would wait for a stop that cannot come. Ctrl-C acts as in a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Ray (the "ray" executor's tests): the driver and every node on loopback; read when Ray
# is imported, so set before any test module can import it.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _is_loopback(host: Any) -> bool:
    if isinstance(host, bytes):
        host = host.decode()
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _check(address: Any) -> None:
    if isinstance(address, tuple) and address and not _is_loopback(address[0]):
        raise ConnectionRefusedError(f"tests may not reach {address[0]!r}: only loopback")


def _guarded_connect(self: Any, address: Any) -> None:
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _check(address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: Any, address: Any) -> int:
    if self.family in (socket.AF_INET, socket.AF_INET6):
        _check(address)
    return _real_connect_ex(self, address)


def _guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    if host is not None and not _is_loopback(host):
        raise socket.gaierror(f"tests may not resolve {host!r}: only loopback")
    return _real_getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
socket.getaddrinfo = _guarded_getaddrinfo


# Marks that put a test out of the developer loop (`pytest -m "not slow"`) as well.
IMPLY_SLOW = ("process", "ray", "browser")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked ``process``, ``ray`` or ``browser`` is ``slow`` too (before ``-m``
    selects). The benchmarks run first (see :data:`FIRST`); the order is otherwise
    unchanged."""
    items.sort(key=lambda item: not item.nodeid.startswith(FIRST))
    for item in items:
        if not item.get_closest_marker("slow") and any(
            item.get_closest_marker(name) for name in IMPLY_SLOW
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_resource_tracker_left() -> Any:
    """A test that starts processes through ``multiprocessing`` (a spawn context) also
    starts its resource tracker, a child of this process for the rest of the session:
    stop it after the test, so that the tests that check this process leaves no child
    behind (the executors', the pipeline's, the cancellations') see only their own."""
    yield
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    if getattr(tracker, "_pid", None) is not None:
        tracker._stop()  # type: ignore[attr-defined]  # private: no stub


@pytest.fixture(autouse=True, scope="session")
def _runs_folder(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`skynet-eval run` without --output keeps its results under runs/: in tests, under
    a temporary folder of this session (child processes inherit it), never the checkout."""
    folder = tmp_path_factory.mktemp("runs")
    before = os.environ.get("SKYNET_EVAL_RUNS_DIR")
    os.environ["SKYNET_EVAL_RUNS_DIR"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("SKYNET_EVAL_RUNS_DIR", None)
    else:
        os.environ["SKYNET_EVAL_RUNS_DIR"] = before


class _Opens:
    """The ``open`` audit events of one path, while a test watches it. An audit hook
    cannot be removed, so one hook serves every test and records only when asked."""

    hooked = False
    watched: tuple[str, list[str]] | None = None

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        watched = cls.watched
        if (
            event == "open"
            and watched is not None
            and isinstance(args[0], (str, os.PathLike))
            and os.fspath(args[0]) == watched[0]
        ):
            watched[1].append(str(args[1]))


@pytest.fixture
def opens_of() -> Any:
    """``opens_of(path)``: a list that gets the mode of every open of ``path`` from then
    until the test ends (the path as the code under test names it)."""
    if not _Opens.hooked:
        sys.addaudithook(_Opens.hook)
        _Opens.hooked = True

    def watch(path: os.PathLike[str] | str) -> list[str]:
        seen: list[str] = []
        _Opens.watched = (os.fspath(path), seen)
        return seen

    yield watch
    _Opens.watched = None


# -- how the xdist workers share the suite (addopts: -n 4 --dist loadscope) ---------------

#: Modules run whole by one worker: their tests share a module fixture that costs seconds
#: to start (a Ray cluster or head, a Chromium), which a worker would otherwise start
#: again for every few tests it takes of them.
WHOLE_MODULES = (
    "tests/evaluator/executors/ray/",
    "tests/evaluator/cli/test_run_ray.py",
    "tests/evaluator/report/html/test_browser.py",
    "tests/evaluator/report/html/test_race_page.py",
)
#: The longest tests (each a benchmark's whole script): first, so none starts last.
FIRST = ("tests/benchmarks/",)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadscope``: each test is its own unit of work, but for
    :data:`WHOLE_MODULES` (xdist's own scopes, a module or a class, would keep every
    class's tests on one worker: the suite's longest classes then set its time)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module.startswith(WHOLE_MODULES) else nodeid

    return Scheduling(config, log)
