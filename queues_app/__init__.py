"""Queues, quotas, nodes, workloads, tenants and the scheduling-cycle records."""
