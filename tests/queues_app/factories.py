"""factory_boy factories that create rows through the services, so test data obeys the same
invariants as real data (paths, resource rows, audit, leaf-only workloads)."""
from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from queues_app.models import Node, Queue, Tenant, Workload
from queues_app.services.nodes import node_upsert
from queues_app.services.queues import queue_create
from queues_app.services.tenants import tenant_create
from queues_app.services.workloads import workload_submit


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda o: f"{o.username}@example.org")
    password = factory.django.Password("pw")


class QueueFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Queue

    name = factory.Sequence(lambda n: f"queue-{n}")
    parent = None
    priority = 100
    quotas = factory.LazyFunction(lambda: {"gpu": {"quota": 4}})

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return queue_create(**kwargs)


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node-{n:04d}")
    gpus = 8
    gpu_memory_mib = 81920
    cpu_millis = 64_000
    memory_bytes = 512 * 2**30
    labels = factory.LazyAttributeSequence(lambda o, n: {"kai.scheduler/rack": f"r{n % 2}"})

    @classmethod
    def _create(cls, model_class, *args, name, **kwargs):
        return node_upsert(name=name, **kwargs)[0]


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant

    name = factory.Sequence(lambda n: f"tenant-{n}")

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return tenant_create(**kwargs)


class WorkloadFactory(factory.django.DjangoModelFactory):
    """A one-task, one-GPU training workload on a fresh leaf queue unless ``queue`` is given."""

    class Meta:
        model = Workload

    queue = factory.SubFactory(QueueFactory)
    name = factory.Sequence(lambda n: f"job-{n}")
    priority = 50
    replicas = 1
    task = factory.LazyFunction(lambda: {"gpu": 1, "cpu_millis": 1000, "memory_bytes": 2**30})

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return workload_submit(**kwargs)
