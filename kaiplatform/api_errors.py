"""Every answer under ``/api/`` is JSON, errors included.

DRF's exception handler (``queues_app.api.exceptions``) shapes the errors it knows; this
middleware covers the rest, so a client (and a hostile tenant) never gets an HTML page, a
traceback or the URL list:

* an exception no handler maps: 500 ``{"message": "Server error.", "extra": {}}`` (logged with
  its traceback on ``django.request`` as Django would);
* the database unreachable, or a lock / statement timeout (``OperationalError`` /
  ``InterfaceError``): 503 with ``Retry-After`` -- the request may simply be retried;
* a value the database refuses (``DataError``: the validation is meant to stop those first):
  400 rather than a 500;
* any error page Django rendered (the URL resolver's 404, a 500 page, DEBUG's technical pages):
  the same status with the JSON error body (DRF's own error responses keep the format the
  client negotiated);
* a NUL character in a query parameter or header: 400 naming it, in the path: 404 -- before any
  view passes it to the database (PostgreSQL refuses NUL in text; JSON bodies are checked by
  the API's parser).

Installed first in ``MIDDLEWARE`` so it sees every response.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from django.db import DataError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger("django.request")

API_PREFIX = "/api/"
#: Seconds a client should wait before retrying after a 503 (a database restart or failover).
RETRY_AFTER_SECONDS = 5
MESSAGES = {
    400: "Bad request.", 401: "Authentication required.", 403: "Permission denied.", 404: "Not found.",
    405: "Method not allowed.", 406: "Not acceptable.", 413: "Request body too large.",
    415: "Unsupported media type.", 429: "Too many requests.", 500: "Server error.",
    502: "Bad gateway.", 503: "Service unavailable.", 504: "Gateway timeout.",
}


def error_response(status: int, message: str | None = None, extra: dict[str, list[str]] | None = None,
                   ) -> JsonResponse:
    """The API's one error shape (``ErrorSerializer``): ``{"message", "extra": {field: [why]}}``."""
    body = {"message": message or MESSAGES.get(status, "Request failed."), "extra": extra or {}}
    response = JsonResponse(body, status=status)
    if status == 503:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _is_django_page(response: HttpResponse) -> bool:
    """An error page Django rendered (HTML, or plain text): not a DRF response, which already
    carries the error body in the format the client negotiated (JSON, CSV, sshare text, the
    browsable API)."""
    if hasattr(response, "accepted_renderer"):
        return False
    kind = (response.get("Content-Type") or "").lower()
    return "json" not in kind


class ApiJsonErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(API_PREFIX):
            refused = _nul_refusal(request)
            if refused is not None:
                return refused
        response = self.get_response(request)
        if (request.path.startswith(API_PREFIX) and response.status_code >= 400 and _is_django_page(response)
                and not getattr(response, "streaming", False)):
            replaced = error_response(response.status_code)
            for header in ("Retry-After", "Allow", "WWW-Authenticate"):
                if header in response:
                    replaced[header] = response[header]
            return replaced
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not request.path.startswith(API_PREFIX):
            return None
        return api_exception_response(request, exception)


NUL_MESSAGE = "Null characters are not allowed."


def _nul_refusal(request: HttpRequest) -> JsonResponse | None:
    if "\x00" in request.path:
        return error_response(404)
    bad = sorted({key for key, values in request.GET.lists()
                  if "\x00" in key or any("\x00" in v for v in values)})
    bad += sorted(key[5:].replace("_", "-").title() for key, value in request.META.items()
                  if key.startswith("HTTP_") and isinstance(value, str) and "\x00" in value)
    if bad:
        return error_response(400, "Invalid input.", {key.replace("\x00", "\\0"): [NUL_MESSAGE] for key in bad[:20]})
    return None


def api_exception_response(request: Any, exception: Exception) -> JsonResponse:
    """The JSON answer (and the log line) for an exception no handler mapped."""
    if isinstance(exception, (OperationalError, InterfaceError)):
        logger.warning("Database unavailable: %s %s: %s: %s", request.method, request.path,
                       type(exception).__name__, exception)
        return error_response(503, "The database is unavailable or busy; retry shortly.",
                              {"database": ["Unavailable or busy; retry after the Retry-After seconds."]})
    if isinstance(exception, DataError):
        logger.warning("Value refused by the database: %s %s: %s", request.method, request.path, exception)
        return error_response(400, "Invalid input.",
                              {"non_field_errors": ["A value is out of range or holds a character the "
                                                    "database refuses."]})
    logger.error("Internal Server Error: %s", request.path, exc_info=exception,
                 extra={"status_code": 500, "request": request})
    return error_response(500)
