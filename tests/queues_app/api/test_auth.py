"""Authentication, default deny, tenant selection and per-tenant throttling (T-S8)."""
from __future__ import annotations

import pytest
from rest_framework.settings import api_settings
from rest_framework.test import APIClient

from tests.queues_app.api.conftest import workload_body


class TokenTests:
    def test_it_issues_a_token_that_authenticates(self, anon_client, tenants):
        response = anon_client.post("/api/v1/auth/token/", {"username": "alice", "password": "pw-alice"},
                                    format="json")
        assert response.status_code == 200
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
        me = client.get("/api/v1/me/").json()
        assert me == {"username": "alice", "is_operator": False, "tenant": "team-a", "tenants": ["team-a"]}

    def test_wrong_password_is_400_without_saying_which_part(self, anon_client, tenants):
        for username in ("alice", "nobody"):
            response = anon_client.post("/api/v1/auth/token/", {"username": username, "password": "nope"},
                                        format="json")
            assert response.status_code == 400
            assert response.json()["extra"] == {"password": ["Unknown user or wrong password."]}

    def test_basic_auth_is_off(self, tenants):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Basic YWxpY2U6cHctYWxpY2U=")  # alice:pw-alice
        assert client.get("/api/v1/workloads/").status_code == 401


class DefaultDenyTests:
    @pytest.mark.parametrize("url", ["/api/v1/workloads/", "/api/v1/queues/", "/api/v1/me/", "/api/v1/nodes/",
                                     "/api/v1/cycles/"])
    def test_anonymous_is_401(self, anon_client, db, url):
        response = anon_client.get(url)
        assert response.status_code == 401
        assert set(response.json()) == {"message", "extra"}

    def test_user_without_tenant_is_403(self, user_factory):
        from queues_app.services.tenants import api_token_issue

        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user_factory('drifter'))}")
        response = client.get("/api/v1/workloads/")
        assert response.status_code == 403
        assert response.json()["message"] == "You are not a member of an active tenant."

    def test_inactive_tenant_is_403(self, alice_client, tenants):
        from queues_app.services import tenant_update

        tenant_update(tenant=tenants["team_a"], data={"is_active": False})
        assert alice_client.get("/api/v1/workloads/").status_code == 403

    def test_member_of_two_tenants_picks_one(self, tenants, queue_tree, nodes):
        from queues_app.services import tenant_create
        from queues_app.services.tenants import api_token_issue

        tenant_create(name="team-c", members=[tenants["alice"]], queues=[queue_tree["b-train"]])
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=tenants['alice'])}")
        assert client.get("/api/v1/workloads/").status_code == 403
        assert client.get("/api/v1/workloads/", HTTP_X_TENANT="team-b").status_code == 403
        response = client.post("/api/v1/workloads/", workload_body(queue="b-train"), format="json",
                               HTTP_X_TENANT="team-c")
        assert response.status_code == 201 and response.json()["tenant"] == "team-c"
        # ...and acting for team-a, team-c's workload is invisible.
        assert client.get(f"/api/v1/workloads/{response.json()['id']}/", HTTP_X_TENANT="team-a").status_code == 404


class ThrottleTests:
    @pytest.fixture
    def low_rates(self, settings):
        rates = {**api_settings.DEFAULT_THROTTLE_RATES, "tenant": "1000/min", "submit": "3/min", "anon": "2/min"}
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": rates}
        yield

    def test_submits_are_limited_per_tenant_not_per_user(self, low_rates, alice_client, bob_client, charlie_client,
                                                         nodes):
        codes = [alice_client.post("/api/v1/workloads/", workload_body(f"w{i}"), format="json").status_code
                 for i in range(2)]
        codes.append(bob_client.post("/api/v1/workloads/", workload_body("w2"), format="json").status_code)
        response = bob_client.post("/api/v1/workloads/", workload_body("w3"), format="json")
        assert codes == [201, 201, 201]
        assert response.status_code == 429 and int(response["Retry-After"]) > 0
        assert set(response.json()) == {"message", "extra"}
        # Another tenant has its own budget; reads are not submit-limited.
        assert charlie_client.post("/api/v1/workloads/", workload_body(queue="b-train"),
                                   format="json").status_code == 201
        assert alice_client.get("/api/v1/workloads/").status_code == 200

    def test_a_tenant_at_its_submit_limit_can_still_cancel(self, low_rates, alice_client, nodes):
        """Issue #16: cancel (a POST) was counted against the submit budget."""
        ids = [alice_client.post("/api/v1/workloads/", workload_body(f"w{i}"), format="json").json()["id"]
               for i in range(3)]
        assert alice_client.post("/api/v1/workloads/", workload_body("w3"), format="json").status_code == 429
        for pk in ids:
            response = alice_client.post(f"/api/v1/workloads/{pk}/cancel/")
            assert response.status_code == 200 and response.json()["status"] == "Cancelled", response.content
        # ...and the cancels did not eat into the (still exhausted) submit budget either way
        assert alice_client.post("/api/v1/workloads/", workload_body("w4"), format="json").status_code == 429

    def test_token_endpoint_is_limited_per_client(self, low_rates, anon_client, tenants):
        for _ in range(2):
            anon_client.post("/api/v1/auth/token/", {"username": "alice", "password": "x"}, format="json")
        response = anon_client.post("/api/v1/auth/token/", {"username": "alice", "password": "pw-alice"},
                                    format="json")
        assert response.status_code == 429
