"""Fair-share API views: thin -- resolve the caller, validate the query, call one selector or
service.  Isolation is in the selectors (tenant first); operator-only writes answer 403 to
tenants; errors go through the project's exception handler ({"message", "extra"})."""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from fairshare_app import selectors, services, sshare
from fairshare_app.api import serializers as s
from fairshare_app.api.renderers import (
    SshareAliasRenderer,
    SshareParsable2Renderer,
    SshareParsableRenderer,
    SshareTextRenderer,
    UsageCSVRenderer,
)
from fairshare_app.models import GpuBudget
from queues_app.api.ids import path_id
from queues_app.api.permissions import IsOperator, IsTenantMemberOrOperator, ReadForMembersWriteForOperators, caller_of
from queues_app import selectors as queue_selectors
from queues_app.errors import ApplicationError
from queues_app.models import Queue

USAGE_COLUMNS = ["period", "queue", "tenant", "user", "gpu_hours", "cpu_hours", "memory_gib_hours"]
ID_PARAM = OpenApiParameter("pk", OpenApiTypes.INT, OpenApiParameter.PATH, description="Budget id.")


def _query(serializer_class, request):
    ser = serializer_class(data=request.query_params)
    ser.is_valid(raise_exception=True)
    return ser.validated_data


class UsageReportApi(APIView):
    """GPU-hours, CPU core-hours and memory GiB-hours per queue / tenant / user over a date range.

    ``?start=&end=`` (ISO 8601), ``group_by=queue|tenant|user|queue_user``,
    ``bucket=none|hour|day|month``, ``queues=a,b``; ``?format=csv`` for a CSV export.
    Tenants see the usage of their own workloads.
    """

    permission_classes = [IsTenantMemberOrOperator]
    renderer_classes = [JSONRenderer, UsageCSVRenderer]

    @extend_schema(parameters=[s.UsageQuery], responses={200: dict})
    def get(self, request):
        caller = caller_of(request)
        q = _query(s.UsageQuery, request)
        rows = selectors.usage_report(tenant=caller.tenant, start=q["start"], end=q["end"], group_by=q["group_by"],
                                      bucket=q["bucket"], queues=q.get("queues") or ())
        cols = [c for c in USAGE_COLUMNS if not rows or c in rows[0]] if rows else \
            [c for c in USAGE_COLUMNS if c in {"queue", "gpu_hours", "cpu_hours", "memory_gib_hours"}]
        response = Response({"start": q["start"], "end": q["end"], "group_by": q["group_by"], "bucket": q["bucket"],
                             "columns": cols, "rows": rows})
        if request.accepted_renderer.format == "csv":
            response["Content-Disposition"] = 'attachment; filename="usage.csv"'
        return response


class UsageSeriesApi(APIView):
    """Per-queue time series (allocated GPUs, GPU fair share, normalised GPU usage) for charts."""

    permission_classes = [IsTenantMemberOrOperator]

    @extend_schema(parameters=[s.SeriesQuery], responses={200: dict})
    def get(self, request):
        caller = caller_of(request)
        q = _query(s.SeriesQuery, request)
        return Response({"series": selectors.usage_timeseries(tenant=caller.tenant, start=q["start"], end=q["end"],
                                                              queues=q.get("queues") or ())})


class NormalizedUsageApi(APIView):
    """The normalised usage U (0..1 of the cluster) per queue that the engine currently receives."""

    permission_classes = [IsTenantMemberOrOperator]

    @extend_schema(responses={200: dict})
    def get(self, request):
        caller = caller_of(request)
        state = selectors.accounting_state()
        cfg = selectors.fairshare_settings()
        return Response({"usage": selectors.normalized_usage(tenant=caller.tenant), "k_value": cfg.k_value,
                         "accounted_until": state.accounted_until if state else None})


class SshareApi(APIView):
    """Slurm-compatible fair-share report (``sshare``).

    ``?format=json`` (default) | ``text`` (or ``sshare``) | ``parsable`` | ``parsable2``;
    ``algorithm=fair_tree|classic`` (default: the settings), ``long=1`` (NormUsage, LevelFS),
    ``kai=1`` (KAI columns after the Slurm ones), ``accounts=``, ``users=``, ``users_only=1``,
    ``columns=`` (like ``--format``).
    """

    permission_classes = [IsTenantMemberOrOperator]
    renderer_classes = [JSONRenderer, SshareTextRenderer, SshareAliasRenderer, SshareParsableRenderer,
                        SshareParsable2Renderer]

    @extend_schema(parameters=[s.SshareQuery], responses={200: dict})
    def get(self, request):
        caller = caller_of(request)
        q = _query(s.SshareQuery, request)
        rows, meta = selectors.sshare_rows(tenant=caller.tenant, algorithm=q.get("algorithm"),
                                           accounts=q.get("accounts") or (), users=q.get("users") or (),
                                           users_only=q["users_only"])
        algorithm = meta["algorithm"]
        columns = q.get("columns") or sshare.default_columns(long=q["long"], algorithm=algorithm, kai=q["kai"])
        fmt = request.accepted_renderer.format
        if fmt == "json":
            return Response(sshare.as_json(rows, algorithm, meta))
        output = "text" if fmt == "sshare" else fmt
        return Response({"rows": len(rows), "text": sshare.render(rows, columns=columns, algorithm=algorithm,
                                                                   output=output)})


def _budget_or_404(caller, pk: str) -> GpuBudget:
    """A path id as an int, or a JSON 404 (never an HTML 404 or an overflow 500)."""
    return selectors.budget_get(tenant=caller.tenant, pk=path_id(pk))


class BudgetListApi(APIView):
    """GPU-hour budgets with burn-down (tenants: budgets of their queues and ancestors); POST
    creates one (operators)."""

    permission_classes = [ReadForMembersWriteForOperators]

    @extend_schema(operation_id="fairshare_budgets_list", responses={200: dict})
    def get(self, request):
        caller = caller_of(request)
        statuses = selectors.budget_statuses(tenant=caller.tenant, with_burn_down=True)
        return Response({"results": [st.as_dict() for st in statuses]})

    @extend_schema(request=s.BudgetCreate, responses={201: dict})
    def post(self, request):
        ser = s.BudgetCreate(data=request.data)
        ser.is_valid(raise_exception=True)
        data = dict(ser.validated_data)
        try:
            queue = queue_selectors.queue_get(tenant=None, name=data.pop("queue"))
        except Queue.DoesNotExist:
            raise ApplicationError("Invalid budget.", extra={"queue": ["No queue with this name."]}) from None
        budget = services.budget_create(queue=queue, actor=request.user, **data)
        st = selectors.budget_statuses(tenant=None, budgets=[budget], with_burn_down=True)[0]
        return Response(st.as_dict(), status=status.HTTP_201_CREATED)


@extend_schema_view(get=extend_schema(parameters=[ID_PARAM]), patch=extend_schema(parameters=[ID_PARAM]),
                    delete=extend_schema(parameters=[ID_PARAM]))
class BudgetDetailApi(APIView):
    """One budget with its burn-down; PATCH / DELETE for operators."""

    permission_classes = [ReadForMembersWriteForOperators]

    @extend_schema(operation_id="fairshare_budgets_retrieve", responses={200: dict})
    def get(self, request, pk: str):
        caller = caller_of(request)
        budget = _budget_or_404(caller, pk)
        return Response(selectors.budget_statuses(tenant=caller.tenant, budgets=[budget],
                                                  with_burn_down=True)[0].as_dict())

    @extend_schema(request=s.BudgetUpdate, responses={200: dict})
    def patch(self, request, pk: str):
        caller = caller_of(request)
        budget = _budget_or_404(caller, pk)
        ser = s.BudgetUpdate(data=request.data, partial=True)
        ser.is_valid(raise_exception=True)
        budget = services.budget_update(budget=budget, data=dict(ser.validated_data))
        return Response(selectors.budget_statuses(tenant=None, budgets=[budget], with_burn_down=True)[0].as_dict())

    @extend_schema(responses={204: None})
    def delete(self, request, pk: str):
        caller = caller_of(request)
        services.budget_delete(budget=_budget_or_404(caller, pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SettingsApi(APIView):
    """The fair-share settings (read: members and operators; PATCH: operators, validated)."""

    permission_classes = [ReadForMembersWriteForOperators]

    @extend_schema(responses={200: dict})
    def get(self, request):
        caller_of(request)
        return Response(s.settings_out(selectors.fairshare_settings()))

    @extend_schema(request=s.SettingsUpdate, responses={200: dict})
    def patch(self, request):
        ser = s.SettingsUpdate(data=request.data, partial=True)
        ser.is_valid(raise_exception=True)
        cfg = services.fairshare_settings_update(data=dict(ser.validated_data), actor=request.user)
        return Response(s.settings_out(cfg))


class AccountingStateApi(APIView):
    """Accounting bookkeeping (operators): accounted until, no-op runs, clock regressions, skipped time."""

    permission_classes = [IsOperator]

    @extend_schema(responses={200: dict})
    def get(self, request):
        st = selectors.accounting_state()
        if st is None:
            return Response({"accounted_until": None})
        return Response({"accounted_until": st.accounted_until, "last_run_at": st.last_run_at, "runs": st.runs,
                         "noop_runs": st.noop_runs, "clock_regressions": st.clock_regressions,
                         "skipped_seconds": st.skipped_seconds, "last_compacted_at": st.last_compacted_at})
