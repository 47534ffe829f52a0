"""``manage.py kube_demo``: the whole Kubernetes path end to end, against the bundled API emulator.

What it shows, in one process and with no cluster: an emulated API server (``tests.support.kube_emulator``:
test tooling, so the demo runs from a source checkout, not from the wheel or the image; real HTTP,
real ``kubernetes`` client) with three 8-GPU nodes; pods created through the client with
``spec.schedulerName: kai-scheduler`` and the ``kai.scheduler/queue`` label; the sync loop (list +
watch, behind its database lease) turning them into workloads; scheduling cycles; the dispatcher
binding pods through the Binding subresource and evicting through the Eviction API; and the
Kubernetes Events it writes on the pods (what ``kubectl describe pod`` would show).

Story: ``nlp`` (quota 8 GPUs) borrows idle GPUs with an elastic ReplicaSet of four 4-GPU pods
(``kai.scheduler/min-available: 1``); ``vision`` (quota 12) runs a 2-pod gang, a half-GPU pod and,
later, a 2 x 4-GPU Job gang that only fits if ``nlp`` gives back what it borrowed: reclaim evicts
``nlp`` pods, and the Job binds once they are gone.  A pod naming an unknown queue gets an event; a
pod of another scheduler is ignored.  Exit status 0 when the story completed within ``--seconds``.

Run it with ``scripts/kube_demo.sh`` (own SQLite database under ``var/kube-demo``, Kubernetes mode).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import OperationalError

from queues_app import selectors
from queues_app.choices import TaskState
from queues_app.cycle.run import cycle_run
from queues_app.kube.outbox import kube_dispatch_due
from queues_app.kube.reflector import KubeSync
from queues_app.models import KubePod, Queue
from queues_app.services import queue_create

NAMESPACE = "ml"
GRACE_SECONDS = 2
QUEUES = [
    # name, parent, priority, gpu (quota, over-quota weight, limit)
    ("research", None, 100, (24, 1, -1)),
    ("vision", "research", 100, (12, 1, -1)),
    ("nlp", "research", 100, (8, 1, -1)),
]


def _pod_body(name: str, *, queue: str | None, gpus: str | None = None, scheduler: str = "kai-scheduler",
              annotations: dict[str, str] | None = None, owner: dict | None = None) -> dict[str, Any]:
    labels = {"app": name.rsplit("-", 1)[0]}
    if queue is not None:
        labels["kai.scheduler/queue"] = queue
    requests: dict[str, str] = {"cpu": "2", "memory": "8Gi"}
    limits: dict[str, str] = {}
    if gpus is not None:
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = gpus
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": labels,
                            "annotations": dict(annotations or {})}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                    "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                    "controller": True, "blockOwnerDeletion": True}]
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": GRACE_SECONDS,
                 "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                 "resources": {"requests": requests, **({"limits": limits} if limits else {})}}]},
    }


class Command(BaseCommand):
    help = "Run the Kubernetes demo (emulated API server, sync, cycles, binds, reclaim evictions, events)."

    def add_arguments(self, parser):
        parser.add_argument("--seconds", type=float, default=90.0, help="give up after this long (default 90)")
        parser.add_argument("--interval", type=float, default=1.0,
                            help="seconds between scheduling cycles / dispatcher runs (default 1)")
        parser.add_argument("--port", type=int, default=0, help="emulator port (default: any free port)")
        parser.add_argument("--keep-running", action="store_true",
                            help="keep the emulator, sync and cycles running after the story (Ctrl-C stops)")

    # ------------------------------------------------------------------ setup

    def handle(self, *args, seconds: float, interval: float, port: int, keep_running: bool, **options):
        from kubernetes import client as k8s


        try:  # test tooling: present in a source checkout, never in the wheel or the image
            from tests.support.kube_emulator import KubeEmulator
        except ImportError as exc:
            raise CommandError("kube_demo needs the API emulator from a source checkout (tests/support/kube_emulator); "
                               "run it from the repository with scripts/kube_demo.sh") from exc
        if settings.KAI_CLUSTER_MODE != "kubernetes":
            raise CommandError("kube_demo needs KAI_CLUSTER_MODE=kubernetes (scripts/kube_demo.sh sets it).")
        if not 0.1 <= interval <= 60 or not 1 <= seconds <= 3600:
            raise CommandError("--interval must be within 0.1..60 and --seconds within 1..3600")
        call_command("migrate", verbosity=0, interactive=False)
        self._queues()

        emu = KubeEmulator().start(port=port)
        emu.run_realtime(interval=0.1)
        kubeconfig = Path(settings.KAI_KUBECONFIG or Path(settings.VAR_DIR) / "kube-demo.kubeconfig")
        kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        emu.write_kubeconfig(str(kubeconfig))
        settings.KAI_KUBECONFIG = str(kubeconfig)
        self.say(f"emulated API server at {emu.url}; kubeconfig {kubeconfig} (try: kubectl --kubeconfig "
                 f"{kubeconfig} get pods -A)")
        for i in range(1, 4):
            emu.add_node(f"gpu-node-{i}", gpus=8, cpu="64", memory="512Gi", gpu_memory_mib=81920,
                         labels={"topology.kubernetes.io/zone": "zone-a" if i < 3 else "zone-b"})
        self.say("nodes: gpu-node-1..3, 8 x 80 GiB GPUs each (24 GPUs)")

        stop = threading.Event()
        sync = KubeSync(lease_ttl=10.0)
        sync_thread = threading.Thread(target=sync.run, args=(stop,), kwargs={"poll": 0.5},
                                       name="kube-sync", daemon=True)
        sync_thread.start()
        api = k8s.ApiClient(emu.configuration())
        core = k8s.CoreV1Api(api)
        self.emu, self.core, self.interval, self.deadline = emu, core, interval, time.monotonic() + seconds
        ok = False
        try:
            ok = self._story()
            self._describe()
            if keep_running:
                self.say("story done; still scheduling (Ctrl-C to stop)")
                while True:
                    self._tick()
        except KeyboardInterrupt:
            pass
        finally:
            stop.set()
            sync.nodes.interrupt()
            sync.pods.interrupt()
            sync_thread.join(timeout=10)
            api.close()
            emu.stop()
        if not ok:
            raise CommandError("the demo did not complete in time (see the pending reasons above)")
        self.say("demo complete")

    def _queues(self) -> None:
        have = {q.name: q for q in Queue.objects.all()}
        for name, parent, priority, (quota, weight, limit) in QUEUES:
            if name in have:
                continue
            quotas = {"gpu": {"quota": quota, "over_quota_weight": weight, "limit": limit},
                      "cpu": {"quota": -1, "over_quota_weight": 1, "limit": -1},
                      "memory": {"quota": -1, "over_quota_weight": 1, "limit": -1}}
            have[name] = queue_create(name=name, parent=have.get(parent) if parent else None, priority=priority,
                                      quotas=quotas, source="kube-demo")
        self.say("queues: research (24 GPUs) > vision (quota 12), nlp (quota 8); over-quota weight 1 each")

    # ------------------------------------------------------------------ the story

    def _story(self) -> bool:
        emu, core = self.emu, self.core
        rs = emu.add_owner("ReplicaSet", NAMESPACE, "llm-workers", replicas=4)
        for i in range(4):
            core.create_namespaced_pod(NAMESPACE, _pod_body(f"llm-workers-{i}", queue="nlp", gpus="4", owner=rs,
                                                            annotations={"kai.scheduler/min-available": "1"}))
        for i in range(2):
            core.create_namespaced_pod(NAMESPACE, _pod_body(f"resnet-{i}", queue="vision", gpus="2", annotations={
                "pod-group-name": "resnet", "kai.scheduler/min-available": "2"}))
        core.create_namespaced_pod(NAMESPACE, _pod_body("notebook-0", queue="vision", annotations={
            "gpu-fraction": "0.5"}))
        core.create_namespaced_pod(NAMESPACE, _pod_body("typo-0", queue="vison", gpus="1"))
        core.create_namespaced_pod(NAMESPACE, _pod_body("web-0", queue=None, scheduler="default-scheduler"))
        self.say("submitted: nlp llm-workers x4 (4 GPUs each, elastic, min 1); vision resnet gang 2 x 2 GPUs; "
                 "vision notebook-0 (0.5 GPU); typo-0 naming queue 'vison'; web-0 for default-scheduler")
        first = [f"llm-workers-{i}" for i in range(4)] + ["resnet-0", "resnet-1", "notebook-0"]
        if not self._until(lambda: self._running(first), "phase 1: every pod of ours bound and Running"):
            return False
        self.say("phase 1 done: 20.5 of 24 GPUs in use; nlp borrows 8 GPUs above its quota")

        job = emu.add_owner("Job", NAMESPACE, "detr-train", parallelism=2, completions=2)
        for i in range(2):
            core.create_namespaced_pod(NAMESPACE, _pod_body(f"detr-train-{i}", queue="vision", gpus="4", owner=job))
        self.say("submitted: vision detr-train Job, parallelism 2 x 4 GPUs (a gang of 2); only 3.5 GPUs are free")
        second = ["detr-train-0", "detr-train-1"]
        if not self._until(lambda: self._running(second), "phase 2: reclaim from nlp, then detr-train bound"):
            return False
        gone = [f"llm-workers-{i}" for i in range(4) if emu.get("pods", NAMESPACE, f"llm-workers-{i}") is None]
        self.say(f"phase 2 done: reclaimed {', '.join(gone) or 'nothing'} from nlp; detr-train Running")
        return bool(gone)

    def _running(self, names: list[str]) -> bool:
        for name in names:
            pod = self.emu.get("pods", NAMESPACE, name)
            if pod is None or (pod.get("status") or {}).get("phase") != "Running":
                return False
        return True

    def _until(self, done, what: str) -> bool:
        self.say(f"waiting for {what}")
        while time.monotonic() < self.deadline:
            self._tick()
            if done():
                return True
        self.say(f"timed out waiting for {what}")
        self._pending_reasons()
        return False

    def _tick(self) -> None:
        try:
            outcome = cycle_run(trigger="kube-demo")
            report = kube_dispatch_due()
        except OperationalError as exc:  # SQLite busy with the sync thread: as beat would, try next tick
            self.say(f"database busy ({exc}); retrying")
            time.sleep(self.interval)
            return
        if outcome.bound or outcome.evicted or report.done or report.failed:
            self.say(f"cycle {outcome.generation}: {outcome.bound} bind(s), {outcome.evicted} eviction(s) decided; "
                     f"dispatcher: {report.done} request(s) done, {report.retried} retried, {report.failed} failed")
        time.sleep(self.interval)

    # ------------------------------------------------------------------ output

    def _pending_reasons(self) -> None:
        for task in selectors.task_list(tenant=None, filters={"state": [TaskState.PENDING]})[:20]:
            events = selectors.event_list(tenant=None, workload=task.workload)
            event = events.filter(task=task).first() or events.first()
            self.say(f"  pending {task.name}: {event.message if event else 'no decision yet'}")

    def _describe(self) -> None:
        """What ``kubectl describe pod`` prints under Events, per pod, from the emulated API server."""
        events = sorted(self.emu.list("events", NAMESPACE),
                        key=lambda ev: int((ev.get("metadata") or {}).get("resourceVersion") or 0))
        by_pod: dict[str, list[dict]] = {}
        for ev in events:
            obj = ev.get("involvedObject") or ev.get("regarding") or {}
            by_pod.setdefault(obj.get("name", "?"), []).append(ev)
        self.say("Kubernetes Events on the pods (kubectl describe pod):")
        for name in sorted(by_pod):
            pod = self.emu.get("pods", NAMESPACE, name)
            where = (pod or {}).get("spec", {}).get("nodeName") or "-"
            phase = (pod or {}).get("status", {}).get("phase", "gone")
            cond = next((c for c in ((pod or {}).get("status") or {}).get("conditions") or []
                         if c.get("type") == "PodScheduled"), None)
            shown = f"; PodScheduled={cond.get('status')}" + (f" ({cond['reason']})" if cond.get("reason") else "") \
                if cond else ""
            self.say(f"  {name} [{phase} on {where}{shown}]")
            for ev in by_pod[name]:
                message = ev.get("message") or ev.get("note") or ""
                self.say(f"    {ev.get('type', 'Normal'):7} {ev.get('reason', ''):14} {message[:220]}")
        ignored = KubePod.objects.filter(name="web-0").exists()
        self.say(f"web-0 (default-scheduler) {'was wrongly synced' if ignored else 'was ignored, as it should be'}")

    def say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()
