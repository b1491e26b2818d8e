"""Pages of every list: ``{"count", "next", "previous", "results"}``."""

from __future__ import annotations

from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """``?page=N`` (from 1) and ``?page_size=N`` (at most 100; PAGE_SIZE by default)."""

    page_size_query_param = "page_size"
    max_page_size = 100
