"""The fair-share settings object: read (created with defaults on first use) and validated edits."""
from __future__ import annotations

from typing import Any, Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from fairshare_app.models import FairshareSettings
from fairshare_app.services.common import validate
from queues_app.errors import ApplicationError

EDITABLE_FIELDS = (
    "interval_seconds", "window_type", "window_size", "tumbling_start", "reset_period", "half_life", "k_value",
    "max_catchup", "raw_retention", "hourly_retention", "billing_weight_gpu", "billing_weight_cpu",
    "billing_weight_memory_gib", "sshare_algorithm",
)


def fairshare_settings_get() -> FairshareSettings:
    """The singleton row, created with the defaults if missing (a read that may insert once)."""
    obj = FairshareSettings.objects.filter(pk=1).first()
    if obj is not None:
        return obj
    try:
        with transaction.atomic():
            return FairshareSettings.objects.create(pk=1)
    except IntegrityError:  # created concurrently
        return FairshareSettings.objects.get(pk=1)


@transaction.atomic
def fairshare_settings_update(*, data: Mapping[str, Any], actor: AbstractBaseUser | None = None) -> FairshareSettings:
    """Validate and store an edit; unknown fields are an error, nothing is written on any error.

    ``version`` is bumped so cached normalised usage computed under the old settings is
    recognisably stale (the next accounting run recomputes it).
    """
    unknown = sorted(set(data) - set(EDITABLE_FIELDS))
    if unknown:
        raise ApplicationError("Invalid fair-share settings.",
                               extra={k: ["Unknown or read-only setting."] for k in unknown})
    fairshare_settings_get()
    obj = FairshareSettings.objects.select_for_update().get(pk=1)
    values, errors = {}, {}
    for name in EDITABLE_FIELDS:
        if name not in data:
            continue
        try:  # types first, so the bounds checks in clean() compare like with like
            values[name] = FairshareSettings._meta.get_field(name).to_python(data[name])
        except ValidationError as exc:
            errors[name] = list(exc.messages)
    if errors:
        raise ApplicationError("Invalid fair-share settings.", extra=errors)
    changed = [name for name, value in values.items() if getattr(obj, name) != value]
    for name in changed:
        setattr(obj, name, values[name])
    if not changed:
        return obj
    validate(obj, message="Invalid fair-share settings.")
    obj.version += 1
    obj.updated_by = actor
    obj.save()
    return obj
