"""What reaches the nodes: the engine's packages and, on a cluster, the user's folder.

Ray's own ``runtime_env`` takes a local folder only for a whole job (``ray.init``), not
for one actor, and the engine may run on a connection it did not open (a script already
on Ray) or over Ray Client. So the engine ships its files itself, in one zip it puts in
Ray's object store once per executor: every node actor receives it with its boot
(``_boot.py``) and extracts it to a folder of its own, removed when it closes.

- The engine's packages (``evaluator``, ``reward``, ``llm_client``, ``skynet``) always
  go, so every node runs the driver's code, whatever version is installed there. The
  nodes need the engine's dependencies installed (``pip install 'skynet-eval[ray]'``).
- The folder of the user's file goes to a cluster (not to the engine's own local
  instance, whose actors read this machine's files): the file, the modules beside it
  and its data files, without version control, caches and virtual environments, and at
  most ``MAX_FOLDER_BYTES``.
"""

from __future__ import annotations

import importlib.util
import io
import os
import zipfile
from pathlib import Path

from ..._call._loader import UserFunction
from ..._exceptions import ConfigError

__all__ = ["MAX_FOLDER_BYTES", "PACKAGES", "bundle"]

#: The engine's packages, shipped to every node.
PACKAGES = ("evaluator", "reward", "llm_client", "skynet")
#: The user's folder is shipped when it holds at most this much.
MAX_FOLDER_BYTES = 100 * 1024 * 1024
#: Folders never shipped: version control, caches, virtual environments.
SKIPPED = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".venv",
        "venv",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    }
)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the engine's package {name!r} cannot be found to ship it")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _add_tree(archive: zipfile.ZipFile, root: Path, prefix: str, limit: int | None) -> None:
    total = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
        for name in sorted(files):
            if name.endswith(".pyc"):
                continue
            path = Path(folder, name)
            if not path.is_file():
                continue  # a broken link, a socket
            total += path.stat().st_size
            if limit is not None and total > limit:
                raise ConfigError(
                    f"the folder {root} holds more than {limit // (1024 * 1024)} MB, too much "
                    "to ship to every Ray node with the user's file; keep the metric and "
                    "program files (and the modules and data they read) in a folder of their "
                    "own, or put the folder at the same path on every node"
                )
            archive.write(path, f"{prefix}/{path.relative_to(root).as_posix()}")


def bundle(fn: UserFunction, *, with_folder: bool) -> bytes:
    """The zip a node actor boots from: ``packages/<name>/...``, and ``user/...`` (the
    folder of ``fn``'s file) when ``with_folder``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name in PACKAGES:
            _add_tree(archive, _package_dir(name), f"packages/{name}", None)
        if with_folder:
            _add_tree(archive, fn.path.parent, "user", MAX_FOLDER_BYTES)
    return buffer.getvalue()
