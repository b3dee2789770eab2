"""Private copies of an example's data, so that one call cannot change what another sees.

User code runs in the engine's own process in the thread, async and inline executors:
a program that edits its ``input`` dict, or a metric that edits ``input``, ``output`` or
``expected``, would otherwise change the example for the metric that runs next, for the
next candidate (an optimizer scores the same examples again and again), and for what a
reflection model is shown. Each call gets its own copy instead. (Worker processes get
copies anyway: arguments are pickled.)

The copy is cheap where data is plain: strings and numbers are shared (they cannot
change), a flat dict or list of them is copied in one C call, and only nested or unusual
values go through ``copy.deepcopy``. A value that cannot be copied (a lock, an open file,
a generator) is shared as it is: copying is a protection, never a new way to fail.

A parameter the function never names needs no copy (:func:`unread_arguments`): an exact
match metric never reads its ``input``, and copying it was a tenth of the inline
executor's cost per example. Nothing in such a function can reach the argument but frame
introspection (``locals()``, ``sys._getframe``), which reaches the engine's own frames,
and the originals in them, whether or not the call gets copies; a function that uses any
introspection, or that is not a plain Python function (a callable object, a wrapper,
a builtin), has every argument copied.
"""

from __future__ import annotations

import copy
import dis
import types
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

__all__ = ["ATOMS", "private_artifact", "private_copy", "unread_arguments"]

T = TypeVar("T")

#: The types of values that cannot change: shared, never copied. (A caller may test
#: ``type(value) in ATOMS`` first, to skip a call of :func:`private_copy` for them.)
ATOMS: frozenset[type] = frozenset(
    {str, int, float, bool, type(None), bytes, complex, type(msgspec.UNSET)}
)
_ATOMS = ATOMS


def private_copy(value: T, atoms: frozenset[type] = ATOMS) -> T:
    """A copy of ``value`` that shares no mutable part with it (see the module)."""
    kind = type(value)
    if kind is dict:
        # A flat dict is copied in one C call. The check is a plain loop: ``type(item)``
        # is a specialised instruction, where ``map(type, ...)`` into ``issuperset``
        # built three iterators and a set, for a dict of one value a third of the call.
        for item in value.values():  # type: ignore[attr-defined]
            if type(item) not in atoms:
                break
        else:
            return value.copy()  # type: ignore[attr-defined, no-any-return]
    elif kind in atoms:
        return value
    elif kind is tuple:
        for item in value:  # type: ignore[attr-defined]
            if type(item) not in atoms:
                break
        else:
            return value  # a tuple of atoms cannot change
    try:
        return _plain(value)  # type: ignore[no-any-return]
    except (_NotPlain, RecursionError):
        pass
    try:
        return copy.deepcopy(value)
    except Exception:  # not copyable (or too deep to copy): shared, as before copies existed
        return value


def private_artifact(value: T) -> T:
    """A copy of the plain-data parts of an artifact (dicts, lists and tuples, as deep as
    they go), sharing every other object as it is.

    An artifact is usually a prompt or a config, copied for next to nothing; but it may
    be a large object (a loaded model, a client) that no call should pay to copy, and
    whose own state is the caller's to guard.
    """
    kind = type(value)
    if kind is dict or kind is list or kind is tuple:
        try:
            return _containers(value)  # type: ignore[no-any-return]
        except RecursionError:  # a container that contains itself: shared
            return value
    return value


def _containers(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _containers(v) for k, v in value.items()}
    if kind is list:
        return [_containers(v) for v in value]
    if kind is tuple:
        return tuple([_containers(v) for v in value])
    return value


class _NotPlain(Exception):
    """A value other than JSON-like data: ``copy.deepcopy`` takes it."""


def _plain(value: Any) -> Any:
    """A copy of JSON-like data (dicts, lists, tuples of atoms), several times faster than
    ``copy.deepcopy``, which keeps a memo of every object for the sake of cycles."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        return {k: _plain(v) for k, v in value.items()}
    if kind is list:
        return [_plain(v) for v in value]
    if kind is tuple:
        return tuple([_plain(v) for v in value])
    raise _NotPlain


#: Names through which a function can reach its own frame's locals (or a caller's).
_INTROSPECTION = frozenset(
    {
        "locals",
        "vars",
        "eval",
        "exec",
        "_getframe",
        "currentframe",
        "stack",
        "trace",
        "getargvalues",
        "f_locals",
        "f_back",
        "tb_frame",
        "gi_frame",
        "cr_frame",
        "ag_frame",
        "settrace",
        "setprofile",
    }
)


def unread_arguments(fn: Callable[..., Any], arity: int) -> tuple[bool, ...]:
    """For each of the ``arity`` positional arguments the engine passes ``fn``: True when
    ``fn``'s code never reads that parameter, so the argument needs no private copy.

    Only for a plain Python function whose own code takes those parameters (not a
    wrapper with ``*args`` nor a ``functools.wraps`` one), and that reaches no frame:
    a name of :data:`_INTROSPECTION` anywhere in its code or its nested functions' makes
    every argument read. A parameter is read by any instruction that names it but a
    plain store (rebinding the name drops the argument), or by a nested function that
    closes over it.
    """
    unknown = (False,) * arity
    code = getattr(fn, "__code__", None)
    if type(fn) is not types.FunctionType or code is None or hasattr(fn, "__wrapped__"):
        return unknown
    if code.co_argcount < arity:
        return unknown
    codes = [code]
    for item in codes:  # grows while it runs: the nested functions' code, all the way down
        if not _INTROSPECTION.isdisjoint(item.co_names):
            return unknown
        codes.extend(c for c in item.co_consts if isinstance(c, types.CodeType))
    names = code.co_varnames[:arity]
    read = set(code.co_cellvars).intersection(names)
    for ins in dis.get_instructions(code):
        if ins.opname == "STORE_FAST":
            continue
        value = ins.argval
        if isinstance(value, tuple):  # LOAD_FAST_LOAD_FAST and its kin (3.13)
            read.update(v for v in value if v in names)
        elif isinstance(value, str) and value in names:
            read.add(value)
    return tuple(name not in read for name in names)
