"""Kubernetes integration (kubernetes mode): the connection, the cluster -> database reflector, and
the outbox that carries the cycle's decisions out.

``client`` (connection from settings), ``translate`` (API objects -> row values, pure),
``reflector`` (list + watch loop), ``observed`` / ``observed_dra`` (observed state -> rows: the one
place cluster facts change rows), ``outbox`` (outbox rows written in the cycle's transaction and
their dispatcher: binds, evictions, events, conditions), ``calls`` (one function per API request the
dispatcher makes), ``conditions`` / ``condition_rows`` (the PodScheduled condition, pure / rows),
``scaling`` / ``autoscale`` (utility pods for autoscalers, pure / I/O).

May import: queues_app models, choices, errors, services and ``queues_app.cycle`` (cluster
confirmations, config).  Must not import: ``queues_app.tasks`` (tasks are enqueued by name),
the API, the admin.  The API emulator the tests use is test tooling: ``tests/support/kube_emulator``.
"""
