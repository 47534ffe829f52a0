"""Tenant writes: create, rename, members, queue grants (leaf queues only); a user's API token."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from rest_framework.authtoken.models import Token

from queues_app.errors import ApplicationError
from queues_app.models import Queue, Tenant
from queues_app.services.common import advisory_xact_lock, model_update, validate


def _check_leaves(queues: Iterable[Queue]) -> list[Queue]:
    queues = list(queues)
    ids = [q.pk for q in queues]
    inner = set(Queue.objects.filter(parent_id__in=ids).values_list("parent__name", flat=True))
    if inner:
        raise ApplicationError("Invalid grant.", extra={"queues": [
            f"Only leaf queues can be granted; {', '.join(sorted(inner))} has child queues."]})
    return queues


@transaction.atomic
def tenant_create(
    *,
    name: str,
    display_name: str = "",
    members: Iterable[AbstractBaseUser] = (),
    queues: Iterable[Queue] = (),
) -> Tenant:
    tenant = Tenant(name=name, display_name=display_name)
    validate(tenant, message="Invalid tenant.")
    # Grants read the tree: serialize with tree writes so a queue cannot gain a child meanwhile.
    advisory_xact_lock("queue_tree")
    queues = _check_leaves(queues)
    tenant.save()
    tenant.members.set(list(members))
    tenant.queues.set(queues)
    return tenant


@transaction.atomic
def tenant_update(*, tenant: Tenant, data: Mapping[str, Any]) -> Tenant:
    unknown = sorted(set(data) - {"name", "display_name", "is_active"})
    if unknown:
        raise ApplicationError("Invalid tenant.", extra={k: ["This field cannot be updated here."] for k in unknown})
    tenant, _ = model_update(instance=tenant, fields=("name", "display_name", "is_active"), data=dict(data),
                             message="Invalid tenant.")
    return tenant


@transaction.atomic
def tenant_set_members(*, tenant: Tenant, members: Iterable[AbstractBaseUser]) -> Tenant:
    tenant.members.set(list(members))
    return tenant


@transaction.atomic
def tenant_grant_queue(*, tenant: Tenant, queue: Queue) -> Tenant:
    advisory_xact_lock("queue_tree")
    _check_leaves([queue])
    tenant.queues.add(queue)
    return tenant


@transaction.atomic
def tenant_revoke_queue(*, tenant: Tenant, queue: Queue) -> Tenant:
    """Existing workloads stay; only new submissions are refused."""
    tenant.queues.remove(queue)
    return tenant


@transaction.atomic
def api_token_issue(*, user: AbstractBaseUser) -> str:
    """The user's API token (created on first use; one token per user, as DRF's authtoken)."""
    token, _ = Token.objects.get_or_create(user=user)
    return token.key
