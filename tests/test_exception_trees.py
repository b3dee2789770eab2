"""Each package's exceptions sit in the tree its ``_exceptions`` docstring draws: every
exception class the package defines is drawn under its real parent, with its stdlib
bases, below the package's root; the few that are not errors of the package are named
there as outside the tree."""

from __future__ import annotations

import builtins
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOTS = {
    "evaluator": "EvaluationError",
    "llm_client": "ModelClientError",
    "reward": "RewardSpecError",
}
REPO = Path(__file__).resolve().parents[1]

# Every module of the package is imported in a process of its own, so that this test
# loads nothing into the others' (several check what an import loads).
_FIND = """
import importlib, inspect, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
found = {}
for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    if info.name.rsplit(".", 1)[-1] == "__main__":
        continue
    module = importlib.import_module(info.name)
    for name, obj in vars(module).items():
        if (
            inspect.isclass(obj)
            and issubclass(obj, BaseException)
            and obj.__module__ == module.__name__
            and not name.startswith("_")
        ):
            found[name] = module.__name__
print(json.dumps(found))
"""

_ENTRY = re.compile(
    r"^(?P<lead>\s*(?:[│ ]*[├└]── )?)(?P<name>[A-Z]\w+)(?: \((?P<bases>[\w, ]+)\))?"
)


def _drawn(doc: str) -> dict[str, tuple[str | None, list[str]]]:
    """The tree in ``doc``: each drawn name, its drawn parent and its stdlib bases."""
    tree: dict[str, tuple[str | None, list[str]]] = {}
    seen: list[tuple[int, str]] = []  # (column of the name, name), in drawing order
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^ {4}[A-Z]\w+\b", line))
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        match = _ENTRY.match(line)
        if match is None or (seen and "──" not in match["lead"]):
            continue
        column = len(match["lead"])
        parent = None
        if seen:
            connector = column - len("├── ")
            parent = next(name for col, name in reversed(seen) if col <= connector)
        bases = [b.strip() for b in (match["bases"] or "").split(",") if b.strip()]
        tree[match["name"]] = (parent, bases)
        seen.append((column, match["name"]))
    return tree


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_exception_is_in_the_drawn_tree(package: str) -> None:
    """Every exception class of the package is drawn under its real parent (with its
    stdlib bases) and derives from the root, or is named outside the tree."""
    exceptions = importlib.import_module(f"{package}._exceptions")
    doc = exceptions.__doc__ or ""
    tree = _drawn(doc)
    root = ROOTS[package]
    assert root in tree, f"{root} is not drawn in {package}._exceptions"

    def resolve(name: str) -> type[BaseException]:
        found = getattr(exceptions, name, None) or getattr(builtins, name)
        assert isinstance(found, type) and issubclass(found, BaseException), name
        return found

    for name, (parent, bases) in tree.items():
        cls = resolve(name)
        if parent is not None:
            assert issubclass(cls, resolve(parent)), f"{name} is drawn under {parent}"
        for base in bases:
            assert issubclass(cls, resolve(base)), f"{name} is drawn with {base}"
        if name not in vars(builtins):
            assert issubclass(cls, resolve(root)), f"{name} is drawn but not a {root}"

    out = subprocess.run(
        [sys.executable, "-c", _FIND, package],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=120,
    )
    defined: dict[str, str] = json.loads(out.stdout)
    assert root in defined
    for name, module in defined.items():
        cls = getattr(importlib.import_module(module), name)
        if issubclass(cls, resolve(root)):
            assert name in tree, f"{module}.{name} is not drawn in {package}._exceptions"
            assert module == exceptions.__name__, f"{name} is defined in {module}"
        else:
            assert re.search(rf"``{name}``", doc), (
                f"{module}.{name} is outside {root} and not named in {package}._exceptions"
            )


def test_the_three_that_were_outside_are_in() -> None:
    """The models file's, the DSPy adapter's and the background engine's errors are the
    engine's, with the stdlib bases their callers catch, and one import place each."""
    from evaluator import EvaluationError
    from evaluator._exceptions import ConfigError, EngineClosedError, ModelsFileError, NoModelError
    from evaluator._judges import ModelsFileError as from_judges
    from evaluator.dspy import EngineClosedError as closed_from_dspy
    from evaluator.dspy import NoModelError as from_dspy

    assert (from_judges, from_dspy, closed_from_dspy) == (
        ModelsFileError,
        NoModelError,
        EngineClosedError,
    )
    assert issubclass(ModelsFileError, ConfigError) and issubclass(NoModelError, ConfigError)
    assert issubclass(EngineClosedError, EvaluationError)
    assert issubclass(EngineClosedError, RuntimeError)
