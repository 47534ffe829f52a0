"""Operator API: what-if previews on the live state -- a queue edit (``POST
/api/v1/queues/{id}/whatif/``) and a scale-up (``POST /api/v1/nodes/scale-up-preview/``).

Body (every key optional; QueueResource units, -1 = unlimited / unset)::

    {"priority": 200, "quotas": {"gpu": {"quota": 8, "over_quota_weight": 2, "limit": -1}}}

Answer: ``whatif.preview_queue_edit``'s result: ``queues`` (per queue ``fairShareBefore``,
``fairShareAfter``, ``allocated``), ``evictions`` (running tasks the next cycle would reclaim /
preempt / consolidate with the edit), ``evictionsWithoutEdit``, ``newEvictions``,
``placements`` and ``queue``.  Nothing is stored.  Operators only (``IsOperator``); bad values
get the API's usual 400 naming the field.
"""
from __future__ import annotations

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from queues_app import constants
from queues_app.api import serializers as s
from queues_app.api.ids import path_id
from queues_app.api.permissions import IsOperator
from queues_app.cycle import whatif
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
            queue_id = path_id(pk)
            Queue.objects.only("pk").get(pk=queue_id)
        except (Http404, Queue.DoesNotExist):
            raise NotFound("No such queue.") from None
        ser = QueueWhatIfInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = ser.validated_data
        answer = whatif.preview_queue_edit(
            queue_id=queue_id, priority=d.get("priority"),
            resources={r: dict(v) for r, v in (d.get("quotas") or {}).items()})
        return Response(answer)


class ScaleUpShapeSerializer(s.StrictSerializer):
    gpus = s.bounded_int(min_value=0, max_value=constants.MAX_NODE_GPUS, required=False)
    gpu_memory_mib = s.bounded_int(min_value=0, max_value=constants.MAX_GPU_MEMORY_MIB, required=False)
    cpu_millis = s.bounded_int(min_value=0, max_value=constants.MAX_NODE_CPU_MILLIS, required=False)
    memory_bytes = s.bounded_int(min_value=0, max_value=constants.MAX_NODE_MEMORY_BYTES, required=False)
    labels = s.LabelMapField()
    devices = serializers.DictField(child=s.bounded_int(min_value=0, max_value=constants.MAX_NODE_DEVICES),
                                    required=False, allow_empty=True,
                                    help_text="DRA devices offered: {device class: count} (declared classes).")


class ScaleUpPreviewInputSerializer(s.StrictSerializer):
    count = s.bounded_int(min_value=1, max_value=whatif.MAX_PREVIEW_NODES)
    like = serializers.CharField(max_length=253, required=False, help_text="Copy this node's shape.")
    node = ScaleUpShapeSerializer(required=False, help_text="Or give the shape.")
    name_prefix = s.name_field(max_length=200, required=False,
                               help_text="Added nodes are <name_prefix>-1..count (default scale-up).")


class ScaleUpPreviewApi(APIView):
    """What would ``count`` more nodes of one shape do in the next cycle (nothing is stored)?

    Body: ``{"count": 4, "like": "node-a"}`` or ``{"count": 4, "node": {"gpus": 8, "gpu_memory_mib":
    81920, "cpu_millis": 96000, "memory_bytes": ..., "labels": {...}}}``.  Answer:
    ``whatif.preview_scale_up``: ``nodesAdded``, ``queues`` (per queue ``fairShareBefore``,
    ``fairShareAfter``, ``allocated``, ``allocatedAfter``), ``starts`` (the pending workloads that
    would start, by scenario job name), ``jobs`` (every waiting job: statuses and tasks placed
    without / with the nodes, ``waitingBefore`` / ``waitingAfter``), ``workloads`` (job name ->
    workload id), ``evictions``, ``newEvictions``, ``placements``, ``node``.  Operators only.
    """

    permission_classes = [IsOperator]

    @extend_schema(request=ScaleUpPreviewInputSerializer, responses={200: OpenApiTypes.OBJECT},
                   summary="Preview a scale-up: which pending workloads N more nodes would start, fair shares")
    def post(self, request):
        ser = ScaleUpPreviewInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = ser.validated_data
        answer = whatif.preview_scale_up(
            count=d["count"], like=d.get("like"), node=dict(d["node"]) if "node" in d else None,
            name_prefix=d.get("name_prefix") or "scale-up")
        return Response(answer)
