"""The Ray executor: sync user functions on a Ray cluster, under each node's own supervision.

One module per job (see ``docs/architecture/ray.md``):

- ``_executor``: :class:`RayExecutor`, the :class:`Executor` on the driver: submit,
  batches placed on the node actors, outcomes back, the calls of a lost actor requeued;
- ``_members``: the driver's handles on the node actors: boot, the per-node roster,
  loss and replacement, new nodes joining;
- ``_actor``: the node actor (what runs on each node): the user's file imported, a
  ``ProcessExecutor`` running the batches, outcomes and model requests sent back;
- ``_boot``: the actor's first step on a node: unpack the engine's files, hand over;
- ``_ship``: the bundle the nodes boot from: the engine's packages, the user's folder;
- ``_cluster``: the process's one connection to Ray, and the alive nodes.

This ``__init__`` stays empty: ``import evaluator`` never imports Ray, and a node imports
``_actor`` through it.
"""
