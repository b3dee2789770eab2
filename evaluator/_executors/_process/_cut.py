"""The claim and the cut: the calls a stalled worker gives up, agreed under a lock.

A worker runs its batches' calls in order. When it stalls in one (asleep, hung, waiting
on a model), the engine takes back the calls behind that one, not begun, for the other
workers and the stand-ins (``ProcessExecutor.on_stalled``). Both sides move at once: the
worker may end the stalled call and begin the next in the instant the engine decides.
Without an agreement, a call that began in that instant would run twice. So both sides
act under one lock, a process-shared POSIX semaphore in the worker's shared state array
(slots ``LOCK`` on, see ``_wire.py``):

- the worker *claims* each call before it begins it (``Claims.claim``): under the
  lock it reads the cut and, unless the call is cut, records it as its latest claim
  (``SEQ``, ``INDEX``);
- the engine *cuts* (:func:`cut`): under the lock it reads the worker's latest claim
  and writes a cut that starts after it (and no earlier than it asked), then takes back
  only the calls from that start on.

So every call is either claimed (run by this worker, or blamed if the worker dies) or
taken back (run elsewhere), never both: a call runs at most once unless its worker
died. The worker holds the lock between two calls, for a microsecond, never inside the
user's function, so the engine waits for it at most :data:`CUT_WAIT_S`; a worker that
died holding it (killed by a thread of the user's code mid-claim) costs that wait once,
and nothing is taken back from it: its exit settles its calls.

The worker's side is the C semaphore object of ``_multiprocessing`` (the one behind
``multiprocessing.Lock``) over the semaphore's address: tens of nanoseconds a call,
where ctypes calls cost about 300 ns. The engine's side, once per worker and once per
cut, goes through ctypes. Slot ``CLAIMS`` says whether both sides have the lock (the
engine sets it, a worker that cannot build its side clears it); without it the engine
cuts nothing: a stalled worker's batch waits for it, as before stand-ins (which still
take the queued work).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import importlib
import mmap
import time
from typing import Any

from ._wire import CLAIMS, CUT_END, CUT_INDEX, CUT_SEQ, INDEX, LOCK, SEQ

__all__ = ["CUT_WAIT_S", "Claims", "cut", "init_lock"]

#: The longest the engine waits for a worker's claim to release the lock.
CUT_WAIT_S = 0.01

_LOCK_OFFSET = LOCK * 8
_SEMAPHORE = 1  # ``_multiprocessing.SemLock``'s kind for a counting semaphore


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        for name in ("sem_init", "sem_timedwait", "sem_post"):
            getattr(libc, name).restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def _address(state_map: Any) -> int:
    """The address of the semaphore in ``state_map`` (the buffer is exported only for
    the length of this call, so that the map can still be closed)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(state_map, _LOCK_OFFSET))


def init_lock(state_map: mmap.mmap) -> bool:
    """Engine side, once per worker before it starts: set up the lock (unlocked,
    shared between processes). False where that cannot be done: then :func:`cut`
    takes nothing back."""
    if _LIBC is None or _LIBC.sem_init(ctypes.c_void_p(_address(state_map)), 1, 1) != 0:
        return False
    memoryview(state_map).cast("q")[CLAIMS] = 1
    return True


def cut(
    state: memoryview,
    state_map: mmap.mmap,
    start: tuple[int, int],
    end: int,
    wait_s: float = CUT_WAIT_S,
) -> tuple[int, int] | None:
    """Engine side: take back, from the worker whose state this is, the calls from
    ``start`` (``(seq, index)``) to the end of batch ``end``; return where the cut really
    starts: ``start``, or just after the worker's latest claim if it has claimed more
    since the engine looked. None: the lock was not had (nothing is taken back)."""
    if _LIBC is None or state[CLAIMS] != 1:
        return None
    sem = ctypes.c_void_p(_address(state_map))
    deadline = time.clock_gettime(time.CLOCK_REALTIME) + wait_s
    when = _Timespec(int(deadline), int((deadline % 1) * 1e9))
    while _LIBC.sem_timedwait(sem, ctypes.byref(when)) != 0:
        if ctypes.get_errno() != errno.EINTR:  # a signal arrived: wait on
            return None  # ETIMEDOUT
    try:
        start = max(start, (state[SEQ], state[INDEX] + 1))
        state[CUT_SEQ], state[CUT_INDEX], state[CUT_END] = start[0], start[1], end
    finally:
        _LIBC.sem_post(sem)
    return start


class Claims:
    """Worker side: claims the calls it begins, under the lock, against the cut."""

    __slots__ = ("acquire", "claim", "lock", "release", "state")

    def __init__(self, state: memoryview) -> None:
        self.state = state
        self.lock: Any = None
        if state[CLAIMS] == 1:
            try:
                # The semaphore object over the engine's semaphore (``name`` None: no
                # ``sem_open``). Never freed: a worker ends with ``os._exit``.
                self.lock = importlib.import_module("_multiprocessing").SemLock._rebuild(
                    _address(state.obj), _SEMAPHORE, 1, None
                )
            except (ImportError, AttributeError, TypeError, OSError):
                state[CLAIMS] = 0  # the engine will cut nothing from this worker
        acquire = self.acquire = self.lock.acquire if self.lock is not None else _nothing
        release = self.release = self.lock.release if self.lock is not None else _nothing

        # A closure over locals: it runs before every call (about 50 ns more than the
        # unlocked check it replaces).
        def claim(
            seq: int,
            index: int,
            cut_seq: int = CUT_SEQ,
            cut_index: int = CUT_INDEX,
            cut_end: int = CUT_END,
        ) -> bool:
            """Claim call ``index`` of batch ``seq`` before beginning it: False when
            the engine took it back (with the rest of the batch); stop there."""
            acquire()
            if state[cut_end] >= seq and (
                seq > state[cut_seq] or (seq == state[cut_seq] and index >= state[cut_index])
            ):
                release()
                return False
            state[SEQ] = seq
            state[INDEX] = index
            release()
            return True

        self.claim = claim


def _nothing() -> None:
    pass
