"""The Helm chart renders to valid Kubernetes objects for the documented value combinations.

Every manifest is checked twice against the ``kubernetes`` client's models: every key must be
a field of the model at that position (a typo such as ``imagePullPolicys`` fails), scalar types
must match, and deserialising through the client must satisfy its required-field validation.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import kubernetes.client as k8s
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helm_render import TemplateError, render_chart  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "kaiplatform"
SECRETS = {"secrets": {"databaseUrl": "postgres://kai:pw@db:5432/kai", "brokerUrl": "redis://redis:6379/0",
                       "secretKey": "x" * 50}}

VALUE_SETS = {
    "defaults+secrets": SECRETS,
    "existing-secret": {"existingSecret": "kai-secrets"},
    "everything-on": {**SECRETS, "dispatcher": {"enabled": True}, "autoscaling": {"enabled": True}, "ingress": {"enabled": True, "className": "nginx", "tlsSecretName": "kai-tls"},
                      "bundled": {"postgresql": True, "redis": True}, "nodeSelector": {"pool": "system"},
                      "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]},
    "minimal": {"existingSecret": "s", "dispatcher": {"enabled": False}, "sync": {"enabled": False},
                "migrations": {"enabled": False},
                "rbac": {"create": False}, "serviceAccount": {"create": False, "name": "external-sa"}},
}


def manifests(values: dict) -> list[dict]:
    out = []
    for name, text in render_chart(CHART, values=values).items():
        for doc in yaml.safe_load_all(text):
            if doc:
                doc["__file__"] = name
                out.append(doc)
    return out


def model_for(api_version: str, kind: str):
    version = api_version.split("/")[-1]
    cls = getattr(k8s, version.capitalize() + kind, None)
    assert cls is not None, f"no kubernetes model for {api_version} {kind}"
    return cls


_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "bytes": str}  # bytes: base64 text


def check_against_model(data, type_name: str, path: str, errors: list[str]) -> None:
    """Walk ``data`` along the client's ``openapi_types`` and collect every mismatch."""
    if data is None:
        return
    if m := re.fullmatch(r"[lL]ist\[(.+)\]", type_name):
        if not isinstance(data, list):
            errors.append(f"{path}: expected a list, got {type(data).__name__}")
            return
        for i, item in enumerate(data):
            check_against_model(item, m.group(1), f"{path}[{i}]", errors)
        return
    if m := re.fullmatch(r"(?:dict\(str, (.+)\)|Dict\[str, (.+)\])", type_name):
        if not isinstance(data, dict):
            errors.append(f"{path}: expected a map, got {type(data).__name__}")
            return
        for k, v in data.items():
            check_against_model(v, m.group(1) or m.group(2), f"{path}.{k}", errors)
        return
    if type_name in _PRIMITIVES:
        if not isinstance(data, _PRIMITIVES[type_name]) or (type_name == "int" and isinstance(data, bool)):
            errors.append(f"{path}: expected {type_name}, got {data!r}")
        return
    if type_name in ("object", "datetime", "date"):
        return
    cls = getattr(k8s, type_name)
    if not isinstance(data, dict):
        errors.append(f"{path}: expected a {type_name} object, got {data!r}")
        return
    by_json = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    for key, value in data.items():
        if key not in by_json:
            errors.append(f"{path}.{key}: not a field of {type_name}")
            continue
        check_against_model(value, cls.openapi_types[by_json[key]], f"{path}.{key}", errors)


@pytest.mark.parametrize("case", sorted(VALUE_SETS))
def test_every_manifest_matches_the_kubernetes_schema(case):
    api = k8s.ApiClient()
    docs = manifests(VALUE_SETS[case])
    assert docs, "chart rendered nothing"
    for doc in docs:
        source = doc.pop("__file__")
        cls = model_for(doc["apiVersion"], doc["kind"])
        errors: list[str] = []
        check_against_model(doc, cls.__name__, f"{source}:{doc['kind']}", errors)
        assert not errors, "\n".join(errors)
        # The client's own deserialiser enforces required fields (e.g. containers[].name).
        api._ApiClient__deserialize(doc, cls.__name__)


def kinds(values):
    return sorted((d["kind"], d["metadata"]["name"]) for d in manifests(values))


def test_default_release_has_every_required_component():
    docs = manifests(SECRETS)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    assert set(deployments) == {"kai-kaiplatform-web", "kai-kaiplatform-worker", "kai-kaiplatform-beat",
                                "kai-kaiplatform-dispatcher", "kai-kaiplatform-sync"}
    dispatcher = deployments["kai-kaiplatform-dispatcher"]["spec"]["template"]["spec"]["containers"][0]
    assert dispatcher["args"] == ["dispatcher"]
    assert deployments["kai-kaiplatform-sync"]["spec"]["template"]["spec"]["containers"][0]["args"] == ["sync"]
    beat = deployments["kai-kaiplatform-beat"]
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"
    assert {d["metadata"]["name"] for d in by_kind["PodDisruptionBudget"]} == {
        "kai-kaiplatform-web", "kai-kaiplatform-worker"}
    job = by_kind["Job"][0]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    for name, dep in deployments.items():
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        container = pod["containers"][0]
        assert container["resources"]["requests"], name
        refs = {next(iter(r.values()))["name"] for r in container["envFrom"]}
        assert refs == {"kai-kaiplatform"}, name
    web = deployments["kai-kaiplatform-web"]["spec"]["template"]["spec"]["containers"][0]
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "Ingress" not in by_kind and len([d for d in by_kind["Deployment"] if "postgresql" in d["metadata"]["name"]]) == 0


def test_the_cycle_limits_reach_the_configmap_in_their_order():
    """engine budget < soft < hard < lease (queues_app.cycle.config); a large cluster raises all four."""
    for values, want in ((SECRETS, ("25", "50", "60", "90")),
                         ({**SECRETS, "config": {"cycleEngineBudget": "120", "cycleSoftTimeLimit": "170",
                                                 "cycleTimeLimit": "180", "cycleLeaseSeconds": "240"}},
                          ("120", "170", "180", "240"))):
        data = next(d for d in manifests(values) if d["kind"] == "ConfigMap")["data"]
        got = tuple(data[k] for k in ("KAI_CYCLE_ENGINE_BUDGET", "KAI_CYCLE_SOFT_TIME_LIMIT", "KAI_CYCLE_TIME_LIMIT",
                                      "KAI_CYCLE_LEASE_SECONDS"))
        assert got == want
        assert [float(x) for x in got] == sorted(float(x) for x in got)


def test_rbac_is_exactly_the_minimal_set():
    role = next(d for d in manifests(SECRETS) if d["kind"] == "ClusterRole")
    granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    assert granted == {
        ("nodes", "get"), ("nodes", "list"), ("nodes", "watch"),
        ("pods", "get"), ("pods", "list"), ("pods", "watch"),
        ("pods/binding", "create"), ("pods/eviction", "create"), ("pods/status", "patch"),
        ("events", "create"), ("events", "patch"),
        ("jobs", "get"), ("cronjobs", "get"), ("replicasets", "get"), ("statefulsets", "get"), ("deployments", "get"),
        ("podgroups", "get"), ("podgroups", "list"), ("podgroups", "watch"),
        ("deviceclasses", "get"), ("deviceclasses", "list"), ("deviceclasses", "watch"),
        ("resourceslices", "get"), ("resourceslices", "list"), ("resourceslices", "watch"),
        ("resourceclaims", "get"), ("resourceclaims", "list"), ("resourceclaims", "watch"),
        ("resourceclaims/status", "patch"), ("resourceclaims/status", "update"),
    }
    # Leader election uses database leases: no Kubernetes Lease permissions are requested.
    assert not [d for d in manifests(SECRETS) if d["kind"] in ("Role", "RoleBinding")]


def test_readme_lists_exactly_the_chart_rbac():
    """The README's RBAC table is what an operator without the chart would grant: it must not drift."""
    role = next(d for d in manifests(SECRETS) if d["kind"] == "ClusterRole")
    granted = {(group or "core", res, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for res in rule["resources"] for verb in rule["verbs"]}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("| API group | resource | verbs |")
    readme = readme[start:readme.index("\n\n", start)]
    documented = set()
    for m in re.finditer(r"^\| `([^`]*)` \| `([^`]+)` \| ([^|]+) \|", readme, re.M):
        for verb in re.findall(r"`([a-z]+)`", m.group(3)):
            documented.add((m.group(1) or "core", m.group(2), verb))
    assert documented == granted


def test_autoscaling_adds_its_namespace_a_role_there_and_nothing_cluster_wide_but_get_on_it():
    """The scale adjuster creates and deletes pods only in its own namespace; the README's second
    RBAC table lists exactly these additions."""
    values = {**SECRETS, "autoscaling": {"enabled": True, "namespace": "scale-here"}}
    docs = manifests(values)
    (ns,) = [d for d in docs if d["kind"] == "Namespace"]
    assert ns["metadata"]["name"] == "scale-here"
    (role,) = [d for d in docs if d["kind"] == "Role"]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "scale-here"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete"]}]
    cluster = next(d for d in docs if d["kind"] == "ClusterRole")
    base = next(d for d in manifests(SECRETS) if d["kind"] == "ClusterRole")
    extra = [r for r in cluster["rules"] if r not in base["rules"]]
    assert extra == [{"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["scale-here"], "verbs": ["get"]}]
    cm = next(d for d in docs if d["kind"] == "ConfigMap")
    assert cm["data"]["KAI_AUTOSCALE_ENABLED"] == "true" and cm["data"]["KAI_AUTOSCALE_NAMESPACE"] == "scale-here"
    assert next(d for d in manifests(SECRETS) if d["kind"] == "ConfigMap")["data"]["KAI_AUTOSCALE_ENABLED"] == "false"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("| API group | resource | verbs | where (autoscaling only) |")
    table = readme[start:readme.index("\n\n", start)]
    documented = set()
    for m in re.finditer(r"^\| `([^`]*)` \| `([^`]+)` \| ([^|]+) \|", table, re.M):
        for verb in re.findall(r"`([a-z]+)`", m.group(3)):
            documented.add((m.group(1) or "core", m.group(2), verb))
    granted = {(g or "core", res, verb) for rule in extra + role["rules"] for g in rule["apiGroups"]
               for res in rule["resources"] for verb in rule["verbs"]}
    assert documented == granted


def test_secret_values_are_required_unless_an_existing_secret_is_named():
    with pytest.raises(TemplateError, match="secrets.databaseUrl"):
        manifests({})
    names = kinds({"existingSecret": "mine"})
    assert ("Secret", "kai-kaiplatform") not in names
    env = next(d for d in manifests({"existingSecret": "mine"}) if d["metadata"]["name"] == "kai-kaiplatform-web")
    refs = env["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert {"secretRef": {"name": "mine"}} in refs


def test_optional_parts_switch_off():
    names = kinds(VALUE_SETS["minimal"])
    assert not [n for k, n in names if k in ("Job", "ClusterRole", "ServiceAccount") or "dispatcher" in n
                or n.endswith("-sync")]
    worker = next(d for d in manifests(VALUE_SETS["minimal"]) if d["metadata"]["name"].endswith("-worker")
                  and d["kind"] == "Deployment")
    assert worker["spec"]["template"]["spec"]["serviceAccountName"] == "external-sa"


def test_secret_data_is_base64_of_the_values():
    import base64

    secret = next(d for d in manifests(SECRETS) if d["kind"] == "Secret")
    assert base64.b64decode(secret["data"]["DATABASE_URL"]).decode() == SECRETS["secrets"]["databaseUrl"]


def test_renderer_refuses_constructs_outside_its_subset(tmp_path):
    chart = tmp_path / "c"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("name: c\nversion: 0.0.1\n")
    (chart / "values.yaml").write_text("a: 1\n")
    (chart / "templates" / "x.yaml").write_text("v: {{ .Values.a | sha256sum }}\n")
    with pytest.raises(TemplateError):
        render_chart(chart)
