"""The process executor: sync user functions in worker processes, isolated and batched.

One module per job (see ``docs/architecture/process.md``):

- ``_executor``: :class:`ProcessExecutor`, the :class:`Executor` that ties the parts
  together: submit, dispatch, results, a worker's death;
- ``_queue``: the pure work queue: pending calls, batches and segments, requeue of
  unfinished calls, batch sizing from the measured cost (no processes, no loop);
- ``_pool``: the worker processes: spawn, warm spare, replacement, watchdog, reaping,
  stalled workers' stand-ins;
- ``_forkserver``: the engine's end of the fork server: start it, fork workers, their
  handles;
- ``_zygote``: the fork server's own loop (what runs in the fork server process);
- ``_channel``: the engine's end of one worker's socket (framing, ``add_reader``);
- ``_wire``: the protocol both sides share (frames, message kinds, shared state slots);
- ``_cut``: the calls a stalled worker gives up, agreed under a lock with its claim of
  each call it begins (both sides);
- ``_child``: the worker's own main loop (what runs in the worker process);
- ``_relay``: ``skynet.llm`` from workers, relayed to the engine's model client, and the
  replies kept for replay.

This ``__init__`` stays empty: a worker process imports ``_child`` through it.
"""
