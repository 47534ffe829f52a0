"""API clients for the fair-share endpoints: alice and bob (team-a), charlie (team-b, the
outsider) and an operator, on the shared ``tenants`` / ``queue_tree`` fixtures."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient


@pytest.fixture(autouse=True)
def _fresh_throttle_cache():
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


def client_for(user) -> APIClient:
    from queues_app.services.tenants import api_token_issue

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user)}")
    return client


@pytest.fixture
def alice_client(tenants):
    return client_for(tenants["alice"])


@pytest.fixture
def charlie_client(tenants):
    return client_for(tenants["charlie"])


@pytest.fixture
def operator_client(operator):
    return client_for(operator)
