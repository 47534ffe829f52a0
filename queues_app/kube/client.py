"""The connection to the Kubernetes API server, from settings (kubernetes mode only).

Two ways, as the official client offers them: the pod's service account
(``KAI_KUBE_IN_CLUSTER=1``: token + CA mounted under /var/run/secrets/kubernetes.io), or a
kubeconfig file (``KAI_KUBECONFIG``, else ``$KUBECONFIG`` / ``~/.kube/config``) with an optional
``KAI_KUBE_CONTEXT``.  A configuration that does not load is an ``ImproperlyConfigured`` naming
the setting, raised when the connection is first needed (not at import), so the embedded mode
never touches any of it.
"""
from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def kube_enabled() -> bool:
    """Whether the control plane schedules a Kubernetes cluster (``KAI_CLUSTER_MODE=kubernetes``)."""
    return settings.KAI_CLUSTER_MODE == "kubernetes"


def kube_configuration():
    """A ``kubernetes.client.Configuration`` from the settings (does not connect)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if settings.KAI_KUBE_IN_CLUSTER:
        try:
            config.load_incluster_config(client_configuration=cfg)
        except Exception as exc:  # ConfigException, OSError: the service account is not mounted
            raise ImproperlyConfigured(
                f"KAI_KUBE_IN_CLUSTER is set but the in-cluster configuration does not load: {exc}") from exc
    else:
        where = settings.KAI_KUBECONFIG or "$KUBECONFIG or ~/.kube/config"
        try:
            config.load_kube_config(config_file=settings.KAI_KUBECONFIG, context=settings.KAI_KUBE_CONTEXT,
                                    client_configuration=cfg, persist_config=False)
        except Exception as exc:  # ConfigException, missing file, bad YAML, unknown context
            context = f" (KAI_KUBE_CONTEXT={settings.KAI_KUBE_CONTEXT!r})" if settings.KAI_KUBE_CONTEXT else ""
            raise ImproperlyConfigured(f"KAI_KUBECONFIG: cannot load a kubeconfig from {where}{context}: {exc}") from exc
    return cfg


def kube_api_client():
    """A ``kubernetes.client.ApiClient`` for the configured cluster; the caller closes it."""
    from kubernetes import client

    if not kube_enabled():
        raise ImproperlyConfigured(f"KAI_CLUSTER_MODE is {settings.KAI_CLUSTER_MODE!r}; the Kubernetes connection "
                                   "is used only with KAI_CLUSTER_MODE=kubernetes.")
    return client.ApiClient(kube_configuration())
