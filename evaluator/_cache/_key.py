"""The cache key: everything that can change an example's result, hashed.

A key is the BLAKE2b digest (16 bytes) of three layers, each hashed once where it is
known, so that a lookup costs one small encode and one hash:

- the *engine* layer (:class:`KeyMaker`, once per Evaluator): the cache format and the
  engine's contract version, the metric file's source and its ``REWARD_SPEC`` (as loaded,
  so a spec computed at import counts too), the program file's source, the source of
  every helper module loaded from the metric's or the program's folder when the
  Evaluator is made (``from helpers import grade`` beside ``metric.py``; installed
  packages are not read: their version is the environment's), the bytes of every file
  the metric's or program's code opened for reading at its import (``rubric.txt``, a
  helper imported from a sibling folder through ``sys.path``, the files that helper
  reads: :func:`~evaluator._fingerprint.read_by`), the files named by
  ``cache_key_files`` (``--cache-key-file``), and the model
  settings that shape outputs or costs (model, base URL, temperature, max tokens, prices;
  not rate limits, timeouts or concurrency) of the program and judge models and the SDK
  base URL (a server on this machine, 127.0.0.1 or localhost, by its path: its port
  changes from run to run, as the simulator's does; the model name tells it apart);
- the *candidate* layer (:meth:`KeyMaker.candidate`, once per chunk): the artifact in
  canonical form (text as its code points, JSON-like data as sorted msgpack);
- the *example* layer: its id, input, expected and given output, in the same sorted form.

A value with no canonical form (an object msgpack cannot encode, a dict whose keys cannot
be sorted) makes its example *uncacheable*: it is run and counted, never keyed by a
``repr`` that could be equal for different values. Tuples and lists encode alike.

Not keyed (:data:`NOT_KEYED`, printed by ``skynet-eval run --cache``): a file or helper
first opened during a call (seen in the engine's process and warned about when the
cache closes, :meth:`KeyMaker.unkeyed_reads`; not seen in worker processes), environment
variables, installed packages, and anything fetched over the network.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from .._call._loader import UserFunction
from .._data._dataset import Example
from .._exceptions import ConfigError
from .._fingerprint import files_print, read_by, reads_since
from .._models import Models

__all__ = [
    "CACHE_FORMAT",
    "CONTRACT_VERSION",
    "NOT_KEYED",
    "KeyMaker",
    "check_key_files",
    "depends_on_measurements",
]

#: Bumped when the engine's handling of a call changes what a result holds.
CONTRACT_VERSION = 1
#: The cache's own format: bumped when the key or the stored value changes shape.
CACHE_FORMAT = 2

#: The model settings that can change an output, its usage, or its cost.
_MODEL_FIELDS = (
    "model",
    "base_url",
    "temperature",
    "max_tokens",
    "reasoning_effort",
    "price_input",
    "price_output",
    "price_cached_input",
)

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

#: What the key does not hold, in the words ``skynet-eval run --cache`` prints.
NOT_KEYED = (
    "files first read during a call (in a worker process they are not even seen), "
    "environment variables, installed packages and anything fetched over the network"
)

_encode = msgspec.msgpack.Encoder(order="sorted").encode


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def _source(fn: UserFunction | None) -> bytes:
    if fn is None:
        return b"none"
    try:
        return Path(fn.path).read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"keys results by the source of `{fn.name}`, but {fn.path} cannot be read "
            f"({exc.strerror or exc}); load it from a file, or pass cache=False",
            option="cache",
        ) from None


#: Folders of installed packages: a helper is the user's own file, not a library's.
_INSTALLED = frozenset({"site-packages", "dist-packages"})


def _loaded_under(folders: set[Path], skip: set[Path]) -> Iterator[Path]:
    """The files of the modules loaded now from ``folders`` (or below), but ``skip``."""
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if not isinstance(name, str) or not name.endswith(".py"):
            continue
        path = Path(name).resolve()
        if path in skip or _INSTALLED.intersection(path.parts):
            continue
        if any(path.is_relative_to(folder) for folder in folders):
            yield path


def _depends(*fns: UserFunction | None) -> set[Path]:
    """What the user's files depend on beside themselves: the helper modules loaded from
    their folders, and the files their code opened for reading at import (their module
    code, and the helpers it imported): editing one changes the key as editing the file
    does. Files read in calls are left out, so that the key does not depend on whether a
    call ran before it was made (:meth:`KeyMaker.unkeyed_reads` warns of them)."""
    files = {Path(fn.path).resolve() for fn in fns if fn is not None}
    found = set(_loaded_under({f.parent for f in files}, files))
    found.update(p.resolve() for p in read_by(files, at_import=True))
    return found - files


def check_key_files(paths: Any, option: str = "cache_key_files") -> tuple[Path, ...]:
    """``paths`` (files to add to the cache key) as resolved paths; each must be a file."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    try:
        given = list(paths)
    except TypeError:
        raise ConfigError(
            f"must be a list of file paths, got {paths!r}", option=option, value=paths
        ) from None
    out = []
    for path in given:
        if not isinstance(path, (str, Path)) or not str(path).strip():
            raise ConfigError(f"must be file paths, got {path!r}", option=option, value=path)
        p = Path(path).expanduser()
        if not p.is_file():
            why = "a directory" if p.is_dir() else "not a file" if p.exists() else "missing"
            raise ConfigError(
                f"{path} is {why}; name the files the metric or program reads (their bytes "
                "are part of the cache key)",
                option=option,
                value=str(path),
            )
        out.append(p.resolve())
    return tuple(sorted(set(out)))


def _spec(fn: UserFunction) -> bytes:
    if not fn.has_reward_spec:
        return b"none"
    try:
        return b"spec:" + _encode(fn.reward_spec)
    except (TypeError, ValueError, OverflowError):
        # Not plain data (a RewardSpec struct, say): its repr is the spec's fields.
        return b"repr:" + repr(fn.reward_spec).encode("utf-8", "surrogatepass")


def _url(url: str | None) -> str | None:
    """A base URL as the key knows it: a server on this machine by its path alone, since
    its port changes from run to run (the simulator's does); its model name still counts."""
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.hostname in _LOOPBACK:
        return f"{parts.scheme}://loopback{parts.path}"
    return url


def _models(models: Models) -> bytes:
    def fields(config: Any) -> Any:
        if config is None:
            return None
        values = [getattr(config, name) for name in _MODEL_FIELDS]
        values[1] = _url(values[1])
        return values

    return _encode([fields(models.program), fields(models.judge), _url(models.sdk_base_url)])


def canonical(value: Any) -> bytes | None:
    """``value`` as bytes that do not depend on dict order; None when it has no such form."""
    if isinstance(value, str):
        return b"t" + value.encode("utf-8", "surrogatepass")
    try:
        return b"m" + _encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None


class KeyMaker:
    """Cache keys for one Evaluator's metric, program and models."""

    __slots__ = ("engine", "files", "mark", "roots")

    def __init__(
        self,
        metric: UserFunction,
        program: UserFunction | None,
        models: Models,
        files: Sequence[Path] = (),
    ) -> None:
        self.roots = tuple(Path(fn.path).resolve() for fn in (metric, program) if fn is not None)
        self.mark = reads_since()
        #: The files the key holds beside the metric's and the program's: their helpers,
        #: the files their code read, and ``files`` (``cache_key_files``).
        self.files: tuple[Path, ...] = tuple(sorted(_depends(metric, program) | set(files)))
        self.engine = _digest(
            b"skynet-eval result cache",
            str(CACHE_FORMAT).encode(),
            str(CONTRACT_VERSION).encode(),
            _source(metric),
            _spec(metric),
            _source(program),
            files_print(self.files),
            _models(models),
        )

    def unkeyed_reads(self) -> list[Path]:
        """The files the user's code opened since the key was made (during calls, in this
        process) that the key does not hold: an edit to them is not seen by the cache."""
        keyed = set(self.files) | set(self.roots)
        reads = read_by(self.roots, at_import=False, since=self.mark)
        return [p for p in reads if p.resolve() not in keyed]

    def candidate(self, artifact: Any) -> bytes | None:
        """The artifact's layer, or None when the artifact has no canonical form."""
        form = canonical(artifact)
        return None if form is None else _digest(self.engine, form)

    def keys(self, candidate: bytes, examples: Sequence[Example]) -> list[bytes | None]:
        """One key per example (None for an example that has no canonical form)."""
        out: list[bytes | None] = []
        append = out.append
        unset = msgspec.UNSET
        for ex in examples:
            given = ex.output is not unset
            try:
                form = _encode((ex.id, ex.input, ex.expected, given, ex.output if given else None))
            except (TypeError, ValueError, OverflowError, RecursionError):
                append(None)
                continue
            h = hashlib.blake2b(candidate, digest_size=16)
            h.update(form)
            append(h.digest())
        return out


def depends_on_measurements(metric: UserFunction) -> bool:
    """Whether the metric's scores may depend on measured speed or cost: a
    ``REWARD_SPEC`` that weighs speed or cost, or a module that uses ``reward``,
    ``observation`` or ``service_cost`` (by name in its source, or bound in its globals
    under another name). Such results keep the measurements they were scored with."""
    spec = metric.reward_spec if metric.has_reward_spec else None
    if isinstance(spec, dict):
        weights = spec.get("weights")
        if isinstance(weights, dict) and any(
            isinstance(w, (int, float)) and w > 0 for k, w in weights.items() if k != "accuracy"
        ):
            return True
    try:
        source = Path(metric.path).read_text("utf-8", "replace")
    except OSError:
        source = ""
    if any(f"{name}(" in source for name in ("reward", "observation", "service_cost")):
        return True
    module = metric.module
    if module is None:
        return False
    from .._facade import observation, reward, service_cost

    measured = (observation, reward, service_cost)
    return any(any(v is m for m in measured) for v in vars(module).values())
