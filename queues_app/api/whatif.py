"""Operator API: what-if preview of a queue edit (``POST /api/v1/queues/{id}/whatif/``).

Body (every key optional; QueueResource units, -1 = unlimited / unset)::

    {"priority": 200, "quotas": {"gpu": {"quota": 8, "over_quota_weight": 2, "limit": -1}}}

Answer: ``engine_io.preview_queue_edit``'s result: ``queues`` (per queue ``fairShareBefore``,
``fairShareAfter``, ``allocated``), ``evictions`` (running tasks the next cycle would reclaim /
preempt / consolidate with the edit), ``evictionsWithoutEdit``, ``newEvictions``,
``placements`` and ``queue``.  Nothing is stored.  Operators only (``IsOperator``); bad values
get the API's usual 400 naming the field.
"""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from queues_app import engine_io
from queues_app.api import serializers as s
from queues_app.api.permissions import IsOperator
from queues_app.models import Queue


class QueueWhatIfInputSerializer(s.StrictSerializer):
    priority = s.bounded_int(min_value=-(2**31 - 1), max_value=2**31 - 1, required=False)
    quotas = s.QuotasInputSerializer(required=False)


class QueueWhatIfApi(APIView):
    permission_classes = [IsOperator]

    @extend_schema(request=QueueWhatIfInputSerializer, responses={200: OpenApiTypes.OBJECT},
                   summary="Preview a queue edit: fair shares before/after and the evictions it would cause")
    def post(self, request, pk: str):
        try:
            queue_id = int(pk)
            Queue.objects.only("pk").get(pk=queue_id)
        except (ValueError, Queue.DoesNotExist):
            raise NotFound("No such queue.") from None
        ser = QueueWhatIfInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = ser.validated_data
        answer = engine_io.preview_queue_edit(
            queue_id=queue_id, priority=d.get("priority"),
            resources={r: dict(v) for r, v in (d.get("quotas") or {}).items()})
        return Response(answer)
