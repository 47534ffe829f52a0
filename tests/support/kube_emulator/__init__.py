"""An in-process emulator of the Kubernetes API server (core/v1 nodes, pods, events; bindings, evictions).

Test tooling: it lives under ``tests/support`` so that neither the wheel nor the container image
ships it; the tests and ``manage.py kube_demo`` (from a source checkout) import it from here.

Why it exists: the control plane talks to real clusters only through the official ``kubernetes``
Python client, but no kube-apiserver can run in development or CI.  Tests and the one-command demo
therefore point the *real* client, over a real TCP socket, at this server.  It encodes only behaviour
documented for the real API server (API reference, "API concepts", pod lifecycle docs), so code that
passes against it makes the same requests it would make against a cluster:

* one global ``resourceVersion`` counter (like etcd's revision), stamped on every write and on list
  metadata; a bounded event history that watches resume from; ``compact()`` forgets the history so
  old resourceVersions get ``410 Gone`` exactly as after an etcd compaction;
* list / watch with label and field selectors, bookmarks, ``timeoutSeconds``, ``limit``/``continue``;
  watch events are re-typed per selector (an object leaving a selector is seen as ``DELETED``,
  entering it as ``ADDED``), as the watch cache does;
* graceful pod deletion (``deletionTimestamp`` + ``deletionGracePeriodSeconds``; removal once the
  grace elapsed on the emulator's clock), finalizers, uid/resourceVersion preconditions;
* the ``binding`` subresource (``201`` Status Success, ``409`` when already assigned), the
  ``eviction`` subresource (``201``, ``429`` when a disruption budget blocks it), ``status``
  subresources, pod-spec immutability on update;
* a tiny "kubelet" (bound pods on a Ready node become Running) and "pod GC" (pods bound to a node
  that no longer exists are failed and deleted) driven by ``advance()`` or ``run_realtime()``;
* owner kinds (batch/v1 Job, CronJob; apps/v1 ReplicaSet, StatefulSet, Deployment) stored with
  API defaults and validation, cascading deletion as the garbage collector does (Jobs orphan by
  default); policy/v1 PodDisruptionBudgets enforced by the eviction subresource;
* a node lifecycle controller (not-ready taints) and taint-based eviction (NoExecute, tolerationSeconds);
* KAI's PodGroups (``scheduling.run.ai/v2alpha2``: ``spec.subGroups``, ``minSubGroup``,
  ``topologyConstraint``; the CRD's structural schema, no admission webhook) and dynamic resource
  allocation (``resource.k8s.io/v1`` DeviceClasses, ResourceSlices with their ``spec.nodeName`` /
  ``spec.driver`` / ``spec.pool.name`` field selectors, ResourceClaims whose spec is immutable and whose
  ``status.allocation`` can only be set once, ``reservedFor`` needing it); the kubelet starts a pod only
  when each of its ResourceClaims is allocated and reserved for it;
* fault injection (error statuses, "performed but answered with an error", dropped connections,
  delays), watch disconnection, and a request log so tests can assert on exact traffic.

* namespaces (``default``, ``kube-system``, ``kube-public``, ``kube-node-lease`` exist from the start;
  the first three cannot be deleted): creating content in a namespace that does not exist is ``404``
  and in a terminating one ``403`` (the NamespaceLifecycle admission plugin); deleting a namespace
  marks it Terminating and the namespace controller deletes its content, then the namespace.  The
  Python helpers (``add_pod``, ``add_owner``, ``add_namespace``) create the namespace they need;
* pod status patches (``pods/{name}/status``) with a ``metadata.resourceVersion`` precondition (409);
  the Binding subresource sets ``PodScheduled=True`` and copies the Binding's annotations onto the pod.

Not emulated (requests for them get a 404 / 405 / 415 / 400 Status): other resource types, server-side apply, dryRun on create, protobuf,
authn/authz/admission webhooks, workload controllers creating pods, the scheduler, the node
monitor (a node is NotReady only when told: ``set_node_ready``).  ``kubectl get`` works (Table
output for pods, nodes, events; name + age for the other kinds).  Binding to a node that does not exist succeeds, as on a real API server (pod GC then
removes the pod).  The binding answer is a Status object, which the v37 client cannot deserialise
into V1Binding: call it with ``_preload_content=False``, as against a real cluster (the eviction's
Status deserialises into an empty V1Eviction).

Pure stdlib (``http.server`` + ``threading``); the ``kubernetes`` package is only needed for
``configuration()``.  Imports nothing of the project.  Modules, by concern: ``store`` (objects,
resourceVersions, watch history, the controllers driven by the clock, binding, eviction),
``selectors`` (label / field selectors), ``patch`` (merge, strategic merge, JSON patch),
``validation`` (defaulting and admission), ``resources`` (the kinds served), ``faults`` (fault
injection, request log), ``http`` (discovery, routes, Table output, the handler), ``common``.
"""
from __future__ import annotations

from .common import ApiError, ManualClock
from .faults import Faults, RequestRecord
from .store import KubeEmulator

__all__ = ["KubeEmulator", "ManualClock", "ApiError", "Faults", "RequestRecord"]
