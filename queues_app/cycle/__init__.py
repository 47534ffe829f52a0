"""The scheduling cycle: database -> engine -> database, and the tools built on the same path.

``run`` (lease, snapshot, engine, apply: one cycle), ``apply`` (decisions -> checked plan -> writes),
``cluster`` (what the cluster confirmed: binds, releases), ``config``, ``faults`` (named phase
points for crash and interleaving tests), ``engine_io`` (the engine boundary: the ONE Django module
that imports ``scheduler_engine``).

May import: queues_app models, choices, errors and services; ``queues_app.kube`` only to hand the
cycle's decisions to the Kubernetes outbox.  Must not import: ``fairshare_app``, ``queues_app.tasks``,
the API or the admin.
"""
