"""The one DRF exception handler: every error body is ``{"message": str, "extra": {field: [str]}}``.

* ``ApplicationError`` / Django ``ValidationError`` from services -> 400 naming the field
  (``IdempotencyConflict`` -> 422: the body is valid, the key was used for another one);
* DRF ``ValidationError`` from serializers -> 400, nested errors flattened to paths like
  ``tasks[2].gpu`` or ``quotas.gpu.limit`` (the same keys the services use);
* ``Http404`` / ``DoesNotExist`` -> 404 (no existence oracle: another tenant's object looks
  exactly like a missing one);
* an oversize body -> 413; throttling -> 429 with ``Retry-After``; 401 / 403 / 405 / 415 as DRF.
"""
from __future__ import annotations

from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from queues_app.errors import ApplicationError
from queues_app.services.workloads import IdempotencyConflict

NOT_FOUND = "Not found."


def _flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail -> {dotted.path[index]: [messages]}."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            if isinstance(key, int):  # ListField / ListSerializer errors are keyed by index
                for k, v in _flatten(value, f"{prefix}[{key}]").items():
                    out.setdefault(k, []).extend(v)
                continue
            key = str(key)
            if key in ("non_field_errors", NON_FIELD_ERRORS):
                path = prefix or NON_FIELD_ERRORS
            else:
                path = f"{prefix}.{key}" if prefix else key
            for k, v in _flatten(value, path).items():
                out.setdefault(k, []).extend(v)
    elif isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            out.setdefault(prefix or NON_FIELD_ERRORS, []).extend(str(item) for item in detail)
        else:
            for i, item in enumerate(detail):
                if item in ({}, [], None):
                    continue
                for k, v in _flatten(item, f"{prefix}[{i}]").items():
                    out.setdefault(k, []).extend(v)
    else:
        out.setdefault(prefix or NON_FIELD_ERRORS, []).append(str(detail))
    return out


def _body(message: str, extra: dict[str, list[str]] | None = None) -> dict[str, Any]:
    return {"message": message, "extra": extra or {}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, IdempotencyConflict):
        return Response(_body(exc.message, exc.extra), status=status.HTTP_422_UNPROCESSABLE_ENTITY)
    if isinstance(exc, ApplicationError):
        return Response(_body(exc.message, exc.extra), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DjangoValidationError):
        app = ApplicationError.from_validation_error(exc)
        return Response(_body(app.message, app.extra), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, RequestDataTooBig):
        return Response(_body("Request body too large.", {NON_FIELD_ERRORS: [str(exc) or "Body exceeds the limit."]}),
                        status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, (Http404, ObjectDoesNotExist)):
        return Response(_body(NOT_FOUND), status=status.HTTP_404_NOT_FOUND)
    if isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ValidationError):
        return Response(_body("Invalid input.", _flatten(exc.detail)), status=status.HTTP_400_BAD_REQUEST)

    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = getattr(exc, "detail", None)
    message = str(detail) if detail is not None and not isinstance(detail, (dict, list)) else "Request failed."
    extra = _flatten(detail) if isinstance(detail, (dict, list)) else {}
    response.data = _body(message, extra)
    return response
