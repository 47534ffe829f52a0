"""Kubernetes integration: cluster connection, sync in, outbox dispatch, API emulator for tests and the demo."""
