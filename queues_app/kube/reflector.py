"""The sync loop: list + watch nodes and our pods, and hand every change to the kube_sync services.

A :class:`Reflector` is what client-go's reflector is: list (paged, ``limit`` / ``continue``),
then watch from the list's ``resourceVersion`` with bookmarks and a server-side
``timeoutSeconds``; after a watch ends or the connection drops it resumes from the last
resourceVersion it *processed* (an event whose service call failed is seen again), and when
the server answers ``410 Gone`` (history compacted) it relists, which also removes rows of
objects deleted while it was not watching.  Errors back off exponentially; nothing a single
object contains can stop the loop (the services turn bad objects into events).

Pods are listed and watched with ``fieldSelector=spec.schedulerName=<KAI_SCHEDULER_NAME>``:
pods of other schedulers never reach us.  A new pod's top controller (ReplicaSet ->
Deployment, Job; not above a Job, so each CronJob run is its own workload) is resolved with
GETs through the API and cached, for the group key and the gang size.

KAI's PodGroups (``scheduling.run.ai/v2alpha2``) and the dynamic resource allocation objects
(``resource.k8s.io/v1`` DeviceClasses, ResourceSlices, ResourceClaims) are listed and watched the same
way (:mod:`queues_app.kube.observed_dra`); a resource the API server does not serve (404, e.g. no
PodGroup CRD, DRA not enabled) is simply not watched.

Leader election: a database lease (:class:`~queues_app.models.KubeLease` ``kube-sync``), the
same mechanism as the cycle's lease but a separate row.  Only the holder lists and watches; it
renews every ``ttl / 3`` and stops its reflectors the moment a renewal fails, so two replicas
never write at once for longer than one renewal period.  A replica that is not the leader
polls the lease and takes over once it expired.
"""
from __future__ import annotations

import functools
import json
import logging
import socket
import threading
import time
from datetime import datetime
from typing import Any, Callable, Mapping

from django.conf import settings
from django.db import connection
from django.utils import timezone

from queues_app.kube import observed, observed_dra, translate
from queues_app.kube.client import kube_api_client
from queues_app.models import KubePod

logger = logging.getLogger(__name__)

LEASE_NAME = "kube-sync"
#: Highest controller the group key climbs to, by kind: a CronJob's runs are separate workloads.
_STOP_CLIMB_AT = {"Job"}


def _readers() -> dict[str, tuple[Any, str]]:
    from kubernetes import client

    return {
        "Job": (client.BatchV1Api, "read_namespaced_job"),
        "CronJob": (client.BatchV1Api, "read_namespaced_cron_job"),
        "ReplicaSet": (client.AppsV1Api, "read_namespaced_replica_set"),
        "StatefulSet": (client.AppsV1Api, "read_namespaced_stateful_set"),
        "Deployment": (client.AppsV1Api, "read_namespaced_deployment"),
    }


#: Owner kinds we can read: kind -> (API class, read method).
_OWNER_READERS: dict[str, tuple[Any, str]] = _readers()


class Gone(Exception):
    """The API server no longer has the history we asked for (HTTP 410): relist."""


def _status_of(exc: BaseException) -> int | None:
    return getattr(exc, "status", None)


class Backoff:
    """Exponential backoff with jitter-free doubling, capped; reset after a success."""

    def __init__(self, *, initial: float = 0.5, maximum: float = 30.0) -> None:
        self.initial, self.maximum, self._next = initial, maximum, initial

    def next(self) -> float:
        delay, self._next = self._next, min(self.maximum, self._next * 2)
        return delay

    def reset(self) -> None:
        self._next = self.initial


class Reflector:
    """List + watch one resource; calls ``on_relist(items, resource_version)`` after every full
    list and ``on_event(type, obj)`` for every ADDED / MODIFIED / DELETED, ``on_cursor(rv)``
    after each processed event or bookmark."""

    def __init__(self, resource: str, list_fn: Callable[..., Any], *,
                 on_relist: Callable[[list[dict], str], None], on_event: Callable[[str, dict], None],
                 on_cursor: Callable[[str], None] | None = None, field_selector: str | None = None,
                 watch_timeout: int | None = None, request_timeout: float | None = None,
                 page_size: int = 500, optional: bool = False) -> None:
        self.resource = resource
        self.optional = optional  # a 404 means "not served here": stop instead of retrying
        self.unserved = False
        self.list_fn = list_fn
        self.on_relist, self.on_event, self.on_cursor = on_relist, on_event, on_cursor
        self.field_selector = field_selector
        self.watch_timeout = int(watch_timeout or settings.KAI_KUBE_WATCH_TIMEOUT)
        self.request_timeout = float(request_timeout or settings.KAI_KUBE_REQUEST_TIMEOUT)
        self.page_size = page_size
        self.resource_version = ""
        self.relists = self.watches = self.events = self.errors = self.gone = 0
        self._resp = None
        self._lock = threading.Lock()

    # ---- list ------------------------------------------------------------------------------

    def _call(self, **kwargs: Any) -> Any:
        if self.field_selector:
            kwargs["field_selector"] = self.field_selector
        try:
            return self.list_fn(_preload_content=False, **kwargs)
        except Exception as exc:
            if _status_of(exc) == 410:
                raise Gone(str(exc)) from exc
            raise

    def list_all(self) -> tuple[list[dict], str]:
        """Every object, paged; a continue token that expired mid-way (410) starts over."""
        items: list[dict] = []
        token = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_request_timeout": self.request_timeout}
            if token:
                kwargs["_continue"] = token
            resp = self._call(**kwargs)
            body = json.loads(resp.data)
            items.extend(o for o in body.get("items") or [] if isinstance(o, dict))
            meta = body.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def relist(self) -> str:
        items, rv = self.list_all()
        self.on_relist(items, rv)
        self.resource_version = rv
        self.relists += 1
        return rv

    # ---- watch -----------------------------------------------------------------------------

    def watch_once(self, *, stop: threading.Event | None = None) -> int:
        """One watch request from the last resourceVersion, until the server ends it (timeout,
        disconnect) or ``stop`` is set.  Returns how many events it processed; raises
        :class:`Gone` on 410, other API / connection errors as they come."""
        from kubernetes.client.rest import ApiException
        from kubernetes.watch.watch import iter_resp_lines

        resp = self._call(watch=True, resource_version=self.resource_version or None, allow_watch_bookmarks=True,
                          timeout_seconds=self.watch_timeout,
                          _request_timeout=(self.request_timeout, self.watch_timeout + self.request_timeout))
        with self._lock:
            self._resp = resp
        self.watches += 1
        done = 0
        try:
            for line in iter_resp_lines(resp):
                if stop is not None and stop.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                etype, obj = event.get("type"), event.get("object") or {}
                if etype == "ERROR":
                    code = obj.get("code") if isinstance(obj, dict) else None
                    if code == 410:
                        raise Gone(str(obj.get("message")))
                    raise ApiException(status=code, reason=f"{obj.get('reason')}: {obj.get('message')}")
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    self.on_event(etype, obj)
                    done += 1
                    self.events += 1
                rv = translate.resource_version_of(obj)
                if rv:
                    self.resource_version = rv
                    if self.on_cursor is not None:
                        self.on_cursor(rv)
        finally:
            with self._lock:
                self._resp = None
            resp.close()
            resp.release_conn()
        return done

    def interrupt(self) -> None:
        """Unblock a watch read from another thread (shut the socket down)."""
        with self._lock:
            resp = self._resp
        sock = getattr(getattr(resp, "connection", None), "sock", None) if resp is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self, stop: threading.Event, *, listed: bool = False) -> None:
        """Until ``stop``: (re)list when needed, watch, resume; back off on errors. An optional
        resource the server does not serve (404 on the list: an API group or CRD not installed) is
        not watched."""
        backoff = Backoff()
        need_list = not listed
        while not stop.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                self.watch_once(stop=stop)
                backoff.reset()
            except Gone as exc:
                self.gone += 1
                need_list = True
                logger.info("kube sync %s: %s; relisting", self.resource, exc)
            except Exception as exc:  # connection reset, timeouts, 5xx, database hiccups
                if self.optional and _status_of(exc) == 404:
                    self.unserved = True
                    logger.info("kube sync %s: not served by this API server; not watched", self.resource)
                    return
                self.errors += 1
                if stop.is_set():
                    break
                delay = backoff.next()
                logger.warning("kube sync %s: %s: %s; retrying in %.1f s", self.resource, type(exc).__name__, exc,
                               delay)
                _drop_broken_connection()
                stop.wait(delay)


def _drop_broken_connection() -> None:
    """After a database error: drop this thread's connection if it is unusable (Django reconnects
    on the next query).  Never inside an atomic block: that connection belongs to the caller (a
    test's transaction, a management command's atomic section) and closing it would break them."""
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()


class OwnerResolver:
    """The top controller of a pod, read through the API (GET per owner level), cached."""

    def __init__(self, api_client: Any, *, request_timeout: float, ttl: float = 60.0) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout
        self.ttl = ttl
        self._cache: dict[str, tuple[float, translate.OwnerInfo]] = {}
        self.lookups = 0

    def _get(self, namespace: str, ref: Mapping[str, Any]) -> dict | None:
        """GET the owner object through the typed API, raw JSON; None when it cannot be read."""
        method = _OWNER_READERS.get(str(ref.get("kind")))
        if method is None:
            return None
        api_cls, name = method
        self.lookups += 1
        try:
            resp = getattr(api_cls(self.api_client), name)(str(ref["name"]), namespace, _preload_content=False,
                                                           _request_timeout=self.request_timeout)
            body = json.loads(resp.data)
        except Exception as exc:  # 404 (no such owner / API not served), 403, connection trouble
            logger.debug("kube sync: owner %s/%s not readable: %s", ref.get("kind"), ref.get("name"), exc)
            return None
        if not isinstance(body, dict):
            return None
        body.setdefault("kind", ref.get("kind"))
        return body

    def resolve(self, pod: Mapping[str, Any]) -> translate.OwnerInfo | None:
        md = pod.get("metadata") or {}
        ann = md.get("annotations") or {}
        if any(ann.get(k) for k in translate.ANNOTATION_POD_GROUP):
            return None
        ref = translate.controller_owner(tuple(o for o in md.get("ownerReferences") or () if isinstance(o, dict)))
        if ref is None:
            return None
        key = str(ref.get("uid") or f"{ref.get('kind')}/{ref.get('name')}")
        hit = self._cache.get(key)
        if hit is not None and time.monotonic() - hit[0] < self.ttl:
            return hit[1]
        namespace = str(md.get("namespace") or "default")
        top_ref, read = ref, None  # read: the highest owner object we could GET
        for _ in range(5):
            obj = self._get(namespace, top_ref)
            if obj is None:
                break  # keep top_ref (known from the child's ownerReferences), count from `read`
            read = obj
            if str(top_ref.get("kind")) in _STOP_CLIMB_AT:
                break
            parent = translate.controller_owner(
                tuple(o for o in (obj.get("metadata") or {}).get("ownerReferences") or () if isinstance(o, dict)))
            if parent is None or str(parent.get("kind")) not in _OWNER_READERS:
                break
            top_ref = parent
        replicas = None
        if read is not None:
            try:
                replicas = translate.owner_replicas(read)
            except Exception:  # a malformed owner spec: fall back to the annotation / 1
                replicas = None
        info = translate.OwnerInfo(group=f"{top_ref['kind']}/{top_ref['name']}",
                                   owner_uid=str(top_ref.get("uid") or ""), replicas=replicas)
        self._cache[key] = (time.monotonic(), info)
        return info


default_holder = observed.kube_lease_holder


class KubeSync:
    """Both reflectors (nodes first: pods name nodes) behind the ``kube-sync`` lease."""

    def __init__(self, *, api_client: Any = None, holder: str | None = None, lease_ttl: float = 15.0,
                 watch_timeout: int | None = None, request_timeout: float | None = None,
                 clock: Callable[[], datetime] = timezone.now) -> None:
        from kubernetes import client


        self.api_client = api_client if api_client is not None else kube_api_client()
        self.holder = holder or default_holder()
        self.lease_ttl = float(lease_ttl)
        self.clock = clock
        core = client.CoreV1Api(self.api_client)
        request_timeout = float(request_timeout or settings.KAI_KUBE_REQUEST_TIMEOUT)
        self.owners = OwnerResolver(self.api_client, request_timeout=request_timeout)
        common = dict(watch_timeout=watch_timeout, request_timeout=request_timeout)
        self.nodes = Reflector("nodes", core.list_node, on_relist=self._nodes_relisted, on_event=self._node_event,
                               on_cursor=lambda rv: observed.kube_cursor_save(resource="nodes", resource_version=rv),
                               **common)
        self.pods = Reflector("pods", core.list_pod_for_all_namespaces,
                              field_selector=f"spec.schedulerName={settings.KAI_SCHEDULER_NAME}",
                              on_relist=self._pods_relisted, on_event=self._pod_event,
                              on_cursor=lambda rv: observed.kube_cursor_save(resource="pods", resource_version=rv),
                              **common)
        # KAI PodGroups and dynamic resource allocation (optional: not every cluster serves them)
        res = client.ResourceV1Api(self.api_client)
        custom = client.CustomObjectsApi(self.api_client)
        lists = {
            "deviceclasses": res.list_device_class,
            "resourceslices": res.list_resource_slice,
            "resourceclaims": res.list_resource_claim_for_all_namespaces,
            "podgroups": functools.partial(custom.list_cluster_custom_object, "scheduling.run.ai", "v2alpha2",
                                           "podgroups"),
        }
        self.extra = [Reflector(name, lists[name], on_relist=self._dra_relisted(name), on_event=self._dra_event(name),
                                on_cursor=self._dra_cursor(name), optional=True, **common)
                      for name in ("deviceclasses", "resourceslices", "resourceclaims", "podgroups")]
        self.leader = False

    # ---- handlers --------------------------------------------------------------------------

    def _nodes_relisted(self, items: list[dict], rv: str) -> None:
        observed.kube_relist(resource="nodes", objs=items, resource_version=rv)

    def _node_event(self, etype: str, obj: dict) -> None:
        if etype == "DELETED":
            observed.kube_node_gone(name=str((obj.get("metadata") or {}).get("name") or ""))
        else:
            observed.kube_node_observed_safe(obj=obj)

    @staticmethod
    def _dra_relisted(resource: str) -> Callable[[list[dict], str], None]:
        return lambda items, rv: observed_dra.kube_dra_relist(resource=resource, objs=items, resource_version=rv)

    @staticmethod
    def _dra_event(resource: str) -> Callable[[str, dict], None]:
        return lambda etype, obj: observed_dra.kube_dra_event(resource=resource, etype=etype, obj=obj)

    @staticmethod
    def _dra_cursor(resource: str) -> Callable[[str], None]:
        return lambda rv: observed.kube_cursor_save(resource=resource, resource_version=rv)

    def _owner_for(self, obj: Mapping[str, Any]) -> translate.OwnerInfo | None:
        return self.owners.resolve(obj)

    def _pods_relisted(self, items: list[dict], rv: str) -> None:
        known = set(KubePod.objects.values_list("uid", flat=True))
        owners = {}
        for obj in items:
            uid = str((obj.get("metadata") or {}).get("uid") or "")
            if uid and uid not in known:
                info = self._owner_for(obj)
                if info is not None:
                    owners[uid] = info
        observed.kube_relist(resource="pods", objs=items, resource_version=rv, owners=owners)

    def _pod_event(self, etype: str, obj: dict) -> None:
        md = obj.get("metadata") or {}
        if etype == "DELETED":
            observed.kube_pod_gone(uid=str(md.get("uid") or "") or None, namespace=md.get("namespace"),
                              name=md.get("name"))
            return
        uid = str(md.get("uid") or "")
        owner = None if uid and KubePod.objects.filter(uid=uid).exists() else self._owner_for(obj)
        observed.kube_pod_observed(obj=obj, owner=owner)

    # ---- leadership ------------------------------------------------------------------------

    def acquire(self) -> bool:
        self.leader = observed.kube_lease_acquire(name=LEASE_NAME, holder=self.holder, ttl_seconds=self.lease_ttl,
                                             now=self.clock())
        return self.leader

    def _try_acquire(self) -> bool:
        """:meth:`acquire` for the long-running loop: a database error (PostgreSQL restarting, SQLite
        busy) counts as "not the leader now" instead of ending the loop, so the replica keeps trying
        and the watches of a leader that cannot renew stop before its lease could be taken over."""
        try:
            return self.acquire()
        except Exception as exc:  # noqa: BLE001 - OperationalError/InterfaceError and friends
            logger.warning("kube sync: lease %s not renewed (%s: %s)", LEASE_NAME, type(exc).__name__, exc)
            self.leader = False
            _drop_broken_connection()
            return False

    def release(self) -> None:
        observed.kube_lease_release(name=LEASE_NAME, holder=self.holder)
        self.leader = False

    def sync_once(self) -> bool:
        """Leader only: one full relist of nodes, then pods.  Returns False when another
        replica holds the lease (nothing was read or written)."""
        if not self.acquire():
            return False
        self.nodes.relist()
        for r in self.extra[:2]:  # device classes and slices before pods: devices of nodes
            self._relist_optional(r)
        self.pods.relist()
        for r in self.extra[2:]:  # claims and pod groups shape the pods' tasks
            self._relist_optional(r)
        return True

    @staticmethod
    def _relist_optional(r: Reflector) -> bool:
        """Relist an optional resource; False (and not watched) when the server does not serve it."""
        try:
            r.relist()
            return True
        except Exception as exc:  # noqa: BLE001
            if _status_of(exc) == 404:
                r.unserved = True
                return False
            raise

    def run(self, stop: threading.Event, *, poll: float | None = None) -> None:
        """Until ``stop``: wait for the lease, then list + watch both resources while renewing
        it; on a lost renewal stop watching and go back to waiting."""
        renew = poll if poll is not None else max(0.2, self.lease_ttl / 3)
        try:
            while not stop.is_set():
                if not self._try_acquire():
                    stop.wait(renew)
                    continue
                logger.info("kube sync: %s leads", self.holder)
                self._lead(stop, renew)
        finally:
            if self.leader:
                self.release()
            if not connection.in_atomic_block:  # a thread running the loop leaves no session behind
                connection.close()

    def _lead(self, stop: threading.Event, renew: float) -> None:
        led = threading.Event()
        threads: list[threading.Thread] = []
        try:
            listed_nodes = False
            try:
                self.nodes.relist()  # nodes before pods, so bound pods find their node
                listed_nodes = True
            except Exception as exc:
                logger.warning("kube sync: node list failed: %s", exc)
            listed_extra = {}
            for r in self.extra[:2]:  # devices of nodes before pods (a failure: the thread relists)
                try:
                    listed_extra[r.resource] = self._relist_optional(r)
                except Exception as exc:
                    logger.warning("kube sync: %s list failed: %s", r.resource, exc)
            pairs = [(self.nodes, listed_nodes), (self.pods, False)]
            pairs += [(r, listed_extra.get(r.resource, False)) for r in self.extra if not r.unserved]
            for reflector, listed in pairs:
                t = threading.Thread(target=self._thread_main, args=(reflector, led, listed),
                                     name=f"kube-sync-{reflector.resource}", daemon=True)
                t.start()
                threads.append(t)
            while not stop.wait(renew):
                if not self._try_acquire():
                    logger.warning("kube sync: %s lost the lease; stopping the watches", self.holder)
                    break
        finally:
            led.set()
            for r in (self.nodes, self.pods, *self.extra):
                r.interrupt()
            for t in threads:
                t.join(timeout=max(5.0, self.nodes.request_timeout))

    @staticmethod
    def _thread_main(reflector: Reflector, stop: threading.Event, listed: bool) -> None:
        try:
            reflector.run(stop, listed=listed)
        finally:
            connection.close()


def run_sync(stop_event: threading.Event, **kwargs: Any) -> KubeSync:
    """The sync loop of ``manage.py kube_sync``: runs until ``stop_event`` is set."""
    sync = KubeSync(**kwargs)
    sync.run(stop_event)
    return sync
