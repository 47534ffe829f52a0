"""The cluster connection from settings, and ``manage.py kube_sync`` end to end (kubeconfig ->
real client -> emulator socket -> database)."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from kubernetes import client

from queues_app.kube.client import kube_api_client, kube_configuration, kube_enabled
from queues_app.models import KubeLease, KubePod, Node, Workload
from queues_app.kube.observed import kube_lease_acquire
from queues_app.services.queues import queue_create


@pytest.fixture
def kubeconfig(kube_emulator, tmp_path, settings):
    settings.KAI_CLUSTER_MODE = "kubernetes"
    settings.KAI_KUBE_IN_CLUSTER = False
    settings.KAI_KUBECONFIG = kube_emulator.write_kubeconfig(str(tmp_path / "kubeconfig"))
    settings.KAI_KUBE_CONTEXT = None
    return settings.KAI_KUBECONFIG


def test_off_unless_configured(settings):
    settings.KAI_CLUSTER_MODE = "embedded"
    assert not kube_enabled()
    with pytest.raises(ImproperlyConfigured, match="KAI_CLUSTER_MODE"):
        kube_api_client()


def test_the_kubeconfig_reaches_the_api_server(kubeconfig, kube_emulator):
    kube_emulator.add_node("n1", gpus=2)
    api = kube_api_client()
    try:
        names = [n.metadata.name for n in client.CoreV1Api(api).list_node().items]
    finally:
        api.close()
    assert names == ["n1"]
    assert kube_configuration().host == kube_emulator.url


def test_a_missing_kubeconfig_or_context_is_improperly_configured(kubeconfig, settings, tmp_path):
    settings.KAI_KUBE_CONTEXT = "no-such-context"
    with pytest.raises(ImproperlyConfigured, match="KAI_KUBE_CONTEXT='no-such-context'"):
        kube_api_client()
    settings.KAI_KUBE_CONTEXT = None
    settings.KAI_KUBECONFIG = str(tmp_path / "absent")
    with pytest.raises(ImproperlyConfigured, match="KAI_KUBECONFIG"):
        kube_api_client()


def test_in_cluster_without_a_service_account_is_improperly_configured(settings, monkeypatch):
    settings.KAI_CLUSTER_MODE = "kubernetes"
    settings.KAI_KUBE_IN_CLUSTER = True
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ImproperlyConfigured, match="KAI_KUBE_IN_CLUSTER"):
        kube_api_client()


@pytest.mark.django_db
def test_kube_sync_once_command(kubeconfig, kube_emulator):
    root = queue_create(name="root", quotas={"gpu": {"quota": 4}})
    queue_create(name="qa", parent=root, quotas={"gpu": {"quota": 4}})
    kube_emulator.add_node("n1", gpus=4)
    kube_emulator.add_pod("ns", "p", labels={"kai.scheduler/queue": "qa"}, requests={"nvidia.com/gpu": "1"})
    out = StringIO()
    call_command("kube_sync", "--once", stdout=out)
    summary = json.loads(out.getvalue())
    assert summary["nodes"] == 1 and summary["pods"] == 1
    assert Node.objects.get().name == "n1" and KubePod.objects.get().name == "p" and Workload.objects.count() == 1
    assert KubeLease.objects.get(name="kube-sync").holder == ""  # --once gives the lease back


@pytest.mark.django_db
def test_kube_sync_once_refuses_while_another_replica_leads(kubeconfig):
    kube_lease_acquire(name="kube-sync", holder="someone-else", ttl_seconds=60)
    with pytest.raises(CommandError, match="someone-else"):
        call_command("kube_sync", "--once", stdout=StringIO())
    assert not Node.objects.exists()


def test_kube_sync_refuses_in_embedded_mode(settings):
    settings.KAI_CLUSTER_MODE = "embedded"
    with pytest.raises(CommandError, match="KAI_CLUSTER_MODE=kubernetes"):
        call_command("kube_sync", "--once", stdout=StringIO())
