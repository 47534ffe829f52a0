"""The tenant and operator REST API (Django REST Framework).

Layout: ``serializers`` (explicit Input / Output shapes), ``permissions`` (who is the caller:
a tenant or an operator), ``views`` (thin: resolve tenant, call a selector or a service,
serialize), ``urls`` (one router, ``queues-api``), ``exceptions`` (the one error mapping),
``parsers`` / ``pagination`` / ``throttling`` / ``schema`` (input limits and OpenAPI).

May import: queues_app models, choices, errors, ``selectors`` (reads), ``services`` (writes) and the
cycle's doors (``cycle.contract`` checks, ``cycle.dryrun``, ``cycle.whatif``, ``cycle.rollup``).
Must not import: ``scheduler_engine``, ``queues_app.tasks`` (a cycle is asked for by task name).
"""
