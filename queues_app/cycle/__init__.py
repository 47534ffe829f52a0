"""The scheduling cycle: database -> engine -> database, and the tools built on the same path.

``run`` (lease, snapshot, engine, apply: one cycle), ``apply`` (typed decisions -> checked plan ->
set-based writes), ``cluster`` (what the cluster confirmed: binds, releases), ``rollup`` (workload
status, queue allocation, subgroup status), ``config``, ``faults`` (named phase points tests act
on), ``usage`` (the usage provider the cycle asks, registered by fairshare_app), ``engine_io`` (the
engine boundary: the ONE Django module that imports ``scheduler_engine``; DB -> scenario ->
Snapshot, CycleResult -> typed ``EngineDecisions``), ``fields`` (engine paths -> API field names),
``contract`` (the engine's input rules at every door); ``dryrun``, ``whatif``, ``replay`` and
``scenario`` (scenario import) run the engine on the same input without scheduling.

May import: queues_app models, choices, errors and services; ``queues_app.kube`` only to hand the
cycle's decisions to the Kubernetes outbox.  Must not import: ``fairshare_app``, ``queues_app.tasks``,
the API or the admin.
"""
