"""Input bounds (reliability.md 3.4 / T-S6): absurd input is a 400 naming the field (413 for
an oversize body), never a 500 and never a partial write."""
from __future__ import annotations

import json

import pytest

from queues_app.models import QueueResource, QuotaChange, Task, Workload
from tests.queues_app.api.conftest import workload_body

URL = "/api/v1/workloads/"


def _post_raw(client, url: str, raw: str | bytes):
    return client.generic("POST", url, raw, content_type="application/json")


def _assert_nothing_stored() -> None:
    assert Workload.objects.count() == 0
    assert Task.objects.count() == 0


@pytest.mark.parametrize(
    ("task", "field"),
    [
        ({"gpu": -1}, "task.gpu"),
        ({"gpu": -2}, "task.gpu"),
        ({"gpu": "NaN"}, "task.gpu"),
        ({"gpu": "nan"}, "task.gpu"),
        ({"gpu": "Infinity"}, "task.gpu"),
        ({"gpu": "-inf"}, "task.gpu"),
        ({"gpu": 1e30}, "task.gpu"),
        ({"gpu": "1" * 2000}, "task.gpu"),
        ({"gpu": 0.123456}, "task.gpu"),
        ({"gpu": True}, "task.gpu"),
        ({"gpu": [1]}, "task.gpu"),
        ({"cpu_millis": 10**30}, "task.cpu_millis"),
        ({"cpu_millis": -1}, "task.cpu_millis"),
        ({"cpu_millis": 1.5}, "task.cpu_millis"),
        ({"memory_bytes": "NaN"}, "task.memory_bytes"),
        ({"memory_bytes": 2**64}, "task.memory_bytes"),
        ({"gpu_memory_mib": -5}, "task.gpu_memory_mib"),
        ({"priority": 10**9}, "task.priority"),
        ({"node_selector": {"k": {"nested": "dict"}}}, "task.node_selector.k"),
        ({"node_selector": {f"k{i}": "v" for i in range(100)}}, "task.node_selector"),
        ({"node_selector": {"k" * 400: "v"}}, "task.node_selector"),
        ({"node_selector": {"k": "v" * 100}}, "task.node_selector.k"),
        ({"name": "bad name!"}, "task.name"),
        ({"bogus": 1}, "task.bogus"),
        ("not-an-object", "task"),
    ],
)
def test_bad_task_values_are_field_errors(alice_client, nodes, task, field):
    response = alice_client.post(URL, workload_body(task=task, replicas=1), format="json")
    assert response.status_code == 400, response.content
    extra = response.json()["extra"]
    assert any(k == field or k.startswith(field) for k in extra), extra
    _assert_nothing_stored()


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"replicas": 0}, "replicas"),
        ({"replicas": 10_001}, "replicas"),
        ({"replicas": 10**30}, "replicas"),
        ({"priority": "high"}, "priority"),
        ({"priority": 10**7}, "priority"),
        ({"priority_class": "gold"}, "priority_class"),
        ({"priority_class": "build", "priority": 5}, "priority"),
        ({"min_available": 3}, "min_available"),
        ({"min_available": 0}, "min_available"),
        ({"name": ""}, "name"),
        ({"name": "x" * 10_000}, "name"),
        ({"name": "../etc"}, "name"),
        ({"queue": 12}, "queue"),
        ({"queue": None}, "queue"),
        ({"queue": "nope"}, "queue"),
        ({"queue": "root"}, "queue"),  # exists, but not granted to team-a
        ({"min_avaliable": 1}, "min_avaliable"),
        ({"preemption_delay_seconds": -1}, "preemption_delay_seconds"),
        ({"staleness_grace_period_seconds": 10**12}, "staleness_grace_period_seconds"),
        ({"topology_required": "t" * 1000}, "topology_required"),
        ({"tasks": [{"gpu": 1}]}, "tasks"),  # tasks together with replicas+task
    ],
)
def test_bad_workload_values_are_field_errors(alice_client, nodes, override, field):
    response = alice_client.post(URL, workload_body(**override), format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["extra"], response.json()
    _assert_nothing_stored()


def test_too_many_tasks(alice_client, nodes):
    body = {"name": "many", "queue": "a-train", "tasks": [{"gpu": 0} for _ in range(10_001)]}
    response = alice_client.post(URL, body, format="json")
    assert response.status_code == 400
    assert "tasks" in response.json()["extra"]
    _assert_nothing_stored()


def test_errors_in_a_task_list_name_the_index(alice_client, nodes):
    body = {"name": "listed", "queue": "a-train", "tasks": [{"gpu": 1}, {"gpu": 1}, {"gpu": "NaN"}]}
    response = alice_client.post(URL, body, format="json")
    assert response.status_code == 400
    assert list(response.json()["extra"]) == ["tasks[2].gpu"]


def test_duplicate_task_names_are_named(alice_client, nodes):
    body = {"name": "dup", "queue": "a-train", "tasks": [{"name": "t", "gpu": 1}, {"name": "t", "gpu": 1}]}
    response = alice_client.post(URL, body, format="json")
    assert response.status_code == 400
    assert response.json()["extra"] == {"tasks[1].name": ["duplicate task name 't' (also tasks[0].name)"]}
    _assert_nothing_stored()


@pytest.mark.parametrize(
    "raw",
    [
        '{"name": "x", "queue": "a-train", "task": {"gpu": NaN}}',
        '{"name": "x", "queue": "a-train", "task": {"gpu": Infinity}}',
        '{"name": "x", "queue": "a-train", "task": {"gpu": 1e309}}',
        "{not json",
        "[" * 100 + "]" * 100,
        "[" * 100_000 + "]" * 100_000,
        '{"a":' * 50 + "1" + "}" * 50,
        "[]",
        '"a string"',
        "null",
        "\xff\xfe",
    ],
)
def test_malformed_json_is_400(alice_client, nodes, raw):
    response = _post_raw(alice_client, URL, raw.encode("latin-1") if raw.startswith("\xff") else raw)
    assert response.status_code == 400, response.content[:200]
    assert "message" in response.json()
    _assert_nothing_stored()


def test_oversize_body_is_413(alice_client, nodes, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    body = json.dumps(workload_body(description="x" * 20_000))
    response = _post_raw(alice_client, URL, body)
    assert response.status_code == 413
    assert response.json()["message"] == "Request body too large."
    _assert_nothing_stored()


def test_default_body_limit_is_set(settings):
    assert 0 < settings.DATA_UPLOAD_MAX_MEMORY_SIZE <= 10 * 2**20


def test_unsupported_media_type(alice_client, nodes):
    response = alice_client.generic("POST", URL, "name=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415


def test_page_size_is_capped(alice_client, nodes):
    response = alice_client.get(URL + "?page_size=100000")
    assert response.status_code == 200
    response = alice_client.get(URL + "?page=999")
    assert response.status_code == 404
    response = alice_client.get(URL + "?ordering=password")
    assert response.status_code == 400
    assert "ordering" in response.json()["extra"]
    response = alice_client.get(URL + "?status=Bogus")
    assert response.status_code == 400
    assert "status" in response.json()["extra"]


@pytest.mark.parametrize("pk", ["0", "-1", "abc", "9" * 30, "1e3", "%00"])
def test_absurd_path_ids_are_404(alice_client, db, tenants, pk):
    for url in (f"/api/v1/workloads/{pk}/", f"/api/v1/workloads/{pk}/why/", f"/api/v1/queues/{pk}/"):
        response = alice_client.get(url)
        assert response.status_code == 404, url


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"gpu": {"quota": -2}}, "gpu.quota"),
        ({"gpu": {"quota": "NaN"}}, "gpu.quota"),
        ({"gpu": {"limit": "Infinity"}}, "gpu.limit"),
        ({"gpu": {"limit": 10**30}}, "gpu.limit"),
        ({"cpu": {"over_quota_weight": -0.5}}, "cpu.over_quota_weight"),
        ({"gpu": {"quota": 10**8}}, "gpu.quota"),
        ({"disk": {"quota": 1}}, "disk"),
        ({"gpu": {"quotaa": 1}}, "gpu.quotaa"),
    ],
)
def test_quota_edits_are_validated_and_all_or_nothing(operator_client, queue_tree, body, field):
    queue = queue_tree["a-train"]
    before = list(QueueResource.objects.filter(queue=queue).order_by("resource").values())
    history = QuotaChange.objects.count()
    response = operator_client.patch(f"/api/v1/queues/{queue.pk}/quotas/", {"memory": {"quota": 5}, **body},
                                     format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["extra"], response.json()
    assert list(QueueResource.objects.filter(queue=queue).order_by("resource").values()) == before
    assert QuotaChange.objects.count() == history


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "n1", "gpus": -1}, "gpus"),
        ({"name": "n1", "gpus": 10**30}, "gpus"),
        ({"name": "n1", "reserved_gpus": "NaN"}, "reserved_gpus"),
        ({"name": "n1", "labels": {"a": ["x"]}}, "labels.a"),
        ({"name": "bad name"}, "name"),
        ({"name": "n1", "colour": "red"}, "colour"),
    ],
)
def test_node_input_bounds(operator_client, db, body, field):
    response = operator_client.post("/api/v1/nodes/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["extra"], response.json()


# ----------------------------------------------------------------------------- issue #16 repros
#
# Each one answered a 500, a debug page, or accepted / silently changed nonsense before.


@pytest.mark.parametrize(("override", "field"), [
    ({"queue": "a-tr\u0000ain"}, "queue"),
    ({"name": "tr\u0000ain"}, "name"),
    ({"node_selector": {"zo\u0000ne": "a"}}, "node_selector"),
    ({"task": {"gpu": 1, "node_selector": {"zone": "\u0000"}}}, "task.node_selector.zone"),
])
def test_a_nul_character_is_a_400_naming_the_field(alice_client, nodes, override, field):
    response = alice_client.post(URL, workload_body(**override), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["extra"] == {field: ["Null characters are not allowed."]}
    _assert_nothing_stored()


@pytest.mark.parametrize("query", ["queue=%00", "status=Pending%00", "%00=1", "ordering=name%00"])
def test_a_nul_character_in_a_query_parameter_is_a_400(alice_client, nodes, query):
    response = alice_client.get(f"{URL}?{query}")
    assert response.status_code == 400, response.content
    assert response.json()["message"] == "Invalid input." and response.json()["extra"]


def test_a_nul_character_in_a_path_or_header_is_refused(alice_client, operator_client, nodes):
    assert operator_client.get("/api/v1/queues/a-tr%00ain/").status_code == 404
    response = alice_client.get(URL, HTTP_X_TENANT="team-a\u0000")
    assert response.status_code == 400 and "X-Tenant" in response.json()["extra"]


@pytest.mark.parametrize("name", ["abc\n", "abc\r\n", " abc", "abc ", "\tabc"])
def test_a_name_with_whitespace_is_refused_not_stripped(alice_client, nodes, name):
    response = alice_client.post(URL, workload_body(name=name), format="json")
    assert response.status_code == 400, response.content
    assert "name" in response.json()["extra"]
    _assert_nothing_stored()


def test_the_services_refuse_a_trailing_newline_too(queue_tree):
    from queues_app.errors import ApplicationError
    from queues_app.services import workload_submit

    with pytest.raises(ApplicationError) as err:
        workload_submit(queue=queue_tree["a-train"], name="abc\n", task={"gpu": 1})
    assert "name" in err.value.extra
    _assert_nothing_stored()


@pytest.mark.parametrize("pk", ["\u0663", "\u0661\u0662", "\uff11", "+1", " 1", "1_0"])
def test_non_ascii_digits_in_ids_do_not_alias_real_ids(alice_client, nodes, pk):
    """/workloads/٣/ (Arabic-Indic three) resolved to workload 3."""
    ids = [alice_client.post(URL, workload_body(f"w{i}"), format="json").json()["id"] for i in range(12)]
    assert alice_client.get(f"{URL}{ids[0]}/").status_code == 200
    for url in (f"{URL}{pk}/", f"{URL}{pk}/why/", f"/api/v1/queues/{pk}/"):
        response = alice_client.get(url)
        assert response.status_code == 404, (url, response.content[:200])


@pytest.mark.parametrize("size", ["0", "-5", "abc", "1.5", "\u0663", ""])
def test_a_bad_page_size_is_a_400(alice_client, nodes, size):
    response = alice_client.get(URL, {"page_size": size})
    assert response.status_code == 400, response.content
    assert "page_size" in response.json()["extra"]


def test_a_node_selector_key_must_be_a_kubernetes_label_key(alice_client, nodes):
    for key in ("not a key!", "-lead", "a" * 64, "Example.COM/zone", "/zone"):
        response = alice_client.post(URL, workload_body(node_selector={key: "v"}), format="json")
        assert response.status_code == 400, (key, response.content)
        assert any(k.startswith("node_selector") for k in response.json()["extra"]), response.json()
    assert alice_client.post(URL, workload_body(node_selector={"topology.kubernetes.io/zone": "a"}),
                             format="json").status_code == 201


def test_reserved_gpus_above_the_node_gpus_are_refused(operator_client, db):
    response = operator_client.post("/api/v1/nodes/", {"name": "n1", "gpus": 2, "reserved_gpus": 5}, format="json")
    assert response.status_code == 400 and "reserved_gpus" in response.json()["extra"]
    created = operator_client.post("/api/v1/nodes/", {"name": "n1", "gpus": 2}, format="json")
    assert created.status_code == 201
    response = operator_client.patch(f"/api/v1/nodes/{created.json()['id']}/", {"reserved_gpus": 3}, format="json")
    assert response.status_code == 400 and "reserved_gpus" in response.json()["extra"], response.content
    response = operator_client.patch(f"/api/v1/nodes/{created.json()['id']}/", {"gpus": 1, "reserved_gpus": 2},
                                     format="json")
    assert response.status_code == 400 and "reserved_gpus" in response.json()["extra"], response.content
