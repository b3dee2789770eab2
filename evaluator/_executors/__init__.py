"""Executors: where user calls run (the event loop, threads, worker processes, Ray).

Import from the modules: ``_base`` (the :class:`Executor` interface, its statistics and
options), ``_factory`` (:func:`open_executor`, the one way the engine opens one),
``_bridge`` (``skynet.llm`` from the loop or an engine thread), ``_async``, ``_threads``,
``_process`` and ``_ray``. This ``__init__`` stays empty so that a worker
process, which imports ``_process._child``, imports nothing of the engine side.
"""
