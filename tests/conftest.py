"""Project-wide fixtures.

Tenants follow the alice / bob / charlie pattern: alice and bob are members of tenant
``team-a`` (granted leaf queue ``a-train``), charlie is the outsider in ``team-b`` (granted
``b-train``).  Every isolation test needs all three.
"""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings):
    """MD5 hashing: test users are created by the dozen; real hashers take ~0.3 s each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def user_factory(db):
    from django.contrib.auth import get_user_model

    user_model = get_user_model()

    def make(username: str, **extra):
        return user_model.objects.create_user(username=username, password="pw-" + username, **extra)

    return make


@pytest.fixture
def operator(user_factory):
    """A staff superuser: the admin and tenant=None selectors act as this."""
    return user_factory("operator", is_staff=True, is_superuser=True)


@pytest.fixture
def queue_tree(db):
    """root ─┬─ team-a-dept ── a-train
             └─ team-b-dept ── b-train       (gpu quotas 8 / 4 / 4 / 4 / 4)."""
    from queues_app.services.queues import queue_create

    root = queue_create(name="root", quotas={"gpu": {"quota": 8}})
    a_dept = queue_create(name="team-a-dept", parent=root, quotas={"gpu": {"quota": 4}})
    b_dept = queue_create(name="team-b-dept", parent=root, quotas={"gpu": {"quota": 4}})
    a_train = queue_create(name="a-train", parent=a_dept, quotas={"gpu": {"quota": 4}})
    b_train = queue_create(name="b-train", parent=b_dept, quotas={"gpu": {"quota": 4}})
    return {"root": root, "team-a-dept": a_dept, "team-b-dept": b_dept, "a-train": a_train, "b-train": b_train}


@pytest.fixture
def tenants(user_factory, queue_tree):
    """{'alice', 'bob', 'charlie', 'team_a', 'team_b'}: charlie is the outsider to team_a."""
    from queues_app.services.tenants import tenant_create

    alice, bob, charlie = user_factory("alice"), user_factory("bob"), user_factory("charlie")
    team_a = tenant_create(name="team-a", members=[alice, bob], queues=[queue_tree["a-train"]])
    team_b = tenant_create(name="team-b", members=[charlie], queues=[queue_tree["b-train"]])
    return {"alice": alice, "bob": bob, "charlie": charlie, "team_a": team_a, "team_b": team_b}
