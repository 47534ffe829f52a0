"""Content negotiation: an unknown ``?format=`` is a 400 naming the parameter and the formats
the endpoint has (DRF answers 404, as if the resource did not exist)."""
from __future__ import annotations

from rest_framework.negotiation import DefaultContentNegotiation

from queues_app.errors import ApplicationError


class StrictFormatNegotiation(DefaultContentNegotiation):
    def filter_renderers(self, renderers, format):
        filtered = [r for r in renderers if r.format == format]
        if not filtered:
            formats = ", ".join(dict.fromkeys(r.format for r in renderers))
            raise ApplicationError("Invalid query parameter.", extra={
                self.settings.URL_FORMAT_OVERRIDE or "format": [f"Unknown format; use one of: {formats}."]})
        return filtered
