"""Pages of every list: ``{"count", "next", "previous", "results"}``."""

from __future__ import annotations

from django.conf import settings
from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """``?page=N`` (from 1) and ``?page_size=N`` (at most 100; ``DATAFLOW_API_PAGE_SIZE`` by
    default, whatever the project's REST_FRAMEWORK PAGE_SIZE)."""

    page_size_query_param = "page_size"
    max_page_size = 100

    @property
    def page_size(self) -> int:  # pyright: ignore[reportIncompatibleVariableOverride]
        return settings.DATAFLOW_API_PAGE_SIZE
