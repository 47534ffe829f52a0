"""``manage.py kube_sync [--once]``: mirror the cluster's nodes and our pods into the database.

Long-running by default (list + watch, behind the ``kube-sync`` database lease, so several
replicas may run and one syncs); ``--once`` does one full relist of nodes and pods and exits
(operators, scripts, the demo).  Kubernetes mode only (``KAI_CLUSTER_MODE=kubernetes``).
"""
from __future__ import annotations

import json
import signal
import threading

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from queues_app.kube.client import kube_enabled
from queues_app.kube.reflector import LEASE_NAME, KubeSync
from queues_app.models import KubeLease, KubeNode, KubePod


class Command(BaseCommand):
    help = "Sync nodes and pods (spec.schedulerName = KAI_SCHEDULER_NAME) from the Kubernetes API server."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one full relist, then exit")
        parser.add_argument("--holder", default=None, help="lease holder id (default host:pid:random)")
        parser.add_argument("--lease-ttl", type=float, default=15.0, help="leader lease in seconds (default 15)")

    def handle(self, *args, once: bool, holder: str | None, lease_ttl: float, **options):
        if not kube_enabled():
            raise CommandError("kube_sync needs KAI_CLUSTER_MODE=kubernetes (the embedded mode has no cluster).")
        if not 1 <= lease_ttl <= 3600:
            raise CommandError("--lease-ttl must be between 1 and 3600 seconds")
        try:
            sync = KubeSync(holder=holder, lease_ttl=lease_ttl)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from exc
        try:
            if once:
                if not sync.sync_once():
                    lease = KubeLease.objects.filter(name=LEASE_NAME).first()
                    raise CommandError(f"another replica holds the {LEASE_NAME} lease "
                                       f"({lease.holder if lease else '?'} until {lease.expires_at if lease else '?'})")
                sync.release()
                self.stdout.write(json.dumps({"nodes": KubeNode.objects.count(), "pods": KubePod.objects.count(),
                                              "nodes_rv": sync.nodes.resource_version,
                                              "pods_rv": sync.pods.resource_version}))
                return
            stop = threading.Event()

            def on_signal(signum, frame):
                stop.set()
                sync.nodes.interrupt()
                sync.pods.interrupt()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
            self.stdout.write(f"kube_sync: {sync.holder} waiting for the {LEASE_NAME} lease")
            sync.run(stop)
        finally:
            sync.api_client.close()
