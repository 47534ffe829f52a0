"""Page-number pagination with a hard cap on the page size (OWASP API4)."""
from __future__ import annotations

from rest_framework import pagination

from queues_app.errors import ApplicationError


class PageNumberPagination(pagination.PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request) -> int:
        """``page_size`` is a whole number from 1 (larger ones are capped at ``max_page_size``);
        ``0``, ``-5`` or ``abc`` are a 400 naming it, not silently the default."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        text = raw.strip()
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise ApplicationError("Invalid query parameter.", extra={self.page_size_query_param: [
                f"Must be a whole number from 1 to {self.max_page_size}."]})
        return min(int(text[:12]), self.max_page_size)
