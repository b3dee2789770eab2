"""Executors: where user calls run (the event loop, threads, worker processes).

Import from the modules: ``_base`` (the :class:`Executor` interface, its statistics and
options), ``_factory`` (:func:`open_executor`, the one way the engine opens one),
``_async``, ``_threads`` and ``_process``. This ``__init__`` stays empty so that a worker
process, which imports ``_process._child``, imports nothing of the engine side.
"""
