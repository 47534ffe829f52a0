"""Page-number pagination with a hard cap on the page size (OWASP API4)."""
from __future__ import annotations

from rest_framework import pagination


class PageNumberPagination(pagination.PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500
