"""Loading the user's files by path: ``metric.py`` (``score``) and ``program.py`` (``run``).

Each file is imported under a name derived from its absolute path, so two files both
called ``metric.py`` never collide and a worker process that imports the same path gets
the same module name (objects defined there pickle across processes). The file's folder
is put on ``sys.path`` so that it can import its siblings.

Loading also tells what the function's calls will wait on: a module that calls a model
(``skynet.llm``, or an SDK: openai, litellm, dspy, anthropic) makes its function
*model-bound*, which the engine runs in as many threads as the model budget can use,
where a CPU-bound one gets worker processes. That is read from the module's imports
(its source, so an import inside a function counts and a word in a string does not),
from the objects it holds (an SDK client handed over by a helper module), and from the
imports of the sibling modules it uses, one level deep.

**The engine's process is guarded from what an import does.** The engine imports the
user's file itself (to read ``score``, its form, ``REWARD_SPEC``, ``EXECUTION``), even
when the calls run in workers, so the import runs in its process. Around it
(:func:`_engine_guarded`) the working directory, every signal's disposition and the
engine's own entries of ``sys.modules`` are put back as they were; threads the import
leaves running are not waited for when the command line ends (``evaluator/_cli``). A
worker, which is the user's process, keeps what its import did (``guard_engine=False``).

**The engine's names are its own.** :class:`EngineNames`, first on ``sys.meta_path``
in every process that loads a user file, resolves a top-level name of the engine's
packages (``evaluator``, ``llm_client``, ``reward``, ``skynet``) only where the engine is
installed, and a standard module's name only in the standard library: a ``reward.py``,
``types.py`` or ``json/`` on ``sys.path`` (beside the metric, in the working directory)
never replaces them, for the engine nor for anyone. A user file that imports such a name
while its folder holds a module of that name gets an error at its file step saying to
rename the module (inside the engine the name cannot be theirs).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import signal
import sys
import threading
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import (
    STEP_FILE,
    STEP_PROGRAM_FILE,
    STEP_PROGRAM_SIGNATURE,
    STEP_SIGNATURE,
    ContractError,
)
from ._kinds import EXECUTIONS, KINDS_LISTED, ExecutionKind

__all__ = [
    "ENGINE_PACKAGES",
    "MODEL_SDKS",
    "USER_MODULE_PREFIX",
    "EngineNames",
    "UserFunction",
    "load_function",
    "load_metric",
    "load_program",
    "protect_engine_imports",
]

#: The name of every user file's module starts with this (see :func:`_module_name`).
USER_MODULE_PREFIX = "_skynet_user_"
#: Packages whose calls wait on a model: a module importing one is model-bound.
MODEL_SDKS = ("openai", "litellm", "dspy", "anthropic")
_SKYNET_LLM = "skynet.llm"
_MODEL_USES = (_SKYNET_LLM, *MODEL_SDKS)  # the order they are reported in

_lock = threading.Lock()

#: The engine's top-level packages: inside the engine these names are always its own.
ENGINE_PACKAGES = frozenset({"evaluator", "llm_client", "reward", "skynet"})
#: Where the engine's packages are installed (one distribution: one folder).
_ENGINE_ROOT = str(Path(__file__).resolve().parents[2])
#: Where the standard library's modules are (the extension modules in lib-dynload).
_STDLIB_DIR = os.path.dirname(os.__file__)
_STDLIB_DIRS = [_STDLIB_DIR, os.path.join(_STDLIB_DIR, "lib-dynload")]


def _reserved(name: str) -> str | None:
    """Whose the top-level module name ``name`` is, in words, if not the user's."""
    if name in ENGINE_PACKAGES:
        return f"the engine's own package `{name}`"
    if name in sys.stdlib_module_names:
        return f"the standard library's module `{name}`"
    return None


class EngineNames(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: a top-level import of one of the engine's packages is
    looked for only where the engine is installed, of a standard module's name only in the
    standard library, whatever ``sys.path`` holds (see the module docstring). Any other
    name, and a name not found there (a builtin module), is left to the next finders."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if path is not None:  # a submodule: its package's own __path__ decides
            return None
        if name in ENGINE_PACKAGES:
            where = [_ENGINE_ROOT]
        elif name in sys.stdlib_module_names:
            where = _STDLIB_DIRS
        else:
            return None
        return importlib.machinery.PathFinder.find_spec(name, where)


_engine_names = EngineNames()


def protect_engine_imports() -> None:
    """Put :class:`EngineNames` first on ``sys.meta_path`` (again, if user code moved it)."""
    if sys.meta_path and sys.meta_path[0] is _engine_names:
        return
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, EngineNames)]
    sys.meta_path.insert(0, _engine_names)


@dataclass(frozen=True)
class UserFunction:
    """A user's ``score`` or ``run`` and what the engine learned about it at load time."""

    path: Path
    module_name: str
    name: str
    fn: Callable[..., Any] = field(repr=False, compare=False)
    arity: int
    is_async: bool
    uses_llm: bool
    execution: ExecutionKind | None
    reward_spec: Any = field(default=None, repr=False, compare=False)
    has_reward_spec: bool = False
    module: types.ModuleType | None = field(default=None, repr=False, compare=False)
    model_use: tuple[str, ...] = ()
    """How the module calls a model: "skynet.llm" and the SDKs it uses, in that order."""

    @property
    def model_bound(self) -> bool:
        """Whether its calls wait on a model (``skynet.llm`` or a model SDK)."""
        return self.uses_llm or bool(self.model_use)


def _module_name(path: Path) -> str:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"{USER_MODULE_PREFIX}{stem}_{digest}"


def _user_frame_line(exc: BaseException, path: Path) -> int | None:
    """The line of ``path`` where ``exc`` was raised, if it was raised there."""
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == path:
            line = frame.lineno
    return line


class _ExitAtImport(BaseException):
    """``os._exit`` called by a user file while it is imported (a BaseException, so that
    the file's own ``except Exception`` does not swallow it)."""

    def __init__(self, code: Any) -> None:
        super().__init__(code)
        self.code = code


_importing: set[int] = set()  # threads importing a user file now


def _guarded_exit(code: int, real: Callable[[int], Any] = os._exit) -> Any:
    """``os._exit`` while a user file imports: in the importing thread, an error the
    loader reports; anywhere else (or later, through a saved reference), the real one."""
    if threading.get_ident() in _importing:
        raise _ExitAtImport(code)
    return real(code)


@contextlib.contextmanager
def _exit_is_an_error() -> Iterator[None]:
    """While a user file imports (under the loader's lock), ``os._exit`` in this thread
    raises instead of ending the process with no word: the contract check and a
    worker's boot then say which file did it. (A signal the file sends itself, or a
    crash of native code, still ends the process: nothing in it can stop that.)"""
    me = threading.get_ident()
    _importing.add(me)
    saved = os._exit
    os._exit = _guarded_exit  # type: ignore[assignment]
    try:
        yield
    finally:
        _importing.discard(me)
        if os._exit is _guarded_exit:
            os._exit = saved


def _signal_dispositions() -> dict[int, Any]:
    """Every signal's handler that Python can read and set again (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return {}  # only the main thread can set one: neither can the import
    found: dict[int, Any] = {}
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            handler = signal.getsignal(sig)
            if handler is not None:  # None: set outside Python, cannot be put back
                found[sig] = handler
    return found


def _is_engine_module(module: object) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and file.startswith(_ENGINE_ROOT + os.sep)


@contextlib.contextmanager
def _engine_guarded() -> Iterator[None]:
    """Around a user file's import in the engine's process: the working directory, the
    signal dispositions and the engine's ``sys.modules`` entries put back as they were
    (a ``chdir``, a ``SIG_IGN`` for SIGINT, a ``sys.modules["reward"] = ...`` at import
    must not move the engine's files, deafen Ctrl-C, or swap its packages)."""
    try:
        cwd: str | None = os.getcwd()
    except OSError:  # the folder was removed under us: nothing to go back to
        cwd = None
    handlers = _signal_dispositions()
    modules = {n: m for n, m in sys.modules.items() if _root(n) in ENGINE_PACKAGES}
    try:
        yield
    finally:
        if cwd is not None:
            with contextlib.suppress(OSError):
                if os.getcwd() != cwd:
                    os.chdir(cwd)
        for sig, handler in handlers.items():
            with contextlib.suppress(OSError, ValueError, RuntimeError, TypeError):
                if signal.getsignal(sig) != handler:
                    signal.signal(sig, handler)
        for name in [n for n in sys.modules if _root(n) in ENGINE_PACKAGES]:
            if name not in modules and not _is_engine_module(sys.modules.get(name)):
                del sys.modules[name]  # a stand-in the import put there
        for name, module in modules.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
        protect_engine_imports()


def _imported_names(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """The top-level module names a file imports (absolute imports), with their lines."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _root(alias.name), node.lineno
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield _root(node.module), node.lineno


def _check_shadowing(resolved: Path, step: str) -> None:
    """Refuse a file that imports a name of the engine's or the standard library's while
    its folder holds a module of that name: it cannot be the file's (see EngineNames)."""
    try:
        tree = ast.parse(resolved.read_bytes(), filename=str(resolved))
    except (OSError, SyntaxError, ValueError):
        return  # the import itself reports it
    folder = str(resolved.parent)
    for name, line in _imported_names(tree):
        whose = _reserved(name)
        if whose is None:
            continue
        spec = importlib.machinery.PathFinder.find_spec(name, [folder])
        if spec is None or (spec.origin is None and name not in ENGINE_PACKAGES):
            continue  # none there (a folder without __init__.py does not shadow a module)
        there = Path(spec.origin).name if spec.origin else f"{name}/"
        if spec.submodule_search_locations and spec.origin:
            there = f"{name}/"
        raise ContractError(
            step,
            f"`import {name}`: the file's folder holds {there}, which has the name of "
            f"{whose}; inside the engine `{name}` is always that, never the module beside "
            f"the file: rename {there} (and the imports of it)",
            path=resolved,
            line=line,
        )


def import_path(
    path: str | Path, *, step: str = STEP_FILE, guard_engine: bool = True
) -> types.ModuleType:
    """Import a user file by path (once per process); a failure is a ``ContractError``.

    ``guard_engine``: this is the engine's process, guarded from what the import does
    (see the module docstring); a worker passes False (its process is the user's).
    """
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise ContractError(
            step, "no such file; check the path", path=resolved if resolved.exists() else path
        )
    name = _module_name(resolved)
    with _lock:
        module = sys.modules.get(name)
        if module is not None:
            return module
        _check_shadowing(resolved, step)
        protect_engine_imports()
        folder = str(resolved.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(name, resolved)
        if spec is None or spec.loader is None:
            raise ContractError(step, "cannot be imported as a Python file", path=resolved)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        guard = _engine_guarded() if guard_engine else contextlib.nullcontext()
        try:
            with guard, _exit_is_an_error():
                spec.loader.exec_module(module)
        except _ExitAtImport as exc:
            del sys.modules[name]
            raise ContractError(
                step,
                f"the file exited the process while importing (os._exit({exc.code!r}) at "
                "import); a file must not end the process when it is imported: remove "
                "the call, or move it under `if __name__ == '__main__':`",
                path=resolved,
                line=_user_frame_line(exc, resolved),
            ) from None
        except (Exception, SystemExit) as exc:  # SystemExit: a file that calls exit()
            del sys.modules[name]
            line = _user_frame_line(exc, resolved)
            kind = type(exc).__name__
            detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
            raise ContractError(
                step,
                f"importing the file raised {kind}: {detail}; fix the file so it imports",
                path=resolved,
                line=line,
            ) from exc
        return module


def _arity(fn: Callable[..., Any], name: str, path: Path, line: int | None) -> int:
    """2 or 3: how many positional arguments the engine passes."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 3 if name == "score" else 2  # a builtin or C callable: trust the contract
    positional = [
        p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    has_varargs = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    required = [p for p in positional if p.default is p.empty]
    kw_required = [
        p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY and p.default is p.empty
    ]
    forms = "(input, output, expected=None) or (input, output)"
    if name == "run":
        forms = "(artifact, input)"
    where = f"`{name}{sig}`"
    step = STEP_SIGNATURE if name == "score" else STEP_PROGRAM_SIGNATURE
    if kw_required:
        raise ContractError(
            step,
            f"{where} has required keyword-only parameters {kw_required}; "
            f"the engine passes only positional arguments: use {forms}",
            path=path,
            line=line,
        )
    most = 3 if name == "score" else 2
    least = 2
    for n in range(most, least - 1, -1):
        if len(required) <= n and (len(positional) >= n or has_varargs):
            return n
    if len(required) > most:
        problem = f"requires {len(required)} positional arguments"
    else:
        problem = f"accepts only {len(positional)} positional argument(s)"
    raise ContractError(step, f"{where} {problem}; define it as {forms}", path=path, line=line)


def _root(name: object) -> str:
    return name.split(".", 1)[0] if isinstance(name, str) else ""


def _import_uses(node: ast.Import | ast.ImportFrom, found: set[str], skynet: set[str]) -> None:
    """Add the model uses one import statement shows; note the names `skynet` is bound to."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            root = _root(alias.name)
            if root in MODEL_SDKS:
                found.add(root)
            elif alias.name == "skynet":
                skynet.add(alias.asname or "skynet")
        return
    if node.level:  # a relative import: the user's own package
        return
    root = _root(node.module)
    if root in MODEL_SDKS:
        found.add(root)
    elif node.module == "skynet" and any(a.name in ("llm", "allm", "*") for a in node.names):
        found.add(_SKYNET_LLM)


def _source_uses(path: Path) -> set[str] | None:
    """The model uses of the Python file ``path`` (None when its source cannot be read):
    imports anywhere in it, and ``skynet.llm`` / ``skynet.allm`` after ``import skynet``."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    found: set[str] = set()
    skynet: set[str] = set()
    nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            _import_uses(node, found, skynet)
    if skynet:
        for node in nodes:
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("llm", "allm")
                and isinstance(node.value, ast.Name)
                and node.value.id in skynet
            ):
                found.add(_SKYNET_LLM)
                break
    return found


def _value_uses(value: object) -> tuple[str | None, str | None]:
    """(the model use, the module it comes from) of one of a module's globals."""
    from .. import _facade

    if value is _facade.llm or value is _facade.allm:
        return _SKYNET_LLM, None
    name: object
    if isinstance(value, types.ModuleType):
        name = value.__name__
    elif isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
        name = getattr(value, "__module__", None)
    else:
        name = type(value).__module__  # an SDK client built by a helper module
    root = _root(name)
    if root in MODEL_SDKS:
        return root, None
    return None, name if isinstance(name, str) else None


def _model_use(module: types.ModuleType, path: Path) -> tuple[str, ...]:
    """How ``module`` (the file ``path``) calls a model; see the module docstring."""
    found = _source_uses(path)
    if found is None:
        found = set()
        if any(
            isinstance(v, types.ModuleType) and v.__name__ == "skynet"
            for v in vars(module).values()
        ):
            found.add(_SKYNET_LLM)  # no source to tell what it uses: assume the model
    siblings: set[Path] = set()
    for value in list(vars(module).values()):
        use, origin = _value_uses(value)
        if use is not None:
            found.add(use)
        elif origin is not None and origin != module.__name__:
            file = getattr(sys.modules.get(origin), "__file__", None)
            if file and Path(file).parent == path.parent and Path(file) != path:
                siblings.add(Path(file))
    for sibling in sorted(siblings):  # the user's own helpers, one level deep
        found |= _source_uses(sibling) or set()
    return tuple(use for use in _MODEL_USES if use in found)


def load_function(path: str | Path, name: str, *, guard_engine: bool = True) -> UserFunction:
    """Import ``path`` and describe its function ``name`` (``score`` or ``run``).

    ``guard_engine``: see :func:`import_path` (False in a worker)."""
    step = STEP_FILE if name == "score" else STEP_PROGRAM_FILE
    module = import_path(path, step=step, guard_engine=guard_engine)
    resolved = Path(module.__file__ or path).resolve()
    fn = getattr(module, name, None)
    what = "metric" if name == "score" else "program"
    if fn is None:
        defined = sorted(
            k for k, v in vars(module).items() if callable(v) and not k.startswith("_")
        )
        hint = f" (it defines {', '.join(defined)})" if defined else ""
        raise ContractError(
            step,
            f"the {what} file defines no `{name}`{hint}; define `def {name}(...)`",
            path=resolved,
        )
    if not callable(fn):
        raise ContractError(
            step,
            f"`{name}` is a {type(fn).__name__}, not a function; define `def {name}(...)`",
            path=resolved,
        )
    try:
        line: int | None = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        line = None
    arity = _arity(fn, name, resolved, line)
    model_use = _model_use(module, resolved)
    execution = getattr(module, "EXECUTION", None)
    if execution is not None and execution not in EXECUTIONS:
        raise ContractError(
            step,
            f"EXECUTION = {execution!r} is not one of {KINDS_LISTED}",
            path=resolved,
        )
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an async __call__ on an object
    )
    return UserFunction(
        path=resolved,
        module_name=module.__name__,
        name=name,
        fn=fn,
        arity=arity,
        is_async=is_async,
        uses_llm=_SKYNET_LLM in model_use,
        execution=execution,
        reward_spec=getattr(module, "REWARD_SPEC", None),
        has_reward_spec=hasattr(module, "REWARD_SPEC"),
        module=module,
        model_use=model_use,
    )


def load_metric(path: str | Path) -> UserFunction:
    """Load a metric file: its ``score``, form, ``REWARD_SPEC`` and ``EXECUTION``."""
    return load_function(path, "score")


def load_program(path: str | Path) -> UserFunction:
    """Load a program file: its ``run(artifact, input)``."""
    return load_function(path, "run")
