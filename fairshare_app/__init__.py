"""Usage accounting, decay and fair-share reports, GPU-hour budgets (issue #6).

May import: ``queues_app`` (its models, choices, errors, selectors and the engine boundary
``queues_app.cycle.engine_io`` for the engine's usage-window rules); registers itself as the cycle's usage provider
(``queues_app.cycle.usage``, in ``apps.py``).  ``queues_app`` never imports it.
"""
