"""Fixtures shared by every Kubernetes-integration test: a live API emulator and a client wired to it.

The client is the official ``kubernetes`` package talking HTTP over a real socket, so tests exercise the
same serialisation, query encoding and error paths as against a cluster.
"""
from __future__ import annotations

import pytest

from tests.support.kube_emulator import KubeEmulator


@pytest.fixture
def kube_emulator():
    """A started ``KubeEmulator`` (manual clock: call ``advance()`` to run grace/kubelet/GC), stopped after."""
    emulator = KubeEmulator().start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def kube_client(kube_emulator):
    """A ``kubernetes.client.ApiClient`` configured for ``kube_emulator``."""
    from kubernetes import client

    api_client = client.ApiClient(kube_emulator.configuration())
    try:
        yield api_client
    finally:
        api_client.close()
