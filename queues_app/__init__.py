"""Queues, quotas, nodes, workloads, tenants, the scheduling cycle and the Kubernetes integration.

Sub-packages by sub-domain: ``models/`` (rows), ``services/`` (domain writes), ``selectors.py``
(every read, tenant first), ``api/`` (REST), the admin (``admin*.py``), ``cycle/`` (the scheduling
cycle and the engine boundary), ``kube/`` (Kubernetes mode), ``tasks.py`` (Celery, thin).

May import: Django, DRF, Celery and ``scheduler_engine`` (through ``cycle/engine_io.py`` only).
Must not import: ``fairshare_app`` (it registers itself as the usage provider), ``tests``.
"""
