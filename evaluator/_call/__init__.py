"""The call layer: one user call, the same in every executor, and all a worker process
imports of the engine (with ``_exceptions``): no asyncio, no model client, no pipeline.
``tests/evaluator/call/test_worker_imports.py`` keeps it so."""
