"""OpenAPI generation: every operation documents the error responses it can really return.

drf-spectacular documents only the success response by default; schemathesis' conformance
checks (rightly) fail on an undocumented 400 or 404.  Every error body is ``Error``.
"""
from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from queues_app.api.serializers import ErrorSerializer

ERROR_DESCRIPTIONS = {
    "400": "Invalid input; `extra` names each field with its reasons.",
    "401": "Not authenticated.",
    "403": "Authenticated, but not allowed (not a tenant member, or an operator endpoint).",
    "404": "Not found (also for objects of other tenants).",
    "413": "Request body too large.",
    "422": "Idempotency-Key reused for a different request.",
    "429": "Throttled; see the Retry-After header.",
}


class KaiAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)

        codes = ["400", "401", "403", "404", "429"]
        if self.method in ("POST", "PUT", "PATCH"):
            codes.append("413")
        if getattr(self.view, "action", None) == "create" and self.path.rstrip("/").endswith("workloads"):
            codes.append("422")
        for code in codes:
            if code not in responses:
                response = self._get_response_for_code(ErrorSerializer, code, direction=direction)
                response["description"] = ERROR_DESCRIPTIONS[code]
                responses[code] = response
        return responses
