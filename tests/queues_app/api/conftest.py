"""API fixtures: token clients for alice (team-a), bob (team-a), charlie (team-b, the
outsider) and an operator, on the shared ``tenants`` / ``queue_tree`` fixtures, plus two
8-GPU nodes."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient


@pytest.fixture(autouse=True)
def _fresh_throttle_cache():
    """Throttle counters live in the cache; each test starts with a full budget."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


def _client_for(user) -> APIClient:
    from queues_app.services.tenants import api_token_issue

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user)}")
    return client


@pytest.fixture
def nodes(db):
    from tests.queues_app.factories import NodeFactory

    return [NodeFactory(name="node-a", gpus=8), NodeFactory(name="node-b", gpus=8)]


@pytest.fixture
def alice_client(tenants):
    return _client_for(tenants["alice"])


@pytest.fixture
def bob_client(tenants):
    return _client_for(tenants["bob"])


@pytest.fixture
def charlie_client(tenants):
    return _client_for(tenants["charlie"])


@pytest.fixture
def operator_client(operator):
    return _client_for(operator)


@pytest.fixture
def anon_client():
    return APIClient()


def workload_body(name: str = "train-1", queue: str = "a-train", **extra):
    body = {"name": name, "queue": queue, "replicas": 2,
            "task": {"gpu": 1, "cpu_millis": 1000, "memory_bytes": 2**30}}
    body.update(extra)
    return body
