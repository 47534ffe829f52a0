"""API views: thin.  Resolve the caller, call a selector (reads) or a service (writes), serialize.

Isolation lives in the selectors (every queryset is scoped by ``caller.tenant`` before any
lookup) and in the serializers' relation fields (``TenantQueueField``); these views never
touch ``Model.objects`` directly.  Another tenant's object is a 404, exactly like a missing
one.  Operator-only endpoints answer 403 to tenants.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import authenticate
from django.http import QueryDict
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from queues_app import selectors, services
from queues_app.api import serializers as s
from queues_app.api.ids import path_id
from queues_app.api.pagination import PageNumberPagination
from queues_app.api.permissions import (
    TENANT_HEADER,
    IsOperator,
    IsTenantMemberOrOperator,
    ReadForMembersWriteForOperators,
    caller_of,
)
from queues_app.api.throttling import SubmitRateThrottle, TenantRateThrottle
from queues_app.cycle import dryrun
from queues_app.errors import ApplicationError
from queues_app.filters import NodeFilter, QueueFilter, WorkloadFilter

IDEMPOTENCY_HEADER = "Idempotency-Key"

ID_PARAM = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="Object id.")
TENANT_PARAM = OpenApiParameter(TENANT_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
                                description="Tenant to act for, when you are a member of several.")
PAGE_PARAMS = [
    OpenApiParameter("page", {"type": "integer", "minimum": 1}, description="Page number (1-based)."),
    OpenApiParameter("page_size", {"type": "integer", "minimum": 1},
                     description="Items per page, from 1 (more than 500 is 500)."),
]


def _filter_params(filterset_class) -> list[OpenApiParameter]:
    """Document a FilterSet's filters as query parameters (filters run inside the selectors)."""
    out = []
    for name, f in filterset_class.base_filters.items():
        kind = OpenApiTypes.STR
        cls = type(f).__name__
        if cls == "BooleanFilter":
            kind = OpenApiTypes.BOOL
        elif cls == "NumberFilter":
            kind = OpenApiTypes.NUMBER
        elif cls == "IsoDateTimeFilter":
            kind = OpenApiTypes.DATETIME
        if cls == "MultipleChoiceFilter":
            out.append(OpenApiParameter(name, {"type": "array", "items": {"type": "string",
                                                                          "enum": [c[0] for c in f.extra["choices"]]}},
                                        explode=True, description=str(f.label or name)))
        else:
            out.append(OpenApiParameter(name, kind, description=str(f.label or name)))
    return out


def _filters_from(request, filterset_class) -> QueryDict | None:
    """Only the FilterSet's own query parameters reach the selector (page etc. are not filters)."""
    allowed = set(filterset_class.base_filters)
    data = QueryDict(mutable=True)
    for key in request.query_params:
        if key in allowed:
            data.setlist(key, request.query_params.getlist(key))
    return data or None


def _pk(value: Any) -> int:
    """A path id as an int, or 404 (ASCII digits only; never an overflow 500 on a 30-digit id)."""
    return path_id(value)


class CallerMixin:
    permission_classes = [IsTenantMemberOrOperator]
    pagination_class = PageNumberPagination  # also tells the schema that lists are paginated
    # Any path segment reaches the view, which answers a JSON 404 for ids that are not ids
    # ("-1.5e-46"), instead of the URL resolver's HTML page.
    lookup_value_regex = "[^/]+"

    @property
    def caller(self):
        return caller_of(self.request)

    @property
    def tenant(self):
        return self.caller.tenant

    @property
    def paginator(self) -> PageNumberPagination:
        if not hasattr(self, "_paginator"):
            self._paginator = PageNumberPagination()
        return self._paginator


# ============================================================================ auth


class TokenObtainApi(APIView):
    """Exchange a username and password for an API token (``Authorization: Token <key>``)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []
    throttle_classes = [TenantRateThrottle]

    @extend_schema(request=s.TokenInputSerializer, responses={200: s.TokenOutputSerializer}, auth=[],
                   operation_id="auth_token_create", tags=["auth"])
    def post(self, request):
        ser = s.TokenInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        user = authenticate(request._request, username=ser.validated_data["username"],
                            password=ser.validated_data["password"])
        if user is None or not user.is_active:
            raise ApplicationError("Invalid credentials.", extra={"password": ["Unknown user or wrong password."]})
        token = services.api_token_issue(user=user)
        return Response({"token": token})


class MeApi(CallerMixin, APIView):
    """Who am I, and which tenant does this request act for."""

    @extend_schema(responses={200: s.MeOutputSerializer}, parameters=[TENANT_PARAM], tags=["auth"])
    def get(self, request):
        caller = self.caller
        tenants = [t.name for t in selectors.tenant_list_for_user(user=request.user)]
        return Response(s.MeOutputSerializer({
            "username": request.user.get_username(), "is_operator": caller.is_operator,
            "tenant": caller.tenant.name if caller.tenant is not None else None, "tenants": tenants,
        }).data)


# ============================================================================ workloads

WORKLOAD_ORDERING = ("created_at", "-created_at", "priority", "-priority", "name", "-name", "status", "-status")


@extend_schema_view(
    list=extend_schema(
        parameters=[*_filter_params(WorkloadFilter), *PAGE_PARAMS, TENANT_PARAM,
                    OpenApiParameter("ordering", OpenApiTypes.STR, enum=list(WORKLOAD_ORDERING),
                                     description="Sort order (default -created_at).")],
        responses={200: s.WorkloadOutputSerializer(many=True)}),
    retrieve=extend_schema(parameters=[ID_PARAM, TENANT_PARAM], responses={200: s.WorkloadDetailOutputSerializer}),
)
class WorkloadViewSet(CallerMixin, viewsets.ViewSet):
    """Submit, list, inspect and cancel workloads; ask why one is pending."""

    throttle_classes = [TenantRateThrottle, SubmitRateThrottle]

    def _get(self, pk: Any):
        return selectors.workload_get(tenant=self.tenant, pk=_pk(pk))

    def _detail(self, workload) -> dict[str, Any]:
        return s.WorkloadDetailOutputSerializer(self._get(workload.pk)).data

    def list(self, request):
        ordering = request.query_params.get("ordering")
        if ordering is not None and ordering not in WORKLOAD_ORDERING:
            raise ApplicationError("Invalid ordering.", extra={"ordering": [
                f"Use one of {', '.join(WORKLOAD_ORDERING)}."]})
        qs = selectors.workload_list_ordered(tenant=self.tenant, filters=_filters_from(request, WorkloadFilter),
                                             ordering=ordering)
        paginator = self.paginator
        page = paginator.paginate_queryset(qs, request, view=self)
        return paginator.get_paginated_response(s.WorkloadOutputSerializer(page, many=True).data)

    def retrieve(self, request, pk=None):
        return Response(s.WorkloadDetailOutputSerializer(self._get(pk)).data)

    @extend_schema(
        request=s.WorkloadCreateInputSerializer,
        parameters=[
            OpenApiParameter("dry_run", OpenApiTypes.BOOL, description="Validate and simulate one cycle; store "
                             "nothing (answers 200 with the simulated outcome)."),
            OpenApiParameter(IDEMPOTENCY_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
                             description="A retried create with the same key returns the first result."),
            TENANT_PARAM,
        ],
        responses={201: s.WorkloadDetailOutputSerializer, 200: s.DryRunOutputSerializer},
    )
    def create(self, request):
        caller = self.caller
        ser = s.WorkloadCreateInputSerializer(data=request.data, context={"tenant": caller.tenant})
        ser.is_valid(raise_exception=True)
        data = dict(ser.validated_data)
        kwargs = self._submit_kwargs(data, caller)

        def submit():
            return services.workload_submit(**kwargs)

        if _truthy(request.query_params.get("dry_run")):
            outcome = dryrun.dry_run_workload(submit=submit)
            return Response(self._dry_run_body(outcome), status=status.HTTP_200_OK)

        key = request.headers.get(IDEMPOTENCY_HEADER)
        if key is None:
            workload = submit()
            return Response(self._detail(workload), status=status.HTTP_201_CREATED)
        fingerprint = services.request_fingerprint({**request.data} if isinstance(request.data, dict) else
                                                   request.data)
        scope = services.idempotency_scope(tenant_id=caller.tenant.pk if caller.tenant else None,
                                           user_id=request.user.pk)
        workload, created = services.workload_submit_idempotent(
            key=key, scope=scope, fingerprint=fingerprint, submit=submit, user=request.user)
        response = Response(self._detail(workload), status=status.HTTP_201_CREATED)
        if not created:
            response["Idempotent-Replayed"] = "true"
        return response

    @staticmethod
    def _submit_kwargs(data: dict[str, Any], caller) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "queue": data["queue"], "name": data["name"], "tenant": caller.tenant, "owner": caller.user,
            "preemptible": data.get("preemptible"), "min_available": data.get("min_available"),
            "topology_required": data.get("topology_required", ""),
            "topology_preferred": data.get("topology_preferred", ""),
            "node_selector": data.get("node_selector") or {},
        }
        if "priority" in data:
            kwargs["priority"] = data["priority"]
        if data.get("preemption_delay_seconds") is not None:
            kwargs["preemption_delay"] = timedelta(seconds=data["preemption_delay_seconds"])
        if data.get("staleness_grace_period_seconds") is not None:
            kwargs["staleness_grace_period"] = timedelta(seconds=data["staleness_grace_period_seconds"])
        if "tasks" in data:
            kwargs["tasks"] = [_task_kwargs(t) for t in data["tasks"]]
        else:
            kwargs["task"] = _task_kwargs(data["task"])
            kwargs["replicas"] = data.get("replicas", 1)
        if data.get("sub_groups"):
            kwargs["sub_groups"] = [dict(g) for g in data["sub_groups"]]
            kwargs["min_sub_groups"] = data.get("min_sub_groups")
        elif data.get("min_sub_groups") is not None:
            kwargs["min_sub_groups"] = data["min_sub_groups"]
        return kwargs

    def _dry_run_body(self, outcome: dict[str, Any]) -> dict[str, Any]:
        tenant = self.tenant
        events = outcome["events"]
        names = {m.group(2).split("/")[-1] for e in events for m in selectors._NAMED.finditer(e["message"])}
        allowed = selectors.visible_names(tenant=tenant, names=names)
        queue = outcome.get("queue") or {}
        return s.DryRunOutputSerializer({
            "dry_run": True, "valid": True, "could_run_now": outcome["placed"], "status": outcome["status"],
            "tasks": outcome["tasks"],
            "blocked_by": [{**e, "message": selectors.redact_message(tenant=tenant, message=e["message"],
                                                                     allowed=allowed)} for e in events],
            "waiting_for": outcome.get("waiting_for"),
            "queue_fair_share": queue.get("fairShare", {}), "queue_allocated": queue.get("allocated", {}),
            "skipped_actions": outcome["skipped_actions"],
        }).data

    @extend_schema(request=None, parameters=[ID_PARAM, TENANT_PARAM],
                   responses={200: s.WorkloadDetailOutputSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        workload = self._get(pk)
        services.workload_cancel(workload=workload, actor=request.user)
        return Response(self._detail(workload))

    @extend_schema(parameters=[ID_PARAM, TENANT_PARAM], responses={200: s.WhyOutputSerializer})
    @action(detail=True, methods=["get"])
    def why(self, request, pk=None):
        """Why pending / why evicted: latest events with reasons and numbers, queue position."""
        workload = self._get(pk)
        return Response(s.WhyOutputSerializer(selectors.workload_why(tenant=self.tenant, workload=workload)).data)


def _task_kwargs(task: dict[str, Any]) -> dict[str, Any]:
    """A validated task spec for the service (claims as plain dicts, absent optional keys left out)."""
    out = dict(task)
    if out.get("sub_group") is None:
        out.pop("sub_group", None)
    if "claims" in out:
        out["claims"] = [dict(c) for c in out["claims"]]
        if not out["claims"]:
            out.pop("claims")
    return out


def _truthy(value: str | None) -> bool:
    if value is None:
        return False
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ApplicationError("Invalid query parameter.", extra={"dry_run": ["Use 1 or 0 (true / false)."]})


# ============================================================================ queues


def _queue_statements(queues: list, tenant) -> list[dict[str, Any]]:
    counts = selectors.queue_workload_counts(tenant=tenant, queue_ids=[q.pk for q in queues])
    usage, source = selectors.queue_decayed_usage(tenant=tenant, queues=queues)
    overcommit = selectors.quota_overcommit(
        tenant=tenant, parent_ids={q.pk for q in queues} | {q.parent_id for q in queues if q.parent_id})
    out = []
    for q in queues:
        res = selectors.queue_resources(queue=q)
        st = selectors.queue_status(queue=q)
        resources = {}
        for r in ("gpu", "cpu", "memory"):
            row = res.get(r)
            resources[r] = {
                "quota": float(row.quota) if row else 0.0,
                "limit": float(row.limit) if row else -1.0,
                "over_quota_weight": float(row.over_quota_weight) if row else 1.0,
                "allocated": float(getattr(st, f"allocated_{r}", 0.0) or 0.0) if st else 0.0,
                "fair_share": float(getattr(st, f"fair_share_{r}", 0.0) or 0.0) if st else 0.0,
                "decayed_usage": float(usage.get(q.pk, {}).get(r, 0.0)),
            }
        c = counts.get(q.pk, {})
        out.append({
            "id": q.pk, "name": q.name, "parent": q.parent.name if q.parent_id else None,
            "description": q.description, "depth": q.depth, "priority": q.priority, "resources": resources,
            "pending_workloads": c.get("pending", 0), "running_workloads": c.get("running", 0),
            "usage_source": source, "status_updated_at": st.updated_at if st else None, "version": q.version,
            "warnings": overcommit.get(q.pk, []) + overcommit.get(q.parent_id, []),
        })
    return out


def _queue_by_name(name: str | None, *, field: str):
    if name is None or name == "":
        return None
    try:
        return selectors.queue_get(tenant=None, name=name)
    except selectors.Queue.DoesNotExist:
        raise ApplicationError("Invalid queue.", extra={field: ["No queue with this name."]}) from None


def _runtime_kwargs(data: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key in ("reclaim_min_runtime", "preempt_min_runtime"):
        if f"{key}_seconds" in data:
            value = data[f"{key}_seconds"]
            out[key] = None if value is None else timedelta(seconds=value)
    return out


@extend_schema_view(
    list=extend_schema(parameters=[*_filter_params(QueueFilter), *PAGE_PARAMS, TENANT_PARAM],
                       responses={200: s.QueueOutputSerializer(many=True)}),
    retrieve=extend_schema(parameters=[ID_PARAM, TENANT_PARAM], responses={200: s.QueueOutputSerializer}),
    create=extend_schema(request=s.QueueCreateInputSerializer, responses={201: s.QueueOutputSerializer}),
    partial_update=extend_schema(parameters=[ID_PARAM], request=s.QueueUpdateInputSerializer,
                                 responses={200: s.QueueOutputSerializer}),
    destroy=extend_schema(parameters=[ID_PARAM], responses={204: None}),
)
class QueueViewSet(CallerMixin, viewsets.ViewSet):
    """Queues and their fairness statement; operators manage the tree and the quotas."""

    permission_classes = [ReadForMembersWriteForOperators]

    def _get(self, pk: Any):
        return selectors.queue_get(tenant=self.tenant, pk=_pk(pk))

    def _statement(self, queue) -> dict[str, Any]:
        fresh = selectors.queue_get(tenant=self.tenant, pk=queue.pk)
        return s.QueueOutputSerializer(_queue_statements([fresh], self.tenant)[0]).data

    def list(self, request):
        qs = selectors.queue_list(tenant=self.tenant, filters=_filters_from(request, QueueFilter))
        page = self.paginator.paginate_queryset(qs, request, view=self)
        return self.paginator.get_paginated_response(
            s.QueueOutputSerializer(_queue_statements(list(page), self.tenant), many=True).data)

    def retrieve(self, request, pk=None):
        return Response(self._statement(self._get(pk)))

    def create(self, request):
        ser = s.QueueCreateInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = ser.validated_data
        kwargs: dict[str, Any] = {"name": d["name"], "parent": _queue_by_name(d.get("parent"), field="parent"),
                                  "description": d.get("description", ""), **_runtime_kwargs(d)}
        if "priority" in d:
            kwargs["priority"] = d["priority"]
        if "quotas" in d:
            kwargs["quotas"] = {r: dict(v) for r, v in d["quotas"].items()}
        queue = services.queue_create(actor=request.user, source="api", **kwargs)
        return Response(self._statement(queue), status=status.HTTP_201_CREATED)

    def partial_update(self, request, pk=None):
        queue = self._get(pk)
        ser = s.QueueUpdateInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = dict(ser.validated_data)
        data: dict[str, Any] = {k: d[k] for k in ("name", "description", "priority") if k in d}
        if "parent" in d:
            data["parent"] = _queue_by_name(d["parent"], field="parent")
        data.update(_runtime_kwargs(d))
        queue = services.queue_update(queue=queue, data=data, actor=request.user)
        return Response(self._statement(queue))

    def destroy(self, request, pk=None):
        services.queue_delete(queue=self._get(pk), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(parameters=[ID_PARAM], request=s.QuotasInputSerializer, responses={200: s.QueueOutputSerializer})
    @action(detail=True, methods=["patch"])
    def quotas(self, request, pk=None):
        """Change quota / over-quota weight / limit of some resources, all or nothing, audited."""
        queue = self._get(pk)
        ser = s.QuotasInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        services.queue_set_quotas(queue=queue, quotas={r: dict(v) for r, v in ser.validated_data.items()},
                                  actor=request.user, source="api")
        return Response(self._statement(queue))

    @extend_schema(parameters=[ID_PARAM, TENANT_PARAM, *PAGE_PARAMS],
                   responses={200: s.QuotaChangeOutputSerializer(many=True)})
    @action(detail=True, methods=["get"])
    def history(self, request, pk=None):
        """The queue's quota audit trail: who changed what, when, old -> new."""
        queue = self._get(pk)
        qs = selectors.quota_history(tenant=self.tenant, queue=queue)
        page = self.paginator.paginate_queryset(qs, request, view=self)
        return self.paginator.get_paginated_response(s.QuotaChangeOutputSerializer(page, many=True).data)


# ============================================================================ nodes (operators)


def _node_body(node, allocated: dict[int, dict[str, float]]) -> dict[str, Any]:
    a = allocated.get(node.pk, {})
    return s.NodeOutputSerializer({
        **{f: getattr(node, f) for f in ("id", "name", "gpus", "gpu_memory_mib", "cpu_millis", "memory_bytes",
                                         "labels", "unschedulable", "ready", "reserved_gpus", "reserved_cpu_millis",
                                         "reserved_memory_bytes", "version", "devices")},
        "allocated_gpus": a.get("gpu", 0.0), "allocated_cpu_millis": a.get("cpu_millis", 0.0),
        "allocated_memory_bytes": a.get("memory_bytes", 0.0),
    }).data


@extend_schema_view(
    list=extend_schema(parameters=[*_filter_params(NodeFilter), *PAGE_PARAMS],
                       responses={200: s.NodeOutputSerializer(many=True)}),
    retrieve=extend_schema(parameters=[ID_PARAM], responses={200: s.NodeOutputSerializer}),
    create=extend_schema(request=s.NodeInputSerializer, responses={201: s.NodeOutputSerializer,
                                                                   200: s.NodeOutputSerializer}),
    partial_update=extend_schema(parameters=[ID_PARAM], request=s.NodeUpdateInputSerializer,
                                 responses={200: s.NodeOutputSerializer}),
    destroy=extend_schema(parameters=[ID_PARAM], responses={204: None}),
)
class NodeViewSet(CallerMixin, viewsets.ViewSet):
    """Cluster nodes (operators only): capacity, labels, cordon / uncordon."""

    permission_classes = [IsOperator]

    def _get(self, pk: Any):
        return selectors.node_list(tenant=None).get(pk=_pk(pk))

    def list(self, request):
        qs = selectors.node_list(tenant=None, filters=_filters_from(request, NodeFilter))
        page = self.paginator.paginate_queryset(qs, request, view=self)
        allocated = selectors.node_allocated(tenant=None)
        return self.paginator.get_paginated_response([_node_body(n, allocated) for n in page])

    def retrieve(self, request, pk=None):
        return Response(_node_body(self._get(pk), selectors.node_allocated(tenant=None)))

    def create(self, request):
        ser = s.NodeInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = dict(ser.validated_data)
        node, created = services.node_upsert(name=d.pop("name"), **d)
        return Response(_node_body(node, selectors.node_allocated(tenant=None)),
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def partial_update(self, request, pk=None):
        node = self._get(pk)
        ser = s.NodeUpdateInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        node, _ = services.node_upsert(name=node.name, **ser.validated_data)
        return Response(_node_body(node, selectors.node_allocated(tenant=None)))

    def destroy(self, request, pk=None):
        services.node_delete(node=self._get(pk))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, parameters=[ID_PARAM], responses={200: s.NodeOutputSerializer})
    @action(detail=True, methods=["post"])
    def cordon(self, request, pk=None):
        node = services.node_set_schedulable(node=self._get(pk), schedulable=False)
        return Response(_node_body(node, selectors.node_allocated(tenant=None)))

    @extend_schema(request=None, parameters=[ID_PARAM], responses={200: s.NodeOutputSerializer})
    @action(detail=True, methods=["post"])
    def uncordon(self, request, pk=None):
        node = services.node_set_schedulable(node=self._get(pk), schedulable=True)
        return Response(_node_body(node, selectors.node_allocated(tenant=None)))


# ============================================================================ cycles (operators)


@extend_schema_view(list=extend_schema(parameters=PAGE_PARAMS, responses={200: s.CycleOutputSerializer(many=True)}))
class CycleViewSet(CallerMixin, viewsets.ViewSet):
    """Scheduling cycle records; trigger one now."""

    permission_classes = [IsOperator]

    def list(self, request):
        qs = selectors.cycle_list(tenant=None)
        page = self.paginator.paginate_queryset(qs, request, view=self)
        return self.paginator.get_paginated_response(s.CycleOutputSerializer(page, many=True).data)

    @extend_schema(request=None, responses={202: s.CycleTriggerOutputSerializer})
    @action(detail=False, methods=["post"])
    def trigger(self, request):
        """Enqueue a scheduling cycle now (the cycle is single-flight: extra triggers are skipped)."""
        name = services.cycle_trigger(actor=request.user)
        return Response({"queued": True, "task": name}, status=status.HTTP_202_ACCEPTED)


__all__ = [
    "CycleViewSet",
    "MeApi",
    "NodeViewSet",
    "QueueViewSet",
    "TokenObtainApi",
    "WorkloadViewSet",
]
