"""The node actor's first step on a node: unpack the engine's files, then hand over.

Ray creates :class:`NodeBoot` on each node. The class Ray gets is :func:`portable`'s: this
module's code compiled again under a module name nothing can import, so that Ray's
cloudpickle sends it *by value* (over Ray Client too, whose server pickles again): a node
needs nothing of the engine installed to create it. So this module imports nothing of the
engine. Its
:meth:`NodeBoot.boot` extracts the bundle (``_ship.py``) to a folder of its own, puts the
shipped packages first on ``sys.path`` (its worker processes inherit that path), then
imports the engine's :class:`~evaluator._executors._ray._actor.NodeActor` from there and
delegates every call to it. :meth:`NodeBoot.close` removes the folder. An actor killed
before it could close (a lost node, ``ray.kill``, a cluster shut down under it) leaves
its folder: the folder is named by the actor's pid, and each boot on that machine
removes the folders of actors that are gone.

Arguments stay plain (a dict, bytes): Ray unpickles a call's arguments before the method
runs, and an engine struct would need the engine importable before the bundle is
unpacked.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile
import zipfile
from typing import Any

__all__ = ["NodeBoot", "portable"]

#: The module name of :func:`portable`'s copy: importable nowhere, so pickled by value.
PORTABLE_MODULE = "skynet_eval_node_boot"
#: A node actor's folder is ``<temp dir>/<FOLDER_PREFIX><its pid>-<random>``.
FOLDER_PREFIX = "skynet-eval-node-"


class NodeBoot:
    """A node actor; see the module docstring. Wrapped by ``ray.remote`` on the driver."""

    def __init__(self) -> None:
        self._actor: Any = None
        self._folder: str | None = None

    async def boot(self, bundle: bytes, spec: dict[str, Any]) -> Any:
        """Unpack ``bundle``, import the engine from it, boot the node actor."""
        import asyncio

        folder, user = await asyncio.to_thread(_unpack, bundle)
        self._folder = folder
        sys.path.insert(0, os.path.join(folder, "packages"))
        from evaluator._executors._ray._actor import NodeActor

        self._actor = NodeActor()
        return await self._actor.boot(spec, user)

    async def run(self, seq: int, payload: bytes, piece: int) -> None:
        await self._actor.run(seq, payload, piece)

    async def events(self) -> list[tuple[Any, ...]]:
        result: list[tuple[Any, ...]] = await self._actor.events()
        return result

    async def reply(self, request: int, body: bytes) -> None:
        await self._actor.reply(request, body)

    async def cancel(self, seqs: list[int]) -> None:
        await self._actor.cancel(seqs)

    async def close(self) -> None:
        """Close the node actor (its worker processes are reaped), remove the files."""
        try:
            if self._actor is not None:
                await self._actor.close()
        finally:
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)


def _unpack(bundle: bytes) -> tuple[str, str | None]:
    """Extract the bundle to a new folder: the folder, and the user's files in it."""
    remove_orphans(tempfile.gettempdir())
    folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
    with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
        archive.extractall(folder)
    user = os.path.join(folder, "user")
    return folder, user if os.path.isdir(user) else None


def remove_orphans(temp: str) -> list[str]:
    """Remove the folders of node actors whose process is gone; the folders removed.

    A pid taken again by another process keeps its folder (it is only removed later):
    never a folder of an actor that may still be running."""
    removed: list[str] = []
    try:
        names = os.listdir(temp)
    except OSError:
        return removed
    for name in names:
        pid, sep, _ = name.removeprefix(FOLDER_PREFIX).partition("-")
        if not name.startswith(FOLDER_PREFIX) or not sep or not pid.isdigit():
            continue
        if _gone(int(pid)):
            path = os.path.join(temp, name)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _gone(pid: int) -> bool:
    """No such process, or a zombie (killed, not yet reaped by its parent)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive under another user (EPERM): not ours to judge
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def portable() -> type:
    """:class:`NodeBoot`, compiled anew under :data:`PORTABLE_MODULE`."""
    with open(__file__, encoding="utf-8") as source:
        code = compile(source.read(), __file__, "exec")
    namespace: dict[str, Any] = {"__name__": PORTABLE_MODULE}
    exec(code, namespace)
    cls: type = namespace["NodeBoot"]
    return cls
